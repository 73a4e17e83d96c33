"""StopReplica (key 5), version 3 (inter-broker: from the controller, cluster mode).

Stops following (and leading) each listed partition; with `delete_partition` the local
log is deleted too (topic deletion). Older controller epoch: STALE_CONTROLLER_EPOCH;
without `zookeeper.connect`: BROKER_NOT_AVAILABLE. With an authorizer, the sender needs
ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.stop_replica import StopReplicaRequest, StopReplicaResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

PartError = StopReplicaResponse.StopReplicaPartitionError


@handles(StopReplicaRequest, 3, 3)
async def handle(broker, ctx, req: StopReplicaRequest, version: int) -> StopReplicaResponse:
    if denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER):
        return StopReplicaResponse(error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED, partition_errors=[])
    err, results = await broker.control.stop_replica(req)
    return StopReplicaResponse(error_code=err, partition_errors=[
        PartError(topic_name=t, partition_index=p, error_code=code) for t, p, code in results])
