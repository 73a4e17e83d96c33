"""ControlledShutdown (key 7), versions 1-3 (inter-broker: a stopping broker to the controller).

The controller moves the sender's leaderships to other in-sync replicas and removes it from
the ISRs it follows in (see `cluster/controller.py`), then answers with the partitions it
still leads (no other in-sync replica). A broker that is not the controller answers
NOT_CONTROLLER; a sender unknown to the controller BROKER_NOT_AVAILABLE; a broker epoch
other than its registration's (v2+) STALE_BROKER_EPOCH. Needs CLUSTER_ACTION on the cluster
when an authorizer is configured. v0 (no header, removed in Kafka 3.x) is not served.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(ControlledShutdownRequest, 1, 3)
async def handle(broker, ctx, req: ControlledShutdownRequest, version: int) -> ControlledShutdownResponse:
    code = denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER)
    if code:
        return ControlledShutdownResponse(error_code=code)
    return await broker.control.controlled_shutdown(req.broker_id, req.broker_epoch)
