"""ReadShareGroupStateSummary (key 87), version 0: the state epoch and start offset of
share-partitions (-1: no state), without their batches (what DescribeShareGroupOffsets needs).
Inter-broker: CLUSTER_ACTION on the cluster; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as
ReadShareGroupState.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.state_requests import per_partition
from kafkafast.protocol._generated.read_share_group_state_summary import (ReadShareGroupStateSummaryRequest,
                                                                           ReadShareGroupStateSummaryResponse)

R = ReadShareGroupStateSummaryResponse


@handles(ReadShareGroupStateSummaryRequest, 0, 0)
async def handle(broker, ctx, req: ReadShareGroupStateSummaryRequest, version: int) -> ReadShareGroupStateSummaryResponse:
    done = await per_partition(broker, ctx, req.group_id, req.topics, lambda key, p: broker.share.store.read(*key))
    return R(results=[R.ReadStateSummaryResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=p.partition, error_code=err, error_message=msg,
                          state_epoch=state.state_epoch if state is not None else 0,
                          start_offset=state.start_offset if state is not None else -1)
        for p, err, msg, state in rs]) for tid, rs in done])
