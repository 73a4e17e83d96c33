"""FindCoordinator (key 10), versions 0-4.

Key type 0 (group): this broker is the coordinator of every group; `__consumer_offsets`
is created on first use. Key type 1 (transaction): there is no transaction coordinator yet,
so the answer is TRANSACTIONAL_ID_AUTHORIZATION_FAILED with TRANSACTIONS_UNSUPPORTED as
error message. That code is the one that confluent-kafka (librdkafka), kafka-python and
aiokafka all treat as fatal here, so `init_transactions()` fails at once; the retriable
COORDINATOR_NOT_AVAILABLE made them retry until their own timeout (librdkafka shows the
message, the Python clients only the code). Other key types: INVALID_REQUEST. v4 batches several keys in `coordinator_keys` and answers each
in `coordinators`; v0-v3 answer one key at the top level (error_message from v1).
"""
from kafkafast.broker.handlers.metadata import broker_endpoint
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

GROUP, TRANSACTION = 0, 1
TRANSACTIONS_UNSUPPORTED = ("kafkafast does not support transactions yet (no transaction coordinator); "
                            "produce without transactional.id (idempotent producers are supported)")


def _lookup(broker, key: str, key_type: int, ctx=None) -> tuple[int, str | None]:
    if key_type in (GROUP, TRANSACTION):
        refused = denied(broker, ctx, acl.DESCRIBE, acl.GROUP if key_type == GROUP else acl.TRANSACTIONAL_ID, key)
        if refused:
            return refused, None
    if key_type == TRANSACTION:
        return E.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_UNSUPPORTED
    if key_type != GROUP:
        return E.ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}"
    coordinator = broker.group_coordinator
    if coordinator is None:
        return E.ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    err = coordinator.status(key, "find_coordinator")
    if err == E.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or err == E.ErrorCode.NOT_COORDINATOR:
        err = 0  # the client retries the group request itself
    return err, None


@handles(FindCoordinatorRequest, 0, 4)
async def handle(broker, ctx, req: FindCoordinatorRequest, version: int) -> FindCoordinatorResponse:
    if getattr(broker, "cluster", None) is not None:  # the offsets partition's leader: kafkafast/cluster
        from kafkafast.cluster.requests import find_coordinator as cluster_find_coordinator

        return await cluster_find_coordinator(broker, ctx, req, version)
    host, port = broker_endpoint(broker, ctx)
    if version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            err, msg = _lookup(broker, key, req.key_type, ctx)
            ok = err == 0
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=broker.node_id if ok else -1, host=host if ok else "", port=port if ok else -1,
                error_code=err, error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    err, msg = _lookup(broker, req.key, req.key_type if version >= 1 else GROUP, ctx)
    ok = err == 0
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg,
                                   node_id=broker.node_id if ok else -1, host=host if ok else "",
                                   port=port if ok else -1)
