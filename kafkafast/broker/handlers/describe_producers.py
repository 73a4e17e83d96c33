"""DescribeProducers (key 61), version 0.

The active producers of each requested partition as its producer state holds them
(`storage/producer_state.py`): producer id, epoch, last sequence, last timestamp; no
transaction is ever open here before the transaction coordinator exists (coordinator epoch
-1, current_txn_start_offset -1). Errors per partition: TOPIC_AUTHORIZATION_FAILED without
READ on the topic, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR for an offline log,
NOT_LEADER_OR_FOLLOWER in cluster mode where this broker does not lead it.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = DescribeProducersResponse


def _partition(broker, ctx, topic: str, index: int):
    if denied(broker, ctx, acl.READ, acl.TOPIC, topic):
        return R.PartitionResponse(partition_index=index, error_code=E.ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                   active_producers=[])
    part = broker.get_partition(topic, index)
    code = 0
    if part is None:
        code = E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    elif part.state.offline:
        code = E.ErrorCode.KAFKA_STORAGE_ERROR
    elif getattr(broker, "cluster", None) is not None and not part.is_leader:
        code = E.ErrorCode.NOT_LEADER_OR_FOLLOWER
    if code:
        return R.PartitionResponse(partition_index=index, error_code=code, active_producers=[])
    producers = sorted(part.log.producers.producers.values(), key=lambda p: p.producer_id)
    return R.PartitionResponse(partition_index=index, error_code=0, error_message=None, active_producers=[
        R.ProducerState(producer_id=p.producer_id, producer_epoch=p.epoch, last_sequence=p.last_seq,
                        last_timestamp=p.last_timestamp, coordinator_epoch=-1, current_txn_start_offset=-1)
        for p in producers])


@handles(DescribeProducersRequest, 0, 0)
async def handle(broker, ctx, req: DescribeProducersRequest, version: int) -> DescribeProducersResponse:
    return R(throttle_time_ms=0, topics=[
        R.TopicResponse(name=t.name, partitions=[_partition(broker, ctx, t.name, i) for i in t.partition_indexes])
        for t in req.topics])
