"""ListTransactions (key 66), versions 0-1: the transactional ids this broker coordinates
that the principal may DESCRIBE, filtered by state names (unknown names are listed back in
unknown_state_filters), producer ids and (v1) a minimum running time in ms."""
from kafkafast import clock
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import ONGOING, STATE_NAMES
from kafkafast.protocol._generated.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = ListTransactionsResponse


@handles(ListTransactionsRequest, 0, 1)
async def handle(broker, ctx, req: ListTransactionsRequest, version: int) -> ListTransactionsResponse:
    states = set(req.state_filters or [])
    unknown = sorted(s for s in states if s not in STATE_NAMES)
    pids = set(req.producer_id_filters or [])
    min_duration = req.duration_filter if version >= 1 else -1
    now = clock.now_ms()
    out = []
    coordinator = broker.txn_coordinator
    for m in (coordinator.list() if coordinator is not None else []):
        name = STATE_NAMES[m.state]
        if states and name not in states or pids and m.producer_id not in pids:
            continue
        if min_duration >= 0 and not (m.state == ONGOING and now - m.start_ms >= min_duration):
            continue
        if denied(broker, ctx, acl.DESCRIBE, acl.TRANSACTIONAL_ID, m.transactional_id):
            continue
        out.append(R.TransactionState(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                      transaction_state=name))
    return R(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=out)
