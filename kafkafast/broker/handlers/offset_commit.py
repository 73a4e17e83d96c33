"""OffsetCommit (key 8), versions 0-9.

v0 commits without a group generation (a simple commit, as Kafka stores them now), v1 adds
the generation and member and a per-partition commit timestamp (ignored: the expiry comes
from offsets.retention.minutes), v9 names the member epoch of a KIP-848 group: in a consumer
group the commit must come from a member (UNKNOWN_MEMBER_ID) at its current epoch
(STALE_MEMBER_EPOCH), with v9 (UNSUPPORTED_VERSION below), unless the group is empty and
the epoch is -1 (the admin client, a consumer without group management).

Stores committed offsets (with metadata and, v6+, leader epoch) in `__consumer_offsets`.
A commit with generation -1 to an Empty (or unknown) group is a "simple" commit without
group management. Errors per partition: UNKNOWN_TOPIC_OR_PARTITION for partitions that
do not exist, OFFSET_METADATA_TOO_LARGE over offset.metadata.max.bytes (4096), and the
group errors (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
FENCED_INSTANCE_ID v7+, COORDINATOR_LOAD_IN_PROGRESS, ...). v2-v4 carry a retention
time, which sets the offsets' expire timestamp when it is not -1. A static member's commit
(v7+) gets UNSUPPORTED_VERSION for every partition below inter.broker.protocol.version 2.3.
"""
from kafkafast.broker.group_coordinator import OffsetCommitEntry
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

PartResp = OffsetCommitResponse.OffsetCommitResponsePartition
TopicResp = OffsetCommitResponse.OffsetCommitResponseTopic


async def wait_replicated(broker, group_id: str, errors: dict) -> None:
    """Answer once the commit is in every ISR member of the group's partition (a lone replica:
    at once; else offsets.commit.timeout.ms, then COORDINATOR_NOT_AVAILABLE for what was
    stored, as Kafka)."""
    if await broker.group_coordinator.wait_replicated(group_id):
        for key, err in errors.items():
            if err == 0:
                errors[key] = E.ErrorCode.COORDINATOR_NOT_AVAILABLE


def commit_entries(broker, ctx, topics, refused_first: int, *, with_leader_epoch: bool
                   ) -> tuple[dict[tuple[str, int], int], list[OffsetCommitEntry]]:
    """(errors, entries) of an OffsetCommit or TxnOffsetCommit: `refused_first` (the group's
    or transactional id's ACL error) or READ on the topic, UNKNOWN_TOPIC_OR_PARTITION."""
    errors: dict[tuple[str, int], int] = {}
    entries = []
    for t in topics:
        for p in t.partitions:
            refused = refused_first or denied(broker, ctx, acl.READ, acl.TOPIC, t.name)
            if refused:
                errors[(t.name, p.partition_index)] = refused
            elif not broker.partition_exists(t.name, p.partition_index):
                errors[(t.name, p.partition_index)] = E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                entries.append(OffsetCommitEntry(t.name, p.partition_index, p.committed_offset,
                                                 p.committed_leader_epoch if with_leader_epoch else -1,
                                                 p.committed_metadata))
    return errors, entries


@handles(OffsetCommitRequest, 0, 9)
async def handle(broker, ctx, req: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
    refused = denied(broker, ctx, acl.READ, acl.GROUP, req.group_id)
    if (not refused and version >= 7 and req.group_instance_id is not None
            and not broker.group_coordinator.static_membership):
        refused = E.ErrorCode.UNSUPPORTED_VERSION  # below inter.broker.protocol.version 2.3, as in Kafka
    errors, entries = commit_entries(broker, ctx, req.topics, refused, with_leader_epoch=version >= 6)
    retention = req.retention_time_ms if 2 <= version <= 4 else -1
    if entries:
        errors.update(broker.group_coordinator.commit_offsets(
            req.group_id, req.member_id, req.group_instance_id if version >= 7 else None,
            req.generation_id_or_member_epoch, entries, retention_ms=retention, api_version=version))
        await wait_replicated(broker, req.group_id, errors)
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        TopicResp(name=t.name, partitions=[PartResp(partition_index=p.partition_index,
                                                    error_code=errors.get((t.name, p.partition_index), 0))
                                           for p in t.partitions])
        for t in req.topics])
