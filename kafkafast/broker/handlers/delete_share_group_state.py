"""DeleteShareGroupState (key 86), version 0: a share-partition's stored state is deleted
(tombstones for its ShareSnapshot and ShareUpdate keys in `__share_group_state`). Inter-broker:
CLUSTER_ACTION on the cluster.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.state_requests import per_partition
from kafkafast.protocol._generated.delete_share_group_state import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse

R = DeleteShareGroupStateResponse


@handles(DeleteShareGroupStateRequest, 0, 0)
async def handle(broker, ctx, req: DeleteShareGroupStateRequest, version: int) -> DeleteShareGroupStateResponse:
    done = await per_partition(broker, ctx, req.group_id, req.topics, lambda key, p: broker.share.store.delete(key))
    return R(results=[R.DeleteStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=p.partition, error_code=err, error_message=msg) for p, err, msg, _ in rs])
        for tid, rs in done])
