"""UpdateMetadata (key 6), version 7 (inter-broker: from the controller, cluster mode).

Replaces the live broker list and the controller id, and updates the listed partitions'
leader, epoch, replicas, ISR and offline replicas in the metadata cache (leader -2 marks a
partition of a topic being deleted: it is dropped). Older controller epoch:
STALE_CONTROLLER_EPOCH; older broker epoch: STALE_BROKER_EPOCH. Without
`zookeeper.connect`: BROKER_NOT_AVAILABLE. With an authorizer, the sender needs ClusterAction
on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(UpdateMetadataRequest, 7, 7)
async def handle(broker, ctx, req: UpdateMetadataRequest, version: int) -> UpdateMetadataResponse:
    if denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER):
        return UpdateMetadataResponse(error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return UpdateMetadataResponse(error_code=await broker.control.update_metadata(req))
