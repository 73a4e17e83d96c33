"""ReadShareGroupState (key 84), version 0: the share coordinator's answer for share-partitions:
state epoch, start offset (-1: no state yet) and the state batches (Available, Acknowledged,
Archived, with delivery counts) kept in `__share_group_state` (`broker/share/state_store.py`).
Inter-broker: CLUSTER_ACTION on the cluster; NOT_COORDINATOR where the group is not
coordinated (the state of a group's share-partitions is kept with the group), COORDINATOR_LOAD_IN_PROGRESS
while `__share_group_state` loads; FENCED_LEADER_EPOCH for a leader epoch older than the newest
a share-partition's leader read or wrote the state with (a newer one is the state's from now on).
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.state_requests import per_partition
from kafkafast.protocol._generated.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse

R = ReadShareGroupStateResponse


@handles(ReadShareGroupStateRequest, 0, 0)
async def handle(broker, ctx, req: ReadShareGroupStateRequest, version: int) -> ReadShareGroupStateResponse:
    def answer(p, err, msg, state):
        if err or state is None:
            return R.PartitionResult(partition=p.partition, error_code=err, error_message=msg, state_epoch=0,
                                     start_offset=-1, state_batches=[])
        return R.PartitionResult(partition=p.partition, error_code=0, state_epoch=state.state_epoch,
                                 start_offset=state.start_offset, state_batches=[
                                     R.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=c)
                                     for a, b, s, c in state.batches])

    done = await per_partition(broker, ctx, req.group_id, req.topics, lambda key, p: broker.share.store.read(*key, p.leader_epoch))
    return R(results=[R.ReadStateResult(topic_id=tid, partitions=[answer(*r) for r in rs]) for tid, rs in done])
