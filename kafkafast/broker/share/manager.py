"""The broker side of ShareFetch and ShareAcknowledge: share sessions, share-partitions and
their acquisition locks, for the partitions this process leads.

Data path of a ShareFetch (`fetch`): the share session is opened (epoch 0), checked and
advanced (epoch N: it must be the session's next epoch, else INVALID_SHARE_SESSION_EPOCH;
no session: SHARE_SESSION_NOT_FOUND) or closed (-1); the piggy-backed acknowledgements are
applied; then for each partition of the session, its `SharePartition` (loaded on first use
from the state store, or started where `share.auto.offset.reset` says) picks the first
Available offset, the log's batches from the one holding it (up to MaxBytes, one segment,
below the high watermark, or the last stable offset with `share.isolation.level=read_committed`,
which also archives the batches of aborted transactions as they are passed) are walked and
whole batches acquired until MaxRecords or the record-lock limit (the batch that reaches
either is acquired to its end, as Kafka's); their headers are read as the
walk goes (`LogBatches`, 64 KiB at a time), so the bytes read follow what is acquired, not the
client's MaxBytes. The answer carries the batches that hold acquired records (a file region sent
with sendfile when they are adjacent, as Fetch answers) and the acquired ranges with their
delivery counts, and a lock timer is started for them. With nothing acquired the fetch parks
until an append to one of its partitions, or a change in one of the group's share-partitions
that may let it acquire (records released, a lock expired, an acknowledgement moved the start
offset and so freed record locks: as Kafka completes a share-partition's delayed share
fetches), wakes it, or MaxWaitMs passes. A ShareFetch whose acknowledgements free records
wakes the parked ones only after its own acquisition, and only if records are left for them
(else every consumer's acknowledgement would wake every parked fetch of the partition, each to
find that the acknowledging fetch took the records; kafka_server_share_fetch_wakeups counts
the wake-ups).

Settings: group.share.record.lock.duration.ms (within group.share.min/max.record.lock.
duration.ms; per group `share.record.lock.duration.ms`), group.share.delivery.count.limit
(per group `share.delivery.count.limit`), group.share.partition.max.record.locks, and the
group configs share.auto.offset.reset (latest, earliest, by_duration:<ISO-8601 duration>) and
share.isolation.level (`group_configs.py`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Iterator

from kafkafast import clock
from kafkafast.broker.share.partition import InvalidRecordState, SharePartition, StateBatch
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol import errors as E
from kafkafast.protocol.primitives import FileRegion
from kafkafast.records.batch import read_batch_header
from kafkafast.records.model import ATTR_CONTROL, ATTR_TRANSACTIONAL, BATCH_HEADER_SIZE, BATCH_LENGTH_OVERHEAD
from kafkafast.storage.txn_index import collect_aborted

log = logging.getLogger("kafkafast.share")
EC = E.ErrorCode
FINAL_EPOCH = -1
# The client id of the ShareAcknowledge (epoch -1, no topics) by which the worker holding a
# client's connection tells the group's worker that the connection a share session was
# opened on (forwarded from there) closed (runtime/placement.py).
CONNECTION_LOST_CLIENT = "kafkafast-share-connection-lost"
HEADER_READ = 64 * 1024  # bytes read at a time while walking the batch headers of a share acquisition
_ENTRY_LENGTH = struct.Struct(">i")


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[tuple[str, int], bytes] = field(default_factory=dict)  # (topic, partition) -> topic id
    conn: Any = None  # the client connection that opened it (None: forwarded by another worker)


@dataclass(slots=True)
class PartitionAnswer:
    """What one partition contributes to a ShareFetch / ShareAcknowledge answer."""
    topic: str
    topic_id: bytes
    partition: int
    error: int = 0
    message: str | None = None
    ack_error: int = 0
    ack_message: str | None = None
    records: bytes | FileRegion = b""
    acquired: list[tuple[int, int, int]] = field(default_factory=list)
    acked: bool = False


class HeldWrites:
    """State writes held back while one ShareFetch applies its acknowledgements and acquires,
    so a share-partition changed by both is written once (`SharePartitionManager.flush`, before
    the request parks or is answered): share-partition -> (topic id, offset ranges changed);
    and the share-partitions whose acknowledgements freed records, whose parked fetches are
    woken after the acquisition if records are left (`wake`: share-partition -> partition)."""
    __slots__ = ("spans", "wake")

    def __init__(self) -> None:
        self.spans: dict[SharePartition, tuple[bytes, list[tuple[int, int]]]] = {}
        self.wake: dict[SharePartition, Any] = {}


@dataclass(slots=True)
class PersistedState:
    start_offset: int
    state_epoch: int
    batches: list[StateBatch]


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration of days, hours, minutes, seconds (Java's Duration.parse subset) in ms."""
    m = _DURATION.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        return None
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


def _archived(header: Any, aborted: list[tuple[int, int, int]]) -> bool:
    """Whether a batch's records are archived as they are passed, never delivered: a control
    batch (a transaction marker), or with read_committed a batch of an aborted transaction
    (`aborted`: (first offset, marker offset, producer id) of the aborted transactions in the range)."""
    if header.attributes & ATTR_CONTROL:
        return True
    if not header.attributes & ATTR_TRANSACTIONAL:
        return False
    # An aborted transaction of this producer spanning the batch (from its first offset to its ABORT marker).
    return any(pid == header.producer_id and first <= header.base_offset <= last for first, last, pid in aborted)


def _loaded(sp: SharePartition | None, topic_id: bytes, part: Any) -> bool:
    """Whether `sp` is the share-partition of this partition as it is now: loaded while this
    broker has led the partition without a break (a leader epoch bumped with this broker still
    the leader, as the ZooKeeper controller does when a follower leaves the ISR, keeps it: its
    in-memory state is the newest, writes of it may still be on their way to the share
    coordinator, and reading the stored state again would lose them; Kafka's KRaft controller
    has not bumped the leader epoch for an ISR shrink since KAFKA-15021), and of this topic id
    (not of a topic of the same name deleted before)."""
    return (sp is not None and 0 <= part.leading_since <= sp.leader_epoch <= part.leader_epoch
            and sp.topic_id == topic_id)


def _replaced(sp: SharePartition, saved: PersistedState | None) -> bool:
    """Whether the stored state is no longer the loaded share-partition's: a new state epoch, or
    gone (unless its first write is still on its way: records are acquired from it)."""
    return saved.state_epoch != sp.state_epoch if saved is not None else not sp.holds_acquired()


class LogBatches:
    """The batches of a log region (whole batches of one segment, as the reader answers a fetch)
    as `SharePartition.acquire` takes them: (base offset, last offset, archived as passed), v2
    batches only. The headers are read as the walk goes, HEADER_READ bytes at a time from the
    batch reached, so an acquisition reads about what it acquires whatever MaxBytes the client
    sent; a batch's records are never read here (`answer` sends them from the file)."""

    __slots__ = ("fd", "pos", "end", "aborted", "spans", "bytes_read", "_buf", "_at")

    def __init__(self, region: FileRegion, aborted: list[tuple[int, int, int]]) -> None:
        self.fd, self.pos, self.end = region.fd, region.offset, region.offset + region.length
        self.aborted = aborted
        self.spans: list[tuple[int, int]] = []  # (file position, size) of each batch taken
        self.bytes_read = 0
        self._buf = b""
        self._at = self.pos  # the file position of _buf

    def __iter__(self) -> Any:
        while self.end - self.pos >= 17:  # an entry's offset, length and magic
            rel = self.pos - self._at
            if len(self._buf) - rel < min(BATCH_HEADER_SIZE, self.end - self.pos):
                self._buf = os.pread(self.fd, min(HEADER_READ, self.end - self.pos), self.pos)
                self.bytes_read += len(self._buf)
                self._at, rel = self.pos, 0
                if len(self._buf) < 17:
                    return  # the file is shorter than the region (truncated meanwhile)
            length = _ENTRY_LENGTH.unpack_from(self._buf, rel + 8)[0]
            if length < 0:
                raise E.CorruptMessageError(f"negative entry length {length} at {self.pos}")
            size = length + BATCH_LENGTH_OVERHEAD
            if size > self.end - self.pos:
                return
            pos, self.pos = self.pos, self.pos + size
            if self._buf[rel + 16] != 2:
                continue  # a legacy (v0/v1) entry: never delivered to share consumers
            if len(self._buf) - rel < BATCH_HEADER_SIZE:
                return
            h = read_batch_header(self._buf, rel)
            self.spans.append((pos, size))
            yield h.base_offset, h.last_offset, _archived(h, self.aborted)

    def answer(self, used: list[int]) -> bytes | FileRegion:
        """The bytes of the batches taken at the indexes `used`: a file region (sent with
        sendfile) when they are adjacent in the file, else read and joined."""
        first, last = self.spans[used[0]], self.spans[used[-1]]
        if last[0] + last[1] - first[0] == sum(self.spans[i][1] for i in used):
            return FileRegion(self.fd, first[0], last[0] + last[1] - first[0])
        return b"".join(os.pread(self.fd, self.spans[i][1], self.spans[i][0]) for i in used)


class SharePartitionManager:
    def __init__(self, broker: Any, store: Any, group_config: Callable[[str, str], str | None],
                 refresh_configs: Callable[[str], Awaitable[None]]) -> None:
        self.broker = broker
        cfg = broker.config
        self.lock_ms = cfg.get_int("group.share.record.lock.duration.ms")
        self.min_lock_ms = cfg.get_int("group.share.min.record.lock.duration.ms")
        self.max_lock_ms = cfg.get_int("group.share.max.record.lock.duration.ms")
        if not self.min_lock_ms <= self.lock_ms <= self.max_lock_ms:
            raise ValueError("group.share.record.lock.duration.ms must be within group.share.min.record.lock.duration.ms "
                             "and group.share.max.record.lock.duration.ms")
        self.delivery_limit = cfg.get_int("group.share.delivery.count.limit")
        self.max_locks = cfg.get_int("group.share.partition.max.record.locks")
        self.store = store
        self.group_config = group_config
        self.refresh_configs = refresh_configs
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        # parked ShareFetches by the share-partitions they wait on: (group, topic, partition)
        self._waiters: dict[tuple[str, str, int], set[asyncio.Future]] = {}
        self._timers: set[Any] = set()
        self._loop: Any = None
        self._held: HeldWrites | None = None

    def start(self, loop: Any) -> None:
        self._loop = loop

    def stop(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        for key in list(self._waiters):
            self._wake(key)

    # -- settings per group --------------------------------------------------------------------
    def lock_duration_ms(self, group_id: str) -> int:
        value = self.group_config(group_id, "share.record.lock.duration.ms")
        return int(value) if value else self.lock_ms

    def delivery_count_limit(self, group_id: str) -> int:
        value = self.group_config(group_id, "share.delivery.count.limit")
        return int(value) if value else self.delivery_limit

    def _initial_offset(self, group_id: str, part: Any) -> int:
        reset = (self.group_config(group_id, "share.auto.offset.reset") or "latest").strip().lower()
        if reset == "earliest":
            return part.log_start_offset
        if reset.startswith("by_duration:"):
            ms = duration_ms(reset.split(":", 1)[1]) or 0
            found = part.log.reader.offset_for_timestamp(clock.now_ms() - ms)
            return found[0] if found is not None else part.high_watermark
        return part.high_watermark

    # -- share-partitions ------------------------------------------------------------------------
    async def prepare(self, group_id: str, topic: str, topic_id: bytes, part: Any, *, verify: bool = False) -> None:
        """Loads the share-partition from its stored state (the share coordinator's, possibly on
        another broker), or starts it where share.auto.offset.reset says, unless it was loaded in
        this broker's current run of leadership of the partition (a leader elected again reads
        the state again; `_loaded`).
        `verify` (a share session opens): the stored state is read even so, and loaded again if
        AlterShareGroupOffsets gave it a new state epoch or DeleteShareGroupOffsets removed it
        (both only while the group is empty, so no live member holds its records)."""
        key = (group_id, topic, part.index)
        sp = self.partitions.get(key)
        if _loaded(sp, topic_id, part) and not verify:
            return
        # read with the leader epoch its writes carry (the loaded one's, kept through an epoch bump):
        # the share coordinator fences a write older than the newest epoch it was read or written with
        epoch = sp.leader_epoch if _loaded(sp, topic_id, part) else part.leader_epoch
        saved = await self.store.fetch(group_id, topic_id, part.index, epoch)
        if saved is None or saved.start_offset < 0:
            await self.refresh_configs(group_id)  # its share.auto.offset.reset as stored now
        sp = self.partitions.get(key)
        if _loaded(sp, topic_id, part) and not (verify and _replaced(sp, saved)):
            return  # loaded (meanwhile by another request), and the stored state is still its own
        if saved is not None and saved.start_offset >= 0:
            sp = SharePartition(group_id, topic, part.index, saved.start_offset, saved.batches, saved.state_epoch)
        else:
            sp = SharePartition(group_id, topic, part.index, self._initial_offset(group_id, part))
        sp.leader_epoch, sp.topic_id = epoch, topic_id
        sp.persist = self._persister(topic_id)
        self.partitions[key] = sp
        if saved is None or saved.start_offset < 0:
            sp.persist(sp, [])

    def share_partition(self, group_id: str, topic: str, topic_id: bytes, part: Any) -> SharePartition:
        """The share-partition `prepare` loaded (COORDINATOR_LOAD_IN_PROGRESS if it was not)."""
        sp = self.partitions.get((group_id, topic, part.index))
        if not _loaded(sp, topic_id, part):
            raise E.CoordinatorLoadInProgressError(f"share-partition {topic}-{part.index} of {group_id} is not loaded")
        if sp.start_offset < part.log_start_offset:
            sp.reset_to(part.log_start_offset)
        return sp

    def _persister(self, topic_id: bytes) -> Callable[[SharePartition, list[tuple[int, int]]], None]:
        def persist(sp: SharePartition, spans: list[tuple[int, int]]) -> None:
            if self._held is not None:
                self._held.spans.setdefault(sp, (topic_id, []))[1].extend(spans)
            else:
                self._write(sp, topic_id, spans)
        return persist

    def _write(self, sp: SharePartition, topic_id: bytes, spans: list[tuple[int, int]]) -> None:
        """One state write of `sp`'s `spans`; the acknowledgements it holds are confirmed with
        its outcome (at once when it was appended here, else once the share coordinator, or the
        worker owning its partition, answered): see `SharePartition.confirm`."""
        acked = sp.take_unconfirmed()
        mark = len(self.store.pending)
        try:
            self.store.write(sp.group_id, topic_id, sp.partition, sp.write_start_offset(), sp.state_epoch,
                             sp.state_batches(spans), sp.leader_epoch)
        except E.KafkaError:
            if acked:
                self._confirm(sp, acked, False)
            raise
        if acked:
            self._confirm_when_written(sp, acked, [fut for _, fut in self.store.pending[mark:]])

    def _confirm_when_written(self, sp: SharePartition, acked: list[tuple[int, int]], writes: list[Any]) -> None:
        if not writes:
            self._confirm(sp, acked, True)
            return
        left, failed = [len(writes)], [False]

        def done(fut: Any) -> None:
            if fut.cancelled() or fut.exception() is not None:
                failed[0] = True
            else:
                res = fut.result()  # an error code, or a response part with one
                failed[0] = failed[0] or bool(res if isinstance(res, int) else res.error_code)
            left[0] -= 1
            if not left[0]:
                self._confirm(sp, acked, not failed[0])
        for fut in writes:
            fut.add_done_callback(done)

    def _confirm(self, sp: SharePartition, acked: list[tuple[int, int]], ok: bool) -> None:
        """The acknowledgements of `acked` are final (`ok`), or rolled back (their write failed)."""
        try:
            released = sp.confirm(acked, ok, self.delivery_count_limit(sp.group_id))
        except E.KafkaError as exc:  # persisting the release of records whose lock expired meanwhile
            log.warning("share group %s: %s-%d: persisting a release failed: %s", sp.group_id, sp.topic,
                        sp.partition, exc)
            released = 1
        if not ok:
            log.info("share group %s: %s-%d: a state write failed: its acknowledgements are rolled back",
                     sp.group_id, sp.topic, sp.partition)
        if released:  # (the record locks the acknowledgements freed were free from the start: `acknowledge`)
            self._wake_for(sp)

    @contextmanager
    def _holding(self, held: HeldWrites | None) -> Iterator[None]:
        """The state writes of the (synchronous) block go to `held`, when given."""
        self._held = held
        try:
            yield
        finally:
            self._held = None

    def flush(self, held: HeldWrites) -> dict[tuple[str, int], E.KafkaError]:
        """Writes what `held` holds, one write per share-partition with the current state of
        every range it changed; the errors by (topic, partition). A share-partition loaded
        again meanwhile (its stored state changed under it, or a new leader epoch) is skipped:
        its state is the stored one now. Then the parked fetches of the share-partitions whose
        acknowledgements freed records are woken, where records are left to acquire."""
        spans, held.spans = held.spans, {}
        errors: dict[tuple[str, int], E.KafkaError] = {}
        for sp, (topic_id, changed) in spans.items():
            if self.partitions.get((sp.group_id, sp.topic, sp.partition)) is not sp:
                continue
            try:
                self._write(sp, topic_id, changed)
            except E.KafkaError as exc:
                errors[(sp.topic, sp.partition)] = exc
        wake, held.wake = held.wake, {}
        for sp, part in wake.items():
            self._wake_if_acquirable(sp, part)
        return errors

    def forget_group(self, group_id: str) -> None:
        """DeleteGroups (the state store deleted their persisted state): the group's
        share-partitions and share sessions here go. Elsewhere (other partition leaders) a
        share-partition loads its state again when a share session opens: none, so it starts
        where share.auto.offset.reset says."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
        for key in [k for k in self.sessions if k[0] == group_id]:
            self._unbind(self.sessions.pop(key))

    def member_gone(self, group_id: str, member_id: str) -> None:
        """The member's group session expired: its records go back, its share session ends."""
        self._unbind(self.sessions.pop((group_id, member_id), None))
        self._release_member(group_id, member_id, [sp for (g, _, _), sp in self.partitions.items() if g == group_id])

    def _release_member(self, group_id: str, member_id: str, sps: list[SharePartition]) -> None:
        limit = self.delivery_count_limit(group_id)
        for sp in sps:
            try:
                released = sp.release_member(member_id, limit)
            except E.KafkaError as exc:
                log.warning("share group %s: %s-%d: persisting a release failed: %s", group_id, sp.topic,
                            sp.partition, exc)
                released = 1
            if released:
                self._wake_for(sp)

    # -- sessions --------------------------------------------------------------------------------
    def session_for(self, group_id: str, member_id: str, epoch: int, add: Iterable[tuple[str, int, bytes]],
                    forget: Iterable[tuple[str, int]], conn: Any = None) -> ShareSession:
        """The share session of the request (see the module docstring); raises KafkaError.
        A session opened on a client connection (`conn`) ends when that connection closes, and
        the records the member acquired in it go back at once (as Kafka 4.1+ evicts the share
        session of a dropped connection and releases them, KAFKA-19015), not when their locks
        expire. A session opened again (epoch 0) on another connection replaces it: the first
        connection closing then ends nothing."""
        key = (group_id, member_id)
        if epoch == 0:
            self._unbind(self.sessions.get(key))
            session = self.sessions[key] = ShareSession(group_id, member_id, 1, conn=conn)
            if conn is not None:
                conn.on_lost[(self, key)] = lambda: self._connection_lost(session)
        else:
            session = self.sessions.get(key)
            if session is None:
                raise E.ShareSessionNotFoundError(f"no share session for member {member_id}")
            if epoch != FINAL_EPOCH:
                if epoch != session.epoch:
                    raise E.InvalidShareSessionEpochError(f"expected share session epoch {session.epoch}, got {epoch}")
                session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        for topic, p, tid in add:
            session.partitions[(topic, p)] = tid
        for topic, p in forget:
            session.partitions.pop((topic, p), None)
        return session

    def close_session(self, session: ShareSession) -> None:
        """Epoch -1 (or its connection closed): the session ends and the member's acquired
        records in it go back."""
        self._unbind(session)
        self.sessions.pop((session.group_id, session.member_id), None)
        self._release_member(session.group_id, session.member_id,
                             [sp for tp in session.partitions
                              if (sp := self.partitions.get((session.group_id, *tp))) is not None])

    def forwarded_connection_lost(self, group_id: str, member_id: str) -> None:
        """The client connection on another worker through which the member's session was
        opened closed: the session ends as `close_session`, unless it was opened again on a
        connection of this worker since."""
        session = self.sessions.get((group_id, member_id))
        if session is not None and session.conn is None:
            self.close_session(session)

    def _connection_lost(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            self.close_session(session)

    def _unbind(self, session: ShareSession | None) -> None:
        """The session no longer ends with its connection (it ends otherwise, or is replaced)."""
        if session is not None and session.conn is not None:
            session.conn.on_lost.pop((self, (session.group_id, session.member_id)), None)
            session.conn = None

    # -- acknowledgements ------------------------------------------------------------------------
    def acknowledge(self, group_id: str, member_id: str, topic: str, topic_id: bytes, part: Any,
                    batches: list[tuple[int, int, list[int]]],
                    held: HeldWrites | None = None) -> tuple[int, str | None]:
        """Applies a partition's acknowledgement batches; (error code, message). The state
        write goes to `held` when given (the caller flushes it), else out at once."""
        sp = self.share_partition(group_id, topic, topic_id, part)
        released = [0]
        start = sp.write_start_offset()  # (the SPSO past the acknowledged records, confirmed or not)
        try:
            with self._holding(held):
                sp.acknowledge(member_id, batches, self.delivery_count_limit(group_id), released)
            err: tuple[int, str | None] = (0, None)
        except InvalidRecordState as exc:
            err = (EC.INVALID_RECORD_STATE, str(exc))
        except E.KafkaError as exc:  # the state could not be persisted
            err = (exc.code, exc.message)
        if released[0] or sp.write_start_offset() != start:  # records to acquire again, or record locks freed
            if held is not None:
                held.wake[sp] = part  # once the request acquired what it takes of them
            else:
                self._wake_if_acquirable(sp, part)
        return err

    # -- acquisition -----------------------------------------------------------------------------
    def acquire(self, group_id: str, member_id: str, topic: str, topic_id: bytes, part: Any, max_records: int,
                max_bytes: int,
                held: HeldWrites | None = None) -> tuple[bytes | FileRegion, list[tuple[int, int, int]]]:
        """Acquires records of one partition for the member; (batch bytes, acquired ranges). The
        state write goes to `held` when given (the caller flushes it), else out at once."""
        sp = self.share_partition(group_id, topic, topic_id, part)
        bounds = self._acquirable(sp, part)
        if bounds is None:
            return b"", []
        start, upper, committed = bounds
        result = part.log.reader.read(start, max(max_bytes, 1), upper_bound_offset=upper, min_one_batch=True)
        region = result.region if result is not None else None
        if region is None or not len(region):
            return b"", []
        aborted = sorted((a.first_offset, a.last_offset, a.producer_id) for a in collect_aborted(
            part.log.reader.dir, part.log.reader.segment_bases(), start, upper)) if committed else []
        walk = LogBatches(region, aborted)
        with self._holding(held):
            ranges, token, used = sp.acquire(member_id, walk, max_records, self.max_locks, start)
        if not ranges:
            return b"", []
        self._lock(sp, member_id, token, ranges)
        return walk.answer(used), ranges

    def _acquirable(self, sp: SharePartition, part: Any) -> tuple[int, int, bool] | None:
        """(the first offset to look at, the offset to stop before, read_committed) when an
        acquisition could take records of the share-partition now, else None: no Available
        record below the high watermark (or last stable offset), or the record-lock limit reached."""
        start = sp.next_candidate()
        if start is None or (sp.in_flight() >= self.max_locks and start == sp.end_offset):
            return None
        upper = part.high_watermark
        committed = (self.group_config(sp.group_id, "share.isolation.level") or "read_uncommitted") == "read_committed"
        if committed:
            upper = min(upper, part.state.last_stable_offset)
        return (start, upper, committed) if start < upper else None

    def _wake_if_acquirable(self, sp: SharePartition, part: Any) -> None:
        if self._acquirable(sp, part) is not None:
            self._wake_for(sp)

    def _lock(self, sp: SharePartition, member_id: str, token: int, ranges: list[tuple[int, int, int]]) -> None:
        def expire() -> None:
            self._timers.discard(handle)
            try:
                released = sp.release_lock(member_id, token, ranges, self.delivery_count_limit(sp.group_id))
            except E.KafkaError as exc:  # released in memory, not persisted: a restart redelivers them anyway
                log.warning("share group %s: %s-%d: persisting a lock timeout failed: %s", sp.group_id, sp.topic,
                            sp.partition, exc)
                released = 1
            if released:
                self._wake_for(sp)
        handle = clock.call_later(self._loop, self.lock_duration_ms(sp.group_id), expire)
        self._timers.add(handle)

    # -- waiting -----------------------------------------------------------------------------------
    def _wake_for(self, sp: SharePartition) -> None:
        self._wake((sp.group_id, sp.topic, sp.partition))

    def _wake(self, key: tuple[str, str, int]) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)
                if request_metrics.active:
                    request_metrics.share_event("fetch_wakeups", 1)

    async def wait(self, group_id: str, parts: list[Any], timeout: float) -> None:
        """Until an append to one of `parts` (the broker's wait, across workers too), a change
        here that may let the group acquire records of one of them (records released, a lock
        expired, or an acknowledgement moved the start offset, freeing record locks: as Kafka
        completes a share-partition's delayed share fetches after acknowledgements and
        releases), or `timeout` seconds."""
        woken = asyncio.get_running_loop().create_future()
        keys = [(group_id, part.topic, part.index) for part in parts]
        for key in keys:
            self._waiters.setdefault(key, set()).add(woken)
        appended = asyncio.ensure_future(self.broker.wait_for_data(parts, timeout))
        try:
            await asyncio.wait({woken, appended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            appended.cancel()
            for key in keys:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(woken)
                    if not waiting:
                        del self._waiters[key]
