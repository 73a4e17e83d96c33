"""Fetch (key 1), versions 0-17.

v13+ name topics by id (KIP-516): `resolve_topic_ids` maps them to names, an unknown id
answers UNKNOWN_TOPIC_ID for its partitions, and responses carry the id. v15+ carry the
replica id in replica_state; v12+ partitions answering NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH carry the current leader and its epoch, and v16+ responses those
leaders' endpoints in node_endpoints (KIP-951, `with_leader_hints`: cluster mode only, a
single broker leads everything); v17's replica directory id is for followers and is ignored.

v0-3 clients cannot read v2 batches: their records are down-converted (`down_converted`,
kafkafast/records/convert.py) to magic 0 (v0-1) or magic 1 (v2-3), one batch at a time read
from the segment (memory bounded by the batch size), stopping before the converted bytes pass
the partition's limit (the first message set always goes whole, as KIP-74 for v2 batches).
A topic with message.downconversion.enable=false answers UNSUPPORTED_VERSION to them, a
zstd batch UNSUPPORTED_COMPRESSION_TYPE, as Kafka does. v4+ is served zero-copy as below.

Reads each partition from its segment files into a FileRegion (sent with os.sendfile by
the connection), never beyond the high watermark. Limits as Kafka: the first partition
with data always gets at least one whole batch (KIP-74), then `max_bytes` for the
response and `partition_max_bytes` per partition. When fewer than `min_bytes` are
available the fetch parks until an append to one of its partitions wakes it or
`max_wait_ms` passes (a partition at its bound is answered without asking the reader, and in
an incremental session a partition with nothing new gets no answer object: a follower's fetch
that finds nothing parks without building one; a follower's incremental fetch passes over its
session's quiet partitions with a few checks, `ReplicaManager.quiet_follower_partition`). A
follower's fetch offsets are recorded as its
log ends in the first pass over its partitions (one pass before it parks, one after). A
follower's fetch (replica_id >= 0) one of whose partitions has a high
watermark the leader has not answered that follower yet (`broker.replicas.high_watermark_news`) is
also answered once kafkafast.replica.fetch.hw.delay.ms passed without records (records
appended before carry it: under load one answer per append), so a follower learns a new high
watermark without waiting out `max_wait_ms` (KIP-1166 puts the replica's high watermark in
Fetch v18 for this; up to v17 the leader remembers what it answered). Fetch sessions (v7+,
KIP-227): `broker.fetch_sessions` (kafkafast/broker/fetch_sessions.py) says which partitions
a request reads (an incremental one: its session's) and which of them its response lists.
isolation_level 1
(READ_COMMITTED) reads only up to the last stable offset and lists the aborted transactions
(producer id, first offset) that overlap the returned batches; READ_UNCOMMITTED reads up to
the high watermark. Consumers (v11+) may fetch from a follower, which serves up to the high
watermark it learnt from its leader; a leader with replica.selector.class set answers a
consumer that names its rack_id with the preferred_read_replica to go to (KIP-392,
`broker.replicas.preferred_read_replica`) and no records, at once. An offline partition (its log
could not be opened) answers KAFKA_STORAGE_ERROR, one still loading at its owner worker
NOT_LEADER_OR_FOLLOWER.

A follower's steady fetch takes a lean path, `follower_fetch` (called by `Broker.dispatch`
before any decoding) then `answer_follower_fetch`: an incremental v12-17 fetch on a session of
this process at its epoch, naming no new and no forgotten partition, every partition of its
session `ReplicaManager.steady_follower_partition` (led and kept here, not loading or offline,
at its leader epoch, no leader throttle). Its frame is read by `protocol/fetch_scan.py`, the
session's partitions and their Partitions are walked as the session keeps them between fetches
(`FetchSession.lean`, built again when the order or the partitions change; every partition is
checked again at each fetch), each pass over them is one
`ReplicaManager.steady_follower_fetch` per partition, and the answer is written whole by
`protocol/fetch_answer_frame.py`; the same bytes as the general path (tests/unit/
test_follower_fetch_lean.py) without the generated request, context, plan and response
objects. Woken while parked, it reads two loop passes later (`_appends_first`): a produce
received behind the append that woke it appends first and rides the same answer. Should a partition stop being steady while the fetch parks, the fetch goes on in
`answered`, the general loop. Anything else is never taken (nothing changed): the general
handler answers it.
"""
import asyncio
import logging
import os
import time
from types import SimpleNamespace

from kafkafast import clock
from kafkafast.broker.fetch_sessions import FetchContext, next_epoch
from kafkafast.broker.quotas import parked
from kafkafast.broker.registry import handles
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol._generated.fetch import FetchRequest, FetchResponse
from kafkafast.protocol import errors as E
from kafkafast.protocol.api import encode_response
from kafkafast.protocol.fetch_scan import ScannedFetch, scan_fetch
from kafkafast.protocol.fetch_answer import FLEXIBLE_VERSION, PartitionAnswer
from kafkafast.protocol.fetch_answer_frame import fetch_answer_frame
from kafkafast.records.convert import downconvert_batch
from kafkafast.security.context import fetch_denied
from kafkafast.storage.txn_index import collect_aborted

logger = logging.getLogger("kafkafast.fetch")
PartData = FetchResponse.PartitionData
AbortedTxnResp = FetchResponse.AbortedTransaction
TopicResp = FetchResponse.FetchableTopicResponse
READ_COMMITTED = 1
APPEND_PASSES = 2  # a woken follower fetch lets produces already received append first (`_appends_first`)


def _error(index, code, part=None):
    return PartData(partition_index=index, error_code=code,
                    high_watermark=part.high_watermark if part else -1,
                    last_stable_offset=stable_offset(part) if part else -1,
                    log_start_offset=part.log_start_offset if part else -1,
                    aborted_transactions=None, preferred_read_replica=-1, records=b"")


def _read_all(broker, req, version, plan, session=None, first=False):
    """One pass over the requested partitions. Returns (responses, bytes, whether a follower's
    answer carries a high watermark it has not been answered yet). The `first` pass of a
    follower's fetch also records each partition's fetch offset as the follower's log end
    (`on_replica_fetch`: the high watermark and the ISR may move), just before the partition
    is read (it touches no other partition). With the `session` of an incremental fetch (a
    FetchSession), a partition with no records, no error and offsets its session answered
    already gets no answer object: the session's answer would leave it out
    (`CachedPartition.unchanged`); so a follower's fetch that finds nothing new builds
    nothing before it parks. v12+ partitions without an error are `PartitionAnswer`s
    (protocol/fetch_answer.py: the same bytes as the generated object, written at once)."""
    budget = req.max_bytes if version >= 3 else 0x7FFFFFFF
    total = 0
    news = False
    replica_id = req.replica_id
    follower = replica_id >= 0
    track = first and follower
    any_replica = version >= 11 and not follower  # KIP-392: a consumer that may read from followers
    committed = req.isolation_level == READ_COMMITTED
    flexible = version >= FLEXIBLE_VERSION
    replicas = broker.replicas  # the data plane (broker/replica_manager.py)
    cached = session.partitions if session is not None else None
    # a follower's incremental fetch: its session's quiet partitions are passed over (no read, no answer)
    quiet = replicas.quiet_follower_partition if follower and cached is not None and version >= 9 else None
    now_ms = clock.now_ms()
    responses = []
    for topic_name, fp_list, tresp in plan:
        answers = tresp.partitions = []
        for fp, part in fp_list:
            index = fp.partition
            if part is None:  # not hosted here: Kafka's NOT_LEADER_OR_FOLLOWER when the cluster has it
                answers.append(_error(index, E.ErrorCode.NOT_LEADER_OR_FOLLOWER
                                      if broker.partition_exists(topic_name, index)
                                      else E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if quiet is not None and quiet(part, replica_id, fp, cached.get((topic_name, index)), track, now_ms):
                continue
            offset = fp.fetch_offset
            if track:  # a follower's fetch offset is its log end: the leader tracks it
                replicas.on_replica_fetch(part, replica_id, offset)
            if part.loading:  # its owner worker still loads it: nothing is published, no offsets either
                answers.append(_error(index, E.ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            st = part.state
            if st.offline:
                log_storage_error(part, "offline", "its log could not be opened")
                answers.append(_error(index, E.ErrorCode.KAFKA_STORAGE_ERROR, part))
                continue
            not_leader = replicas.fetch_error(part, replica_id, any_replica)
            if not_leader:
                answers.append(_error(index, not_leader, part))
                continue
            if version >= 9 and fp.current_leader_epoch >= 0 and fp.current_leader_epoch != part.leader_epoch:
                code = (E.ErrorCode.FENCED_LEADER_EPOCH if fp.current_leader_epoch < part.leader_epoch
                        else E.ErrorCode.UNKNOWN_LEADER_EPOCH)
                answers.append(_error(index, code, part))
                continue
            preferred = replicas.preferred_read_replica(part, req.rack_id, offset) if any_replica else -1
            if preferred >= 0:  # no records: the consumer goes to that replica (answered at once, see handle)
                answers.append(_error(index, 0, part))
                answers[-1].preferred_read_replica = preferred
                continue
            hw = part.high_watermark
            lso = min(st.last_stable_offset, hw)  # stable_offset(part)
            upper = replicas.fetch_upper_bound(part, replica_id)
            if committed and not follower:
                upper = min(upper, lso)
            log_start = st.log_start_offset
            if upper <= offset <= st.log_end_offset and offset >= log_start:
                region = None  # at the bound: nothing to read (what the reader would answer, unread)
            else:
                region = _read(part, offset, min(fp.partition_max_bytes, max(budget - total, 0)), upper,
                               total == 0, version)
                if type(region) is PartData:  # an error answer
                    answers.append(region)
                    continue
            size = len(region) if region is not None else 0
            total += size
            if follower:
                if size:
                    replicas.on_replica_read(part, replica_id, size)  # the leader's replication throttle
                news |= replicas.high_watermark_news(part, replica_id, hw)
            if not size and cached is not None:
                cp = cached.get((topic_name, index))
                if cp is not None and cp.unchanged(hw, lso, log_start):
                    continue
            aborted = aborted_in(part, offset, upper if size else -1) if committed else None
            records = region if size else b""
            answers.append(PartitionAnswer(index, hw, lso, log_start, aborted, records) if flexible else PartData(
                partition_index=index, error_code=0, high_watermark=hw, last_stable_offset=lso,
                log_start_offset=log_start, aborted_transactions=aborted, preferred_read_replica=-1,
                records=records))
        responses.append(tresp)
    return responses, total, news


def _read(part, offset: int, limit: int, upper: int, first: bool, version: int):
    """The records of `part` from `offset` (a FileRegion, bytes when down-converted for v0-3,
    or None), or the PartData of the error answering the read."""
    try:
        region = part.log.reader.region(offset, limit, upper, first)
    except E.KafkaError as exc:
        if exc.code == E.ErrorCode.KAFKA_STORAGE_ERROR:
            log_storage_error(part, "read", str(exc))
        return _error(part.index, exc.code, part)
    except OSError as exc:  # the file cannot be read (an I/O error): this partition only
        log_storage_error(part, f"errno {exc.errno}", str(exc))
        return _error(part.index, E.ErrorCode.KAFKA_STORAGE_ERROR, part)
    if version <= 3 and region is not None:
        try:
            region = down_converted(part, region, 0 if version <= 1 else 1, offset, limit, first)
        except E.KafkaError as exc:
            return _error(part.index, exc.code, part)
    return region


def redirects(responses: list) -> bool:
    """Whether a partition names a preferred read replica: Kafka answers such a fetch at once."""
    return any(p.preferred_read_replica >= 0 for t in responses for p in t.partitions)


_logged_storage_errors: set[tuple[str, int, str]] = set()


def log_storage_error(part, cause: str, reason: str) -> None:
    """A Fetch answered KAFKA_STORAGE_ERROR: logged at ERROR once per partition and cause (a
    storage error only the clients see is how a broken partition stays unnoticed)."""
    key = (part.topic, part.index, cause)
    if key in _logged_storage_errors:
        return
    if len(_logged_storage_errors) >= 10_000:
        _logged_storage_errors.clear()
    _logged_storage_errors.add(key)
    logger.error("%s-%d: Fetch answered KAFKA_STORAGE_ERROR (%s): %s", part.topic, part.index, cause, reason)


def stable_offset(part) -> int:
    """The published last stable offset (the first offset of the oldest open transaction,
    at most the high watermark)."""
    return min(part.state.last_stable_offset, part.high_watermark)


def aborted_in(part, fetch_offset: int, upper: int) -> list:
    """READ_COMMITTED: the aborted transactions that overlap [fetch_offset, upper), read from
    the segments' `.txnindex` files (any process can)."""
    if upper <= fetch_offset:
        return []
    return [AbortedTxnResp(producer_id=a.producer_id, first_offset=a.first_offset)
            for a in collect_aborted(part.log.reader.dir, part.log.reader.segment_bases(), fetch_offset, upper)]


def down_converted(part, region, magic: int, fetch_offset: int, limit: int, first: bool) -> bytes:
    """The v2 batches of `region` as a magic-`magic` message set, read and converted one
    batch at a time; stops before the output passes `limit` (for the `first` partition of
    the response its first message set goes whole whatever its size).
    UnsupportedVersionError when the topic refuses down-conversion."""
    if not part.log.config.message_downconversion_enable:
        raise E.UnsupportedVersionError(f"{part.topic}: message.downconversion.enable is false")
    out = bytearray()
    pos, end = region.offset, region.offset + region.length
    while end - pos >= 12:
        size = int.from_bytes(os.pread(region.fd, 12, pos)[8:12], "big", signed=True) + 12
        if size < 12 or pos + size > end:
            break
        piece = downconvert_batch(os.pread(region.fd, size, pos), 0, magic, fetch_offset)
        if len(out) + len(piece) > limit and (out or not first):
            break
        out += piece
        pos += size
    return bytes(out)


def topic_name_of_id(broker, topic_id: bytes) -> str | None:
    meta = broker.topics.by_id.get(topic_id)  # in cluster mode too (the metadata cache's topics)
    if meta is None:  # created by another worker since this one last looked
        broker.refresh_topics()
        meta = broker.topics.by_id.get(topic_id)
    return meta.name if meta is not None else None


def resolve_topic_ids(broker, req: FetchRequest, version: int) -> list:
    """v13+: every requested topic's name from its id (in place); the topic responses
    (UNKNOWN_TOPIC_ID) of the ids no topic has, which are removed from the request."""
    if version < 13:
        return []
    known, unknown = [], []
    for ft in req.topics:
        name = topic_name_of_id(broker, bytes(ft.topic_id))
        if name is None:
            unknown.append(TopicResp(topic="", topic_id=ft.topic_id, partitions=[
                _error(fp.partition, E.ErrorCode.UNKNOWN_TOPIC_ID) for fp in ft.partitions]))
        else:
            ft.topic = name
            known.append(ft)
    req.topics = known
    return unknown


def planned(broker, ctx, req: FetchRequest) -> tuple[list, list]:
    """(plan, refused): each requested topic the principal may read with its partitions
    (FetchPartition, Partition or None) and an empty topic response; the topic responses
    TOPIC_AUTHORIZATION_FAILED of the others (a replica_id needs ClusterAction)."""
    plan = []
    refused = []
    for ft in req.topics:
        if fetch_denied(broker, ctx, req.replica_id, ft.topic):
            refused.append(TopicResp(topic=ft.topic, topic_id=ft.topic_id, partitions=[
                _error(fp.partition, E.ErrorCode.TOPIC_AUTHORIZATION_FAILED) for fp in ft.partitions]))
            continue
        parts = [(fp, broker.get_partition(ft.topic, fp.partition)) for fp in ft.partitions]
        plan.append((ft.topic, parts, TopicResp(topic=ft.topic, topic_id=ft.topic_id, partitions=[])))
    return plan, refused


@handles(FetchRequest, 0, 17)
async def handle(broker, ctx, req: FetchRequest, version: int) -> FetchResponse:
    if version >= 15:  # the replica id moved into replica_state
        req.replica_id = req.replica_state.replica_id
    unknown_ids = resolve_topic_ids(broker, req, version)
    session = broker.fetch_sessions.context(req, version, lambda topic_id: topic_name_of_id(broker, topic_id))
    if session.error:
        return FetchResponse(throttle_time_ms=0, error_code=session.error, session_id=0, responses=[])
    plan, refused = planned(broker, ctx, req)
    wait_s = (broker.replicas.follower_wait_s(req.replica_id, req.max_wait_ms) if req.replica_id >= 0
              else max(req.max_wait_ms, 0) / 1000.0)
    deadline = time.monotonic() + wait_s
    return await answered(broker, req, version, plan, session, refused, unknown_ids, deadline)


async def answered(broker, req: FetchRequest, version: int, plan: list, session, refused: list, unknown_ids: list,
                   deadline: float, first: bool = True, news_due: float | None = None) -> FetchResponse:
    """The response of a fetch whose partitions `plan` holds: read (`_read_all`), parked until
    min_bytes, the deadline or a high watermark's news (`news_due`, when that answer goes out),
    and given to the session. `first` is False when a lean fetch (`follower_fetch`) already
    made the pass that records a follower's fetch offsets and hands over after parking."""
    cached = session.session
    while True:
        responses, total, news = _read_all(broker, req, version, plan, cached, first)
        first = False
        now = time.monotonic()
        remaining = deadline - now
        if total >= req.min_bytes or remaining <= 0 or not plan or not broker.started or redirects(responses):
            break
        if news and news_due is None:
            news_due = now + broker.config.get_int("kafkafast.replica.fetch.hw.delay.ms") / 1000.0
        if news_due is not None:  # only the high watermark moved: held until records come, up to a bound
            if now >= news_due:
                await asyncio.sleep(0)  # the produces it answers go out first (one loop pass)
                break
            remaining = min(remaining, news_due - now)
        live = [p for _, fps, _ in plan for _, p in fps if p is not None]
        if not live:
            break
        with parked():  # not handler time for request_percentage quotas
            await request_metrics.remote(broker.wait_for_data(live, remaining))
        # (a follower's woken while it has yet to fetch a new leadership's partition: answered now,
        # see `follower_wait_s`)
        if time.monotonic() >= deadline or (req.replica_id >= 0 and broker.replicas.awaiting
                                            and broker.replicas.awaits(req.replica_id)):
            responses, _, _ = _read_all(broker, req, version, plan, cached)
            break
    session_id, responses = session.respond(responses + refused)
    return with_leader_hints(broker, version, FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=session_id, responses=responses + unknown_ids,
        node_endpoints=[]))


def with_leader_hints(broker, version: int, resp: FetchResponse) -> FetchResponse:
    """KIP-951: the current leader of each partition this broker does not lead, as the control
    plane knows it (a single node leads every partition it has: no hints)."""
    if version < 12:
        return resp
    leaders = set()
    for t in resp.responses:
        for p in t.partitions:
            if p.error_code not in (E.ErrorCode.NOT_LEADER_OR_FOLLOWER, E.ErrorCode.FENCED_LEADER_EPOCH):
                continue
            hint = broker.control.leader_of(t.topic, p.partition_index)
            if hint is not None:
                p.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=hint[0], leader_epoch=hint[1])
                leaders.add(hint[0])
    if version >= 16:
        resp.node_endpoints = [FetchResponse.NodeEndpoint(node_id=i, host=e[0], port=e[1], rack=e[2])
                               for i, e in ((i, broker.control.endpoint_of(i)) for i in sorted(leaders)) if e is not None]
    return resp


# -- the lean path of a follower's steady incremental fetch ----------------------------------
_ANSWERED = SimpleNamespace(error_code=0)  # an answered partition, as the metrics recorder reads it


class Caller:
    """Who sent a request, as the ACL checks read it (`security.context.identity`)."""
    __slots__ = ("conn", "internal")

    def __init__(self, conn, internal: bool) -> None:
        self.conn = conn
        self.internal = internal


class LeanFetch:
    """A follower's incremental fetch the lean path answers (`follower_fetch`): its scanned
    request, its session, and per session partition (in session order) the run of
    consecutive same-topic partitions it is in (a topic response of the general path), its
    key, CachedPartition and Partition; `parts` the Partitions alone (what a park waits on)."""
    __slots__ = ("scan", "session", "entries", "runs", "parts")

    def __init__(self, scan: ScannedFetch, session, entries: list, runs: list, parts: list) -> None:
        self.scan = scan
        self.session = session
        self.entries = entries
        self.runs = runs
        self.parts = parts


def follower_fetch(broker, frame, conn, internal: bool) -> LeanFetch | None:
    """A follower's Fetch v12-17 that the lean path answers, or None (nothing changed: the
    general path takes it). It is an incremental fetch (session id, epoch > 0) on a session
    of this process at that epoch, naming no new and no forgotten partition, reading
    uncommitted, by a broker with ClusterAction, every partition of its session
    `ReplicaManager.steady_follower_partition`. Taken, the session moves on as
    `FetchSessionCache.context` moves it."""
    scan = scan_fetch(frame, followers_incremental=True)
    if (scan is None or scan.replica_id < 0 or scan.session_id == 0 or scan.session_epoch <= 0 or scan.forgotten
            or scan.isolation_level == READ_COMMITTED):
        return None
    version = scan.version
    cache = broker.fetch_sessions
    session = cache.sessions.get(scan.session_id)
    if session is None or session.epoch != scan.session_epoch or session.uses_topic_ids != (version >= 13):
        return None
    cached = session.partitions
    updates = []
    for name, topic_id, parts in scan.topics:
        if version >= 13:
            meta = broker.topics.by_id.get(topic_id)
            if meta is None:
                return None
            name = meta.name
        for p in parts:
            key = (name, p[0])
            cp = cached.get(key)
            if cp is None:  # a partition added to the session
                return None
            updates.append((cp, p, key))
    if fetch_denied(broker, Caller(conn, internal), scan.replica_id, ""):
        return None
    steady = broker.replicas.steady_follower_partition
    replica_id = scan.replica_id
    get = broker.partitions.get
    # every partition steady at the leader epoch the fetch names: the session's, or this request's
    # for the partitions it lists (checked once the session's fails, or when it lists one)
    layout = session.lean
    if layout is not None:
        for _, key, cp, part in layout.entries:
            if get(key) is not part:  # the partition was made again (a topic deleted, created): walk anew
                layout = session.lean = None
                break
            if not (steady(part, replica_id, cp.fetch.current_leader_epoch)
                    or _steady_as_named(steady, part, replica_id, key, updates)):
                return None
    if layout is None:  # (built again only when the session's order or partitions changed)
        items = []
        for key, cp in cached.items():
            part = get(key)
            if part is None or not (steady(part, replica_id, cp.fetch.current_leader_epoch)
                                    or _steady_as_named(steady, part, replica_id, key, updates)):
                return None
            items.append((key, cp, part))
        layout = session.lean = _layout(items)
    for _, p, key in updates:
        epoch = p[1]
        if epoch >= 0 and epoch != get(key).leader_epoch:
            return None
    request_metrics.incremental_fetch(True, len(updates))
    new_fetch = FetchRequest.FetchTopic.FetchPartition
    for cp, p, _ in updates:
        fp = cp.fetch = new_fetch.__new__(new_fetch)
        (fp.partition, fp.current_leader_epoch, fp.fetch_offset, fp.last_fetched_epoch, fp.log_start_offset,
         fp.partition_max_bytes, fp.replica_directory_id, fp._unknown_tags) = p
    session.last_used = cache.clock()
    session.epoch = next_epoch(session.epoch)
    return LeanFetch(scan, session, layout.entries, layout.runs, layout.parts)


def _steady_as_named(steady, part, replica_id: int, key, updates: list) -> bool:
    """`steady` at the leader epoch this request names for `key` (False: it names none)."""
    for _, p, named in updates:
        if named == key:
            return steady(part, replica_id, p[1])
    return False


class LeanLayout:
    """A session's partitions as the lean path walks them (kept as `FetchSession.lean`): per
    partition in session order (run, key, CachedPartition, Partition), `run` its index in `runs`
    (name, topic id) of consecutive same-topic partitions (a topic response of the general path),
    and `parts` the Partitions alone (what a park waits on)."""
    __slots__ = ("entries", "runs", "parts")

    def __init__(self, entries: list, runs: list, parts: list) -> None:
        self.entries = entries
        self.runs = runs
        self.parts = parts


def _layout(items: list) -> LeanLayout:
    """The LeanLayout of (key, CachedPartition, Partition) in session order."""
    entries = []
    runs = []
    parts = []
    topic = None
    for key, cp, part in items:
        if key[0] != topic:
            topic = key[0]
            runs.append((topic, cp.topic_id))
        entries.append((len(runs) - 1, key, cp, part))
        parts.append(part)
    return LeanLayout(entries, runs, parts)


def _lean_pass(broker, lean: LeanFetch, first: bool) -> tuple[list, int, bool]:
    """`_read_all` over a lean fetch's partitions: (answers as (run, key, answer), bytes, news), an
    answer an `Answered` tuple (protocol/fetch_answer_frame.py), or the PartData of an error."""
    replicas = broker.replicas
    scan = lean.scan
    replica_id = scan.replica_id
    budget = scan.max_bytes
    version = scan.version
    steady = replicas.steady_follower_fetch
    now_ms = clock.now_ms()
    total = 0
    news = False
    answers = []
    for run, key, cp, part in lean.entries:
        fp = cp.fetch
        offset = fp.fetch_offset
        got = steady(part, replica_id, offset, cp, first, now_ms)
        if got is None:  # quiet: nothing to read, nothing to answer
            continue
        hw, lso, log_start, upper = got
        if offset == upper and offset >= log_start:
            region = None  # at the log end (a follower's bound)
        else:
            region = _read(part, offset, min(fp.partition_max_bytes, max(budget - total, 0)), upper, total == 0,
                           version)
            if type(region) is PartData:
                answers.append((run, key, region))
                continue
        size = region.length if region is not None else 0  # (v12+: a FileRegion, never down-converted)
        total += size
        answered_hw = part.answered_hw  # (ReplicaManager.high_watermark_news, inline)
        if answered_hw.get(replica_id) != hw:
            answered_hw[replica_id] = hw
            news = True
        if not size and cp.unchanged(hw, lso, log_start):
            continue
        answers.append((run, key, (key[1], hw, lso, log_start, region if size else b"")))
    return answers, total, news


def _still_steady(broker, lean: LeanFetch) -> bool:
    steady = broker.replicas.steady_follower_partition
    replica_id = lean.scan.replica_id
    get = broker.partitions.get
    for _, key, cp, part in lean.entries:
        if get(key) is not part or not steady(part, replica_id, cp.fetch.current_leader_epoch):
            return False
    return True


async def answer_follower_fetch(broker, lean: LeanFetch, conn, internal: bool) -> list:
    """The response frame parts of a lean fetch: `answered`'s loop over its session's
    partitions, written straight to bytes. Should a partition stop being steady while it parks
    (leadership moved, a new epoch, the topic deleted), the fetch goes on in `answered`."""
    scan = lean.scan
    version = scan.version
    deadline = time.monotonic() + broker.replicas.follower_wait_s(scan.replica_id, scan.max_wait_ms)
    news_due = None
    first = True
    while True:
        answers, total, news = _lean_pass(broker, lean, first)
        first = False
        now = time.monotonic()
        remaining = deadline - now
        if total >= scan.min_bytes or remaining <= 0 or not lean.entries or not broker.started:
            break
        if news and news_due is None:
            news_due = now + broker.config.get_int("kafkafast.replica.fetch.hw.delay.ms") / 1000.0
        if news_due is not None:
            if now >= news_due:
                await asyncio.sleep(0)
                break
            remaining = min(remaining, news_due - now)
        # (not `parked()`: no quota measures a lean fetch's handler time, see Broker.dispatch)
        waited = broker.placement.wait_for_data(lean.parts, remaining)
        await (request_metrics.remote(waited) if request_metrics.active else waited)
        await _appends_first()
        if not _still_steady(broker, lean):
            return await _handed_over(broker, lean, conn, internal, deadline, news_due)
        if time.monotonic() >= deadline or (broker.replicas.awaiting
                                            and broker.replicas.awaits(scan.replica_id)):  # (as in `answered`)
            answers, _, _ = _lean_pass(broker, lean, False)
            break
    return _lean_answer(broker, lean, answers, internal)


async def _appends_first() -> None:
    """APPEND_PASSES loop passes between a parked follower fetch's wake-up and its read. The
    append that woke it may have produces close behind it (librdkafka keeps 5 in flight per
    connection, each to one partition): one already queued on its connection appends in the
    same pass (the connection dispatches it as soon as the previous one parks,
    runtime/connection.py), but one whose bytes are read in the next pass appends in the pass
    after that, while the woken fetch would read in the first. Read then, the answer left that
    partition's records behind and its produce waited a whole follower round more (18% of
    produce and follower pairs under rdkafka_performance load when the queued produce still
    appended two passes later, perf/results/cluster.md "A woken follower Fetch reads two
    passes later"; with it appending at once, 0 passes measured no better: "Parked acks=all
    produces"). Nothing timed: a pass of an idle loop is microseconds."""
    for _ in range(APPEND_PASSES):
        await asyncio.sleep(0)


async def _handed_over(broker, lean: LeanFetch, conn, internal: bool, deadline: float, news_due) -> list:
    """A lean fetch that parked and found a partition no longer steady, answered from here on
    by `answered` (the fetch offsets were recorded on its first pass)."""
    scan = lean.scan
    session = lean.session
    req = FetchRequest(replica_id=scan.replica_id, max_wait_ms=scan.max_wait_ms, min_bytes=scan.min_bytes,
                       max_bytes=scan.max_bytes, isolation_level=scan.isolation_level, session_id=scan.session_id,
                       session_epoch=scan.session_epoch, topics=session.fetch_topics(), forgotten_topics_data=[],
                       rack_id=scan.rack_id)
    plan, refused = planned(broker, Caller(conn, internal), req)
    resp = await answered(broker, req, scan.version, plan, FetchContext(broker.fetch_sessions, session=session),
                          refused, [], deadline, first=False, news_due=news_due)
    if request_metrics.active and not internal:
        request_metrics.answered(FetchRequest.API_KEY, req, resp)
    return encode_response(FetchRequest.API_KEY, scan.version, scan.correlation_id, resp)


def _lean_answer(broker, lean: LeanFetch, answers: list, internal: bool) -> list:
    """The response frame parts (the bytes `encode_response` writes) of a lean fetch's answers:
    those its session must send (`CachedPartition.answered`, `must_respond`; they move to the
    end of the session), grouped as the general path's topic responses. With an error among
    them, through the generated response (leader hints). The metrics recorder, when on, counts
    them as `Broker.dispatch` counts a general answer."""
    session = lean.session
    cached = session.partitions
    runs = lean.runs
    scan = lean.scan
    topics: list = []  # (name, topic id, answers) per run with answers, in order (answers come so)
    last = -1
    errors = False
    moved = []
    for run, key, answer in answers:
        cp = cached.get(key)
        if type(answer) is tuple:
            # (records: a FileRegion, or b"" when none)
            respond = cp is None or cp.answered(answer[1], answer[2], answer[3], type(answer[4]) is not bytes)
        else:
            respond = cp is None or cp.must_respond(answer)
            errors = True
        if respond:
            if run != last:
                last = run
                topics.append((runs[run][0], runs[run][1], []))
            topics[-1][2].append(answer)
            if cp is not None:
                moved.append(key)
    if moved:
        session.move_to_end(moved)
    if request_metrics.active and not internal:  # (what the recorder reads of a response: partitions' errors)
        request_metrics.answered(FetchRequest.API_KEY, None, SimpleNamespace(responses=[
            SimpleNamespace(topic=name, partitions=[_ANSWERED if type(a) is tuple else a for a in ps])
            for name, _, ps in topics]))
    if errors:  # errors may carry leader hints: the general response
        version = scan.version
        resp = with_leader_hints(broker, version, FetchResponse(
            throttle_time_ms=0, error_code=0, session_id=session.id, node_endpoints=[], responses=[
                TopicResp(topic=name, topic_id=topic_id, partitions=[
                    PartitionAnswer(a[0], a[1], a[2], a[3], None, a[4]) if type(a) is tuple else a for a in ps])
                for name, topic_id, ps in topics]))
        return encode_response(FetchRequest.API_KEY, version, scan.correlation_id, resp)
    return fetch_answer_frame(scan.correlation_id, session.id, scan.version, topics)
