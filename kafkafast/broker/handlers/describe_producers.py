"""DescribeProducers (key 61), version 0: the active producers of each partition (id, epoch,
last sequence, last timestamp, coordinator epoch of its last marker or -1, first offset of
the open transaction or -1), read from the
owner's producer state; TOPIC_AUTHORIZATION_FAILED without READ, UNKNOWN_TOPIC_OR_PARTITION,
KAFKA_STORAGE_ERROR for an offline log,
and NOT_LEADER_OR_FOLLOWER in a worker that does not own the partition (the client asks
again; in one process every partition is owned)."""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

R = DescribeProducersResponse


def _partition(broker, ctx, topic: str, index: int):
    code = denied(broker, ctx, acl.READ, acl.TOPIC, topic)
    part = None if code else broker.get_partition(topic, index)
    if not code and part is None:
        code = E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    elif not code and part.state.offline:
        code = E.ErrorCode.KAFKA_STORAGE_ERROR
    elif not code and not broker.owns(part):
        code = E.ErrorCode.NOT_LEADER_OR_FOLLOWER
    if code:
        return R.PartitionResponse(partition_index=index, error_code=code, error_message=None, active_producers=[])
    catch_up = getattr(part.log, "catch_up", None)
    if catch_up is not None:  # shared append: the batches other workers appended since
        catch_up()
    producers = [R.ProducerState(producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                                 last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                                 current_txn_start_offset=e.txn_first_offset)
                 for e in part.log.producers.producers.values()]
    return R.PartitionResponse(partition_index=index, error_code=0, error_message=None, active_producers=producers)


@handles(DescribeProducersRequest, 0, 0)
async def handle(broker, ctx, req: DescribeProducersRequest, version: int) -> DescribeProducersResponse:
    return R(throttle_time_ms=0, topics=[
        R.TopicResponse(name=t.name, partitions=[_partition(broker, ctx, t.name, p) for p in t.partition_indexes])
        for t in req.topics])
