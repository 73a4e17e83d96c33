"""AddPartitionsToTxn (key 24), versions 0-4.

v0-v3 (clients): one transaction; every partition gets the same result: NONE when added,
else the transaction's error (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (v2+; before:
INVALID_PRODUCER_EPOCH), CONCURRENT_TRANSACTIONS, the coordinator errors);
UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist and OPERATION_NOT_ATTEMPTED
for the others of that request; TOPIC_AUTHORIZATION_FAILED likewise. v4 (brokers, KIP-890)
batches several transactions and may only verify (`verify_only`).
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import TxnError, fenced_code, no_coordinator_code
from kafkafast.protocol._generated.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

R = AddPartitionsToTxnResponse
EC = E.ErrorCode


async def _one(broker, ctx, tid: str, pid: int, epoch: int, topics, fenced: int, verify_only: bool = False) -> list:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    errors: dict[tuple[str, int], int] = {}
    refused_txn = denied(broker, ctx, acl.WRITE, acl.TRANSACTIONAL_ID, tid)
    for topic, p in wanted:
        refused = refused_txn or denied(broker, ctx, acl.WRITE, acl.TOPIC, topic)
        if refused:
            errors[(topic, p)] = refused
        elif not broker.partition_exists(topic, p):
            errors[(topic, p)] = EC.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        for key in wanted:
            errors.setdefault(key, EC.OPERATION_NOT_ATTEMPTED)
    elif broker.txn_coordinator is None:
        errors = dict.fromkeys(wanted, no_coordinator_code())
    else:
        try:
            await broker.txn_coordinator.add_partitions(tid, pid, epoch, wanted, fenced, verify_only=verify_only)
            code = 0
        except TxnError as exc:
            code = exc.code
        errors = dict.fromkeys(wanted, code)
    return [R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
        R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=errors[(t.name, p)])
        for p in t.partitions]) for t in topics]


@handles(AddPartitionsToTxnRequest, 0, 4)
async def handle(broker, ctx, req: AddPartitionsToTxnRequest, version: int) -> AddPartitionsToTxnResponse:
    if version <= 3:
        results = await _one(broker, ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                             req.v3_and_below_producer_epoch, req.v3_and_below_topics, fenced_code(version, 2))
        return R(throttle_time_ms=0, error_code=0, results_by_topic_v3_and_below=results)
    refused = denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER)
    if refused:
        return R(throttle_time_ms=0, error_code=refused, results_by_transaction=[])
    out = []
    for txn in req.transactions:
        results = await _one(broker, ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                             EC.PRODUCER_FENCED, txn.verify_only)
        out.append(R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=results))
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=out)
