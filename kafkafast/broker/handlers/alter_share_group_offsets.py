"""AlterShareGroupOffsets (key 91), version 0: sets the start offset of share-partitions of an
empty share group (kafka-share-groups.sh --reset-offsets), served by the group's coordinator
(NOT_COORDINATOR elsewhere): their state starts again there with the next state epoch and no
records in flight, written by each key's share coordinator (in a cluster, possibly another
broker: InitializeShareGroupState) before the answer; the partition's leader loads it when a
share session opens there. READ on the group (GROUP_AUTHORIZATION_FAILED) and on each topic
(TOPIC_AUTHORIZATION_FAILED); NON_EMPTY_GROUP while the group has members;
UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist; an offset outside the log
answers OFFSET_OUT_OF_RANGE (checked where this broker leads the partition).
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.offsets import group_error
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_share_group_offsets import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = AlterShareGroupOffsetsResponse
EC = E.ErrorCode


async def _alter(broker, group_id: str, meta, p: int, offset: int) -> tuple[int, str | None]:
    if not 0 <= p < meta.partitions:
        return EC.UNKNOWN_TOPIC_OR_PARTITION, None
    part = broker.get_partition(meta.name, p)
    if part is not None and not broker.replicas.fetch_error(part, -1) and not (
            part.log_start_offset <= offset <= part.high_watermark):
        return EC.OFFSET_OUT_OF_RANGE, f"{offset} is outside [{part.log_start_offset}, {part.high_watermark}]"
    try:
        await broker.share.store.reset((group_id, meta.topic_id, p), offset)
    except E.KafkaError as exc:
        return exc.code, exc.message
    broker.share.forget_share_partition(group_id, meta.topic_id, p)
    return 0, None


@handles(AlterShareGroupOffsetsRequest, 0, 0)
async def handle(broker, ctx, req: AlterShareGroupOffsetsRequest, version: int) -> AlterShareGroupOffsetsResponse:
    group_err = group_error(broker, ctx, req.group_id, acl.READ, "alter_share_group_offsets", must_be_empty=True)
    out = []
    for t in req.topics:
        meta = broker.topics.get(t.topic_name)
        topic_err = (group_err or (EC.TOPIC_AUTHORIZATION_FAILED if denied(broker, ctx, acl.READ, acl.TOPIC, t.topic_name)
                                   else EC.UNKNOWN_TOPIC_OR_PARTITION if meta is None else 0))
        parts = []
        for p in t.partitions:
            err, msg = (topic_err, None) if topic_err else await _alter(broker, req.group_id, meta,
                                                                         p.partition_index, p.start_offset)
            parts.append(R.AlterShareGroupOffsetsResponsePartition(partition_index=p.partition_index, error_code=err,
                                                                   error_message=msg))
        out.append(R.AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name,
                                                         topic_id=meta.topic_id if meta is not None else bytes(16),
                                                         partitions=parts))
    err = await broker.share.store.settled()
    if err:
        for t in out:
            for p in t.partitions:
                p.error_code = p.error_code or err
    return R(throttle_time_ms=0, responses=out)
