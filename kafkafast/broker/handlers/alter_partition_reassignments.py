"""AlterPartitionReassignments (key 45), version 0 (admin: kafka-reassign-partitions.sh, to the
controller).

Per partition, `replicas` is the target replica list (null cancels a reassignment in
progress). The controller adds the new replicas (topic znode `adding_replicas` /
`removing_replicas`), answers at once, and finishes in the background when they are all in
the ISR: a target replica leads, the removed replicas stop and delete their logs. Errors:
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, duplicates, a broker not
registered), NO_REASSIGNMENT_IN_PROGRESS (cancel without one); NOT_CONTROLLER at a broker
that is not the controller; without `zookeeper.connect` nothing can move
(INVALID_REPLICA_ASSIGNMENT for every partition). Needs ALTER on the cluster.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse)
from kafkafast.security import acl
from kafkafast.security.context import denied

R = AlterPartitionReassignmentsResponse


@handles(AlterPartitionReassignmentsRequest, 0, 0)
async def handle(broker, ctx, req: AlterPartitionReassignmentsRequest, version: int) -> R:
    code = denied(broker, ctx, acl.ALTER, acl.CLUSTER)
    if code:
        return R(error_code=code, error_message=None)
    return await broker.control.alter_reassignments(req)
