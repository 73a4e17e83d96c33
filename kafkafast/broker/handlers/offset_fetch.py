"""OffsetFetch (key 9), versions 0-9 (v0 is v1: the offsets Kafka stores; v9 adds the
member id and epoch of a KIP-848 member, checked in a consumer group as Kafka does:
UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; a null member id with epoch -1 is an admin fetch).

Committed offsets of a group: offset -1 (metadata "", leader epoch -1) where nothing was
committed. A null topic list (v2+) means every committed partition. Group errors
(COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, ...) go per partition in v1 and at the
top level from v2; v8 asks for several groups at once and answers each with its own
error. `require_stable` (v7+) changes nothing: there are no pending transactional offsets.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = OffsetFetchResponse


def _lookup(coordinator, group_id, topics, member=None):
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    err, found = coordinator.fetch_offsets(group_id, wanted, member)
    if err and wanted is not None:
        found = [(t, p, None) for t, p in wanted]
    by_topic: dict[str, list] = {}
    for t, p, c in found:
        by_topic.setdefault(t, []).append((p, c))
    return err, by_topic


def _authorized(broker, ctx, group_id, topics, err, by_topic):
    """Describe on the group (else GROUP_AUTHORIZATION_FAILED and no offsets) and on each
    topic: (error, offsets by topic, refused topics). Named topics the principal may not
    describe answer TOPIC_AUTHORIZATION_FAILED without an offset; with a null list (all
    topics) they are left out."""
    if denied(broker, ctx, acl.DESCRIBE, acl.GROUP, group_id):
        return E.ErrorCode.GROUP_AUTHORIZATION_FAILED, {}, set()
    refused = {t for t in by_topic if denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t)}
    if not refused:
        return err, by_topic, refused
    if topics is None:
        return err, {t: parts for t, parts in by_topic.items() if t not in refused}, set()
    return err, {t: [(p, None) for p, _ in parts] if t in refused else parts for t, parts in by_topic.items()}, refused


@handles(OffsetFetchRequest, 0, 9)
async def handle(broker, ctx, req: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
    coordinator = broker.group_coordinator
    if version >= 8:
        groups = []
        for g in req.groups:
            err, by_topic, refused = _authorized(broker, ctx, g.group_id, g.topics,
                                                 *_lookup(coordinator, g.group_id, g.topics,
                                                         (g.member_id, g.member_epoch) if version >= 9 else None))
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=err, topics=[
                R.OffsetFetchResponseTopics(name=t, partitions=[
                    R.OffsetFetchResponsePartitions(
                        partition_index=p, committed_offset=c.offset if c else -1,
                        committed_leader_epoch=c.leader_epoch if c else -1, metadata=c.metadata if c else "",
                        error_code=E.ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in refused else 0)
                    for p, c in parts])
                for t, parts in by_topic.items()]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    err, by_topic, refused = _authorized(broker, ctx, req.group_id, req.topics,
                                         *_lookup(coordinator, req.group_id, req.topics))
    per_partition_err = err if version < 2 else 0
    return OffsetFetchResponse(throttle_time_ms=0, error_code=err if version >= 2 else 0, topics=[
        R.OffsetFetchResponseTopic(name=t, partitions=[
            R.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=c.offset if c else -1,
                committed_leader_epoch=c.leader_epoch if c else -1, metadata=c.metadata if c else "",
                error_code=E.ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in refused else per_partition_err)
            for p, c in parts])
        for t, parts in by_topic.items()])
