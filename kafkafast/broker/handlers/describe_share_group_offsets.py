"""DescribeShareGroupOffsets (key 90), version 0: each share-partition's start offset (the
first offset not yet acknowledged or archived; -1 when the group has no state for it) and the
partition's leader epoch, for the named topics or (null) every partition the group has state for here and every
partition of the topics its members subscribe to (the state read from each key's share
coordinator: in a cluster, possibly another broker). DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for the group) and on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions); NOT_COORDINATOR where the group is not
coordinated, GROUP_ID_NOT_FOUND for a group of another kind.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.offsets import group_error, stored_topics
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.describe_share_group_offsets import (DescribeShareGroupOffsetsRequest,
                                                                         DescribeShareGroupOffsetsResponse)
from kafkafast.security import acl
from kafkafast.security.context import denied

R = DescribeShareGroupOffsetsResponse
EC = E.ErrorCode


async def _group(broker, ctx, g) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup:
    err = group_error(broker, ctx, g.group_id, acl.DESCRIBE, "describe_share_group_offsets", must_be_empty=False)
    if err:
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=err, topics=[])
    if g.topics is not None:
        wanted = {t.topic_name: list(t.partitions) for t in g.topics}
    else:  # what the group has state for here, and every partition its members subscribe to
        wanted = stored_topics(broker, g.group_id)
        group = broker.share.groups.get(g.group_id)
        for name in sorted(group.subscribed_topics()) if group is not None else []:
            meta = broker.topics.get(name)
            if meta is not None:
                wanted[name] = sorted(set(wanted.get(name, [])) | set(range(meta.partitions)))
    topics = []
    for name, partitions in wanted.items():
        meta = broker.topics.get(name)
        refused = denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, name)
        parts = []
        for p in partitions:
            part = broker.get_partition(name, p) if meta is not None else None
            err = EC.TOPIC_AUTHORIZATION_FAILED if refused else EC.UNKNOWN_TOPIC_OR_PARTITION if part is None else 0
            state = None
            if not err:
                try:  # from the share coordinator (in a cluster, possibly another broker's)
                    state = await broker.share.store.fetch(g.group_id, meta.topic_id, p)
                except E.KafkaError as exc:
                    err = exc.code
            parts.append(R.DescribeShareGroupOffsetsResponsePartition(
                partition_index=p, error_code=err, start_offset=state.start_offset if state is not None else -1,
                leader_epoch=part.leader_epoch if part is not None else -1))
        topics.append(R.DescribeShareGroupOffsetsResponseTopic(
            topic_name=name, topic_id=meta.topic_id if meta is not None else bytes(16), partitions=parts))
    return R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=0, topics=topics)


@handles(DescribeShareGroupOffsetsRequest, 0, 0)
async def handle(broker, ctx, req: DescribeShareGroupOffsetsRequest, version: int) -> DescribeShareGroupOffsetsResponse:
    return R(throttle_time_ms=0, groups=[await _group(broker, ctx, g) for g in req.groups])
