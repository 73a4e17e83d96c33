"""DeleteRecords (key 21), versions 0-2.

Moves each partition's log start offset to the requested offset (-1 means the high
watermark), deleting whole segments below it; answers the new low watermark. An offset
above the high watermark is OFFSET_OUT_OF_RANGE; a partition still loading at its owner worker
NOT_LEADER_OR_FOLLOWER, an offline one KAFKA_STORAGE_ERROR."""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

PartResult = DeleteRecordsResponse.DeleteRecordsPartitionResult
TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult


@handles(DeleteRecordsRequest, 0, 2)
async def handle(broker, ctx, req: DeleteRecordsRequest, version: int) -> DeleteRecordsResponse:
    out = []
    for t in req.topics:
        tr = TopicResult(name=t.name, partitions=[])
        out.append(tr)
        for p in t.partitions:
            part = broker.get_partition(t.name, p.partition_index)
            if part is None or denied(broker, ctx, acl.DELETE, acl.TOPIC, t.name):
                tr.partitions.append(PartResult(partition_index=p.partition_index, low_watermark=-1,
                                                error_code=denied(broker, ctx, acl.DELETE, acl.TOPIC, t.name)
                                                or E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            code = part.unavailable_error()
            if code:
                tr.partitions.append(PartResult(partition_index=p.partition_index, low_watermark=-1, error_code=code))
                continue
            target = part.high_watermark if p.offset == -1 else p.offset
            try:
                if target < 0 or target > part.high_watermark:
                    raise E.OffsetOutOfRangeError(f"offset {target} is above the high watermark")
                await broker.delete_records(part, target, internal=ctx.internal)
            except E.KafkaError as exc:
                tr.partitions.append(PartResult(partition_index=p.partition_index, low_watermark=-1,
                                                error_code=exc.code))
                continue
            tr.partitions.append(PartResult(partition_index=p.partition_index,
                                            low_watermark=part.log_start_offset, error_code=0))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=out)
