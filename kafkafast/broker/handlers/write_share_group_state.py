"""WriteShareGroupState (key 85), version 0: state batches (and a new start offset unless -1)
written over a share-partition's stored state, as the share coordinator does; a state epoch
older than the stored one answers FENCED_STATE_EPOCH, and before that a leader epoch older than
the newest the share-partition's leader read or wrote it with FENCED_LEADER_EPOCH (a former
leader's write; Kafka's share coordinator fences it so). The broker's own share-partitions write
through the store directly; a share-partition whose state is written this way is loaded again
on its next use. Inter-broker: CLUSTER_ACTION on the cluster.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.state_requests import per_partition
from kafkafast.protocol._generated.write_share_group_state import WriteShareGroupStateRequest, WriteShareGroupStateResponse

R = WriteShareGroupStateResponse


@handles(WriteShareGroupStateRequest, 0, 0)
async def handle(broker, ctx, req: WriteShareGroupStateRequest, version: int) -> WriteShareGroupStateResponse:
    def write(key, p):
        broker.share.store.write_batches(key, p.state_epoch, p.start_offset, [
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches],
            p.leader_epoch)

    done = await per_partition(broker, ctx, req.group_id, req.topics, write)
    return R(results=[R.WriteStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=p.partition, error_code=err, error_message=msg) for p, err, msg, _ in rs])
        for tid, rs in done])
