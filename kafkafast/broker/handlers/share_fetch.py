"""ShareFetch (key 78), version 1: records of a share group's partitions, each acquired by
this member for the acquisition lock duration (KIP-932, Kafka 4.1+).

The share session (ShareSessionEpoch: 0 opens it with the request's partitions, N continues it
adding the request's partitions and dropping ForgottenTopicsData, -1 closes it and releases what
the member still holds) decides which partitions are fetched; acknowledgements piggy-backed on
the request are applied first (each partition's AcknowledgeErrorCode says how). The state
changes of the acknowledgements and of the acquisition that follows are written once per
partition (`HeldWrites`), before the request parks or is answered; a write that fails is the
partition's error (and its acknowledgement error). Each partition answers the bytes of the whole
batches holding the records it acquired, the acquired ranges with their delivery counts, and its
current leader; the top level the acquisition lock duration. Nothing acquired: the request waits
up to MaxWaitMs for an append, a release or an acknowledgement that frees record locks.
The session's partitions are taken in turn from the one at the request's epoch modulo their
number (Kafka's round-robin PartitionRotateStrategy), so a member's MaxRecords does not always
go to its first partition. MaxRecords bounds the records acquired (a batch in progress is
finished); MaxBytes the bytes answered (the first batch is answered whole even if larger;
MaxBytes 0 acquires nothing, as Kafka 4.2 answers librdkafka's fetch.max.bytes=0). Errors:
INVALID_REQUEST (no group or member id), GROUP_AUTHORIZATION_FAILED (READ on the group),
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH; per partition UNKNOWN_TOPIC_ID,
TOPIC_AUTHORIZATION_FAILED (READ on the topic), UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER (also while the share-partition's state cannot be read from its share
coordinator: the client refreshes its metadata and fetches again), KAFKA_STORAGE_ERROR, and for acknowledgements INVALID_RECORD_STATE. The work is in
`kafkafast/broker/share/manager.py`.
"""
import time

from kafkafast.broker.quotas import parked
from kafkafast.broker.registry import handles
from kafkafast.broker.share.manager import FINAL_EPOCH, HeldWrites, PartitionAnswer
from kafkafast.broker.share.requests import (apply_acks, current_leader, loaded_partition, persisted, request_error,
                                             resolve, write_held)
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.share_fetch import ShareFetchRequest, ShareFetchResponse

R = ShareFetchResponse
EC = E.ErrorCode
DEFAULT_MAX_RECORDS = 500
# The share-partition's state cannot be read yet (its share coordinator is moving or loading, or
# the broker the metadata names as its share coordinator does not answer: killed, not yet replaced).
STATE_UNAVAILABLE = frozenset({EC.COORDINATOR_NOT_AVAILABLE, EC.COORDINATOR_LOAD_IN_PROGRESS, EC.NOT_COORDINATOR,
                               EC.NETWORK_EXCEPTION, EC.REQUEST_TIMED_OUT})


async def _fetch_once(broker, req, session, answers, budget: list[int], verify: bool,
                      held: HeldWrites) -> tuple[int, list]:
    """One acquisition pass over the session's partitions; (records acquired, partitions read).
    `verify` (the pass opening a share session): each share-partition's stored state is read
    again (changed by AlterShareGroupOffsets / DeleteShareGroupOffsets while the group was empty)."""
    mgr = broker.share.partitions
    total, parts = 0, []
    order = list(session.partitions.items())
    if order and req.share_session_epoch > 0:  # each request starts at another partition (Kafka's round robin)
        k = req.share_session_epoch % len(order)
        order = order[k:] + order[:k]
    for (topic, p), tid in order:
        answer = answers.setdefault((topic, p), PartitionAnswer(topic, tid, p))
        if answer.error or answer.records:
            continue
        part, answer.error = await loaded_partition(broker, req.group_id, topic, tid, p, verify)
        if answer.error in STATE_UNAVAILABLE:
            answer.error = EC.NOT_LEADER_OR_FOLLOWER  # clients refresh metadata and fetch again
        if answer.error:
            continue
        parts.append(part)
        if budget[0] <= 0 or budget[1] <= 0:
            continue
        try:
            data, ranges = mgr.acquire(req.group_id, req.member_id, topic, tid, part, budget[0], budget[1], held)
        except E.KafkaError as exc:
            answer.error, answer.message = exc.code, exc.message
            continue
        except OSError as exc:
            answer.error, answer.message = EC.KAFKA_STORAGE_ERROR, str(exc)
            continue
        if ranges:
            answer.records, answer.acquired = data, ranges
            n = sum(b - a + 1 for a, b, _ in ranges)
            budget[0] -= n
            budget[1] -= len(data)
            total += n
    return total, parts


def _response(broker, answers, everything: bool, lock_ms: int) -> ShareFetchResponse:
    topics: dict[bytes, list] = {}
    for a in answers.values():
        if not (everything or a.error or a.acked or a.acquired):
            continue
        topics.setdefault(a.topic_id, []).append(R.PartitionData(
            partition_index=a.partition, error_code=a.error, error_message=a.message,
            acknowledge_error_code=a.ack_error, acknowledge_error_message=a.ack_message,
            current_leader=current_leader(broker, a, R.LeaderIdAndEpoch),
            records=a.records, acquired_records=[R.AcquiredRecords(first_offset=f, last_offset=l, delivery_count=c)
                                                 for f, l, c in a.acquired]))
    return R(throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=lock_ms,
             responses=[R.ShareFetchableTopicResponse(topic_id=tid, partitions=ps) for tid, ps in topics.items()],
             node_endpoints=[])


@handles(ShareFetchRequest, 1, 1)
async def handle(broker, ctx, req: ShareFetchRequest, version: int) -> ShareFetchResponse:
    err, msg = request_error(broker, ctx, req.group_id, req.member_id)
    if err:
        return R(throttle_time_ms=0, error_code=err, error_message=msg, responses=[], node_endpoints=[])
    mgr = broker.share.partitions
    answers: dict = {}
    add, acks = [], []
    for ft in req.topics:
        tid = bytes(ft.topic_id)
        name = resolve(broker, ctx, tid, [fp.partition_index for fp in ft.partitions], answers)
        if name is None:
            continue
        for fp in ft.partitions:
            add.append((name, fp.partition_index, tid))
            if fp.acknowledgement_batches:
                acks.append((name, tid, fp.partition_index, fp.acknowledgement_batches))
    forget = []
    for ft in req.forgotten_topics_data:
        meta = broker.topics.by_id.get(bytes(ft.topic_id))
        if meta is not None:
            forget += [(meta.name, p) for p in ft.partitions]
    epoch = req.share_session_epoch
    if epoch == 0 and acks:
        return R(throttle_time_ms=0, error_code=EC.INVALID_REQUEST, responses=[], node_endpoints=[],
                 error_message="Acknowledge data present on initial fetch request")
    try:
        session = mgr.session_for(req.group_id, req.member_id, epoch, add, forget, None if ctx.internal else ctx.conn)
    except E.KafkaError as exc:
        return R(throttle_time_ms=0, error_code=exc.code, error_message=exc.message, responses=[], node_endpoints=[])
    held = HeldWrites()  # the acknowledgements and the first acquisition pass: one state write per partition
    for name, tid, p, batches in acks:
        await apply_acks(broker, req.group_id, req.member_id, name, tid, p, batches, answers, held)
    lock_ms = mgr.lock_duration_ms(req.group_id)
    if epoch == FINAL_EPOCH:
        write_held(broker, held, answers)
        mgr.close_session(session)
        await persisted(broker, answers)
        return _response(broker, answers, False, lock_ms)
    budget = [req.max_records if req.max_records > 0 else DEFAULT_MAX_RECORDS, req.max_bytes]  # MaxBytes 0: none
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000.0
    verify = epoch == 0
    while True:
        acquired, parts = await _fetch_once(broker, req, session, answers, budget, verify, held)
        write_held(broker, held, answers)
        verify = False
        remaining = deadline - time.monotonic()
        if acquired or remaining <= 0 or not parts or any(a.error for a in answers.values()):
            break
        with parked():  # not handler time for request_percentage quotas
            await mgr.wait(req.group_id, parts, remaining)
        if mgr.sessions.get((req.group_id, req.member_id)) is not session:
            break  # closed meanwhile (the member left)
    await persisted(broker, answers, req.group_id)
    return _response(broker, answers, epoch == 0, lock_ms)
