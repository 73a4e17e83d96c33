"""AlterPartition (key 56), version 1 (inter-broker: leader to controller, cluster mode).

A partition leader proposes a new ISR with its leader epoch and the partition epoch (the
state znode's version) it last saw. The controller refuses a stale leader epoch
(FENCED_LEADER_EPOCH), a stale partition epoch (INVALID_UPDATE_VERSION), a sender that is
not the leader (NOT_LEADER_OR_FOLLOWER), a replica that is not live or not assigned
(INELIGIBLE_REPLICA); otherwise it writes the state znode and answers with the new ISR and
partition epoch. A broker that is not the controller answers NOT_CONTROLLER. With an
authorizer, the sender needs ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(AlterPartitionRequest, 1, 1)
async def handle(broker, ctx, req: AlterPartitionRequest, version: int) -> AlterPartitionResponse:
    if denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      topics=[])
    return await broker.control.alter_partition(req)
