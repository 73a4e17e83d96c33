"""InitializeShareGroupState (key 83), version 0: a share-partition's state starts again at a
start offset with a state epoch and no in-flight records (a new snapshot in
`__share_group_state`); an older state epoch answers FENCED_STATE_EPOCH. Inter-broker:
CLUSTER_ACTION on the cluster.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.state_requests import per_partition
from kafkafast.protocol._generated.initialize_share_group_state import (InitializeShareGroupStateRequest,
                                                                         InitializeShareGroupStateResponse)

R = InitializeShareGroupStateResponse


@handles(InitializeShareGroupStateRequest, 0, 0)
async def handle(broker, ctx, req: InitializeShareGroupStateRequest, version: int) -> InitializeShareGroupStateResponse:
    done = await per_partition(broker, ctx, req.group_id, req.topics,
                         lambda key, p: broker.share.store.initialize(key, p.state_epoch, p.start_offset))
    return R(results=[R.InitializeStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=p.partition, error_code=err, error_message=msg) for p, err, msg, _ in rs])
        for tid, rs in done])
