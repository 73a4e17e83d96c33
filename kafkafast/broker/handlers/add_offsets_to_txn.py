"""AddOffsetsToTxn (key 25), versions 0-3: adds the group's `__consumer_offsets` partition
to the transaction (its offsets, sent with TxnOffsetCommit, commit with it). Errors as
AddPartitionsToTxn, GROUP_AUTHORIZATION_FAILED without READ on the group."""
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import TxnError, fenced_code, no_coordinator_code
from kafkafast.protocol._generated.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(AddOffsetsToTxnRequest, 0, 3)
async def handle(broker, ctx, req: AddOffsetsToTxnRequest, version: int) -> AddOffsetsToTxnResponse:
    code = (denied(broker, ctx, acl.WRITE, acl.TRANSACTIONAL_ID, req.transactional_id)
            or denied(broker, ctx, acl.READ, acl.GROUP, req.group_id))
    coordinator = broker.txn_coordinator
    if not code and coordinator is None:
        code = no_coordinator_code()
    if not code:
        broker.group_coordinator.ensure_offsets_topic()
        try:
            await coordinator.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                             [coordinator.offsets_partition(req.group_id)], fenced_code(version, 2))
        except TxnError as exc:
            code = exc.code
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
