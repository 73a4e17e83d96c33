"""FindCoordinator (key 10), versions 0-4.

Key type 0 (group): this broker is the coordinator of every group; `__consumer_offsets`
is created on first use. Key type 1 (transaction): this broker is the transaction
coordinator (`broker/txn_coordinator.py`); `__transaction_state` is created on first use.
Cluster mode answers the leaders of the topics' partitions (`cluster/requests.py`). Where no
transaction coordinator runs (a broker without a group coordinator) the answer is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED with TRANSACTIONS_UNSUPPORTED as error message: the
code that confluent-kafka, kafka-python and aiokafka treat as fatal, so
`init_transactions()` fails at once. Other key types: INVALID_REQUEST. v4 batches several keys in `coordinator_keys` and answers each
in `coordinators`; v0-v3 answer one key at the top level (error_message from v1).
"""
from kafkafast.broker.control import broker_endpoint
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

GROUP, TRANSACTION = 0, 1
TRANSACTIONS_UNSUPPORTED = ("this kafkafast broker runs no transaction coordinator; "
                            "produce without transactional.id (idempotent producers are supported)")


def _lookup(broker, key: str, key_type: int, ctx=None) -> tuple[int, str | None]:
    if key_type in (GROUP, TRANSACTION):
        refused = denied(broker, ctx, acl.DESCRIBE, acl.GROUP if key_type == GROUP else acl.TRANSACTIONAL_ID, key)
        if refused:
            return refused, None
    if key_type == TRANSACTION:
        return _lookup_transaction(broker, key)
    if key_type != GROUP:
        return E.ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}"
    coordinator = broker.group_coordinator
    if coordinator is None:
        return E.ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    err = coordinator.status(key, "find_coordinator")
    if err == E.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or err == E.ErrorCode.NOT_COORDINATOR:
        err = 0  # the client retries the group request itself
    return err, None


def _lookup_transaction(broker, key: str) -> tuple[int, str | None]:
    coordinator = broker.txn_coordinator
    if coordinator is None:
        return E.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_UNSUPPORTED
    err = coordinator.status(key)
    if err in (E.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, E.ErrorCode.NOT_COORDINATOR):
        err = 0  # this broker it is; the client retries its transaction request
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
