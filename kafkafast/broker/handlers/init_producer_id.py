"""InitProducerId (key 22), versions 0-4.

Idempotent producers (null transactional id) get a new producer id with epoch 0, unique
across workers and restarts. A client that passes its current id and epoch (v3+, after a
fatal sequence error) gets the same id with the epoch bumped; a bumped epoch must start
its sequences at 0 again. When a new block of ids cannot be reserved (a full disk) the
answer is the retriable COORDINATOR_NOT_AVAILABLE.

With a transactional id the transaction coordinator answers (`broker/txn_coordinator.py`):
the id's producer id with its epoch bumped (an ongoing transaction aborted first, so the
previous instance is fenced), INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms,
CONCURRENT_TRANSACTIONS while markers are written, PRODUCER_FENCED (v4+, else
INVALID_PRODUCER_EPOCH) for a KIP-360 bump naming a stale epoch, and the coordinator errors.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import TxnError, fenced_code, no_coordinator_code
from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import any_allowed, denied

MAX_EPOCH = 32767


def _answer(code: int, pid: int = -1, epoch: int = -1) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=pid, producer_epoch=epoch)


async def _transactional(broker, ctx, req: InitProducerIdRequest, version: int) -> InitProducerIdResponse:
    refused = denied(broker, ctx, acl.WRITE, acl.TRANSACTIONAL_ID, req.transactional_id)
    if refused:
        return _answer(refused)
    coordinator = broker.txn_coordinator
    if coordinator is None:
        return _answer(no_coordinator_code())
    try:
        pid, epoch = await coordinator.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, req.producer_id if version >= 3 else -1,
            req.producer_epoch if version >= 3 else -1, fenced_code(version, 4))
    except TxnError as exc:
        return _answer(exc.code)
    return _answer(0, pid, epoch)


@handles(InitProducerIdRequest, 0, 4)
async def handle(broker, ctx, req: InitProducerIdRequest, version: int) -> InitProducerIdResponse:
    if req.transactional_id is not None:
        return await _transactional(broker, ctx, req, version)
    if denied(broker, ctx, acl.IDEMPOTENT_WRITE, acl.CLUSTER) and not any_allowed(broker, ctx, acl.WRITE, acl.TOPIC):
        return _answer(E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if version >= 3 and req.producer_id >= 0 and 0 <= req.producer_epoch < MAX_EPOCH - 1:
        return _answer(0, req.producer_id, req.producer_epoch + 1)
    try:
        pid = broker.producer_ids.next_id()
    except E.KafkaStorageError:  # the id block cannot be reserved (a full disk): retriable
        return _answer(E.ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(0, pid, 0)
