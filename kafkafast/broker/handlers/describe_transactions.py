"""DescribeTransactions (key 65), version 0: state, timeout, start time, producer id and
epoch and partitions of each transactional id (TRANSACTIONAL_ID_NOT_FOUND for unknown ids,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on the id)."""
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import STATE_NAMES, no_coordinator_code
from kafkafast.protocol._generated.describe_transactions import DescribeTransactionsRequest, DescribeTransactionsResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = DescribeTransactionsResponse


@handles(DescribeTransactionsRequest, 0, 0)
async def handle(broker, ctx, req: DescribeTransactionsRequest, version: int) -> DescribeTransactionsResponse:
    out = []
    for tid in req.transactional_ids:
        code = denied(broker, ctx, acl.DESCRIBE, acl.TRANSACTIONAL_ID, tid)
        m = None
        if not code:
            if broker.txn_coordinator is None:
                code = no_coordinator_code()
            else:
                code, m = broker.txn_coordinator.describe(tid)
        if m is None:
            out.append(R.TransactionState(error_code=code, transactional_id=tid, transaction_state="",
                                          transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                          producer_epoch=-1, topics=[]))
            continue
        topics: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            topics.setdefault(t, []).append(p)
        out.append(R.TransactionState(
            error_code=0, transactional_id=tid, transaction_state=STATE_NAMES[m.state],
            transaction_timeout_ms=m.timeout_ms, transaction_start_time_ms=m.start_ms, producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
            topics=[R.TopicData(topic=t, partitions=ps) for t, ps in topics.items()]))
    return R(throttle_time_ms=0, transaction_states=out)
