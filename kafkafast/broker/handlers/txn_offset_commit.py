"""TxnOffsetCommit (key 28), versions 0-3: offsets committed inside a transaction. The group
coordinator writes them to `__consumer_offsets` as a transactional batch of the producer
and makes them the group's committed offsets when the COMMIT marker arrives there (an
ABORT drops them). KIP-447 (v3): a member id and a generation >= 0 are checked against
the group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID). Forwarded whole to
the worker that owns the group, like the other group APIs."""
from kafkafast.broker.handlers.offset_commit import commit_entries, wait_replicated
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

R = TxnOffsetCommitResponse


@handles(TxnOffsetCommitRequest, 0, 3)
async def handle(broker, ctx, req: TxnOffsetCommitRequest, version: int) -> TxnOffsetCommitResponse:
    first = (denied(broker, ctx, acl.WRITE, acl.TRANSACTIONAL_ID, req.transactional_id)
             or denied(broker, ctx, acl.READ, acl.GROUP, req.group_id))
    errors, entries = commit_entries(broker, ctx, req.topics, first, with_leader_epoch=version >= 2)
    if entries:
        result = broker.group_coordinator.txn_commit_offsets(
            req.group_id, req.producer_id, req.producer_epoch, req.member_id if version >= 3 else "",
            req.group_instance_id if version >= 3 else None, req.generation_id if version >= 3 else -1, entries)
        if version < 3:  # before KIP-588 clients know INVALID_PRODUCER_EPOCH
            result = {k: (E.ErrorCode.INVALID_PRODUCER_EPOCH if v == E.ErrorCode.PRODUCER_FENCED else v)
                      for k, v in result.items()}
        errors.update(result)
        await wait_replicated(broker, req.group_id, errors)  # answered once the ISR has them, as OffsetCommit
    return R(throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                               error_code=errors.get((t.name, p.partition_index), 0))
            for p in t.partitions]) for t in req.topics])
