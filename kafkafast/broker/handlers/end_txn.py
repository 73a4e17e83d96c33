"""EndTxn (key 26), versions 0-3: commit or abort. The decision is written to
`__transaction_state` (PrepareCommit/PrepareAbort) before any marker, then the markers
(`broker/txn_coordinator.py`); the answer comes once they are written. A retry of a
finished end is answered NONE, the opposite end INVALID_TXN_STATE, an older epoch
PRODUCER_FENCED (v2+; before: INVALID_PRODUCER_EPOCH)."""
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import TxnError, fenced_code, no_coordinator_code
from kafkafast.protocol._generated.end_txn import EndTxnRequest, EndTxnResponse
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(EndTxnRequest, 0, 3)
async def handle(broker, ctx, req: EndTxnRequest, version: int) -> EndTxnResponse:
    code = denied(broker, ctx, acl.WRITE, acl.TRANSACTIONAL_ID, req.transactional_id)
    if not code and broker.txn_coordinator is None:
        code = no_coordinator_code()
    if not code:
        try:
            await broker.txn_coordinator.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                 req.committed, fenced_code(version, 2))
        except TxnError as exc:
            code = exc.code
    return EndTxnResponse(throttle_time_ms=0, error_code=code)
