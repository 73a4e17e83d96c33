"""ListPartitionReassignments (key 46), version 0 (admin, to the controller).

The reassignments in progress: per partition its current replicas (target + original), the
replicas being added and those being removed. `topics` null: every partition; partitions
not being reassigned are left out. NOT_CONTROLLER at a broker that is not the controller;
without `zookeeper.connect`, an empty list. Needs DESCRIBE on the cluster.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.list_partition_reassignments import (
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse)
from kafkafast.security import acl
from kafkafast.security.context import denied

R = ListPartitionReassignmentsResponse


@handles(ListPartitionReassignmentsRequest, 0, 0)
async def handle(broker, ctx, req: ListPartitionReassignmentsRequest, version: int) -> R:
    code = denied(broker, ctx, acl.DESCRIBE, acl.CLUSTER)
    if code:
        return R(error_code=code, error_message=None)
    tps = None
    if req.topics is not None:
        tps = [(t.name, p) for t in req.topics for p in t.partition_indexes]
    code, ongoing = await broker.control.list_reassignments(tps)
    if code:
        return R(error_code=code, error_message=None)
    by_topic: dict[str, list] = {}
    for (t, p), (replicas, adding, removing) in ongoing.items():
        by_topic.setdefault(t, []).append(R.OngoingPartitionReassignment(
            partition_index=p, replicas=replicas, adding_replicas=adding, removing_replicas=removing))
    return R(error_code=0, error_message=None,
             topics=[R.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()])
