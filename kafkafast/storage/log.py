"""Log: the writer of one partition (lives in the partition's owner process)."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from kafkafast import clock
from kafkafast.protocol.errors import (
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from kafkafast.records import BatchHeader, assign_offsets, read_batch_header, scan_follower_batches, validate_batches
from kafkafast.records.model import ATTR_CONTROL
from kafkafast.storage.checkpoint import fsync_dir, is_out_of_space
from kafkafast.storage.config import LogConfig
from kafkafast.storage.leader_epoch import LeaderEpochCache
from kafkafast.storage.partition_state import PartitionState
from kafkafast.storage.producer_state import ProducerStateManager
from kafkafast.storage.reader import LogReader
from kafkafast.storage import txn_index
from kafkafast.storage.index_file import read_index_file, replace_file
from kafkafast.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_segment_name,
    read_header_at,
    scan_to_offset,
    segment_name,
)
from kafkafast.storage.shared_append import (
    W_FIRST_APPEND,
    W_MAX_TS,
    W_MAX_TS_OFFSET,
    W_OI_ENTRIES,
    W_OI_SINCE,
    W_TI_ENTRIES,
    W_TI_SINCE,
    SharedAppend,
)
from kafkafast.storage.threads import off_the_loop, process_thread

logger = logging.getLogger("kafkafast.storage")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_STRAY_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets of an append. A duplicate (idempotent retry) carries the original offsets."""

    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class LoadStats:
    """What opening the log did: bytes re-validated by recovery scans, bytes cut off."""

    scanned_bytes: int
    truncated_bytes: int
    rebuilt_segments: int
    segments: int


# Called with the milliseconds each flush took (Kafka's LogFlushStats.LogFlushRateAndTimeMs),
# set by kafkafast.metrics when the broker serves metrics; None: not timed.
flush_observer: Callable[[float], None] | None = None


def _flush_thread() -> ThreadPoolExecutor:
    """The process's one flush thread."""
    return process_thread("log-flush")


def _back_on(loop: asyncio.AbstractEventLoop, fn: Callable, *args: object) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop closed meanwhile (the broker stopped; `flush()` synced them)
        pass


def _sync_files(fds: list[int], directory: str) -> float:
    """fdatasync each descriptor (closing them all), then the directory; the milliseconds taken."""
    started = time.perf_counter()
    try:
        for fd in fds:
            os.fdatasync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    fsync_dir(directory)
    return (time.perf_counter() - started) * 1000.0


def _now_ms() -> int:
    return clock.now_ms()


class Log:
    """The writer of one partition's log: appends, rolls, flushes, retention, truncation.

    Files: the partition directory `<log dir>/<topic>-<partition>/` holds the segments
    (see `LogSegment`, `OffsetIndex`, `TimeIndex`), producer-state snapshots
    (`ProducerStateManager`) and `leader-epoch-checkpoint` (`LeaderEpochCache`).

    Every change is published to `state` (see `partition_state` for the order) so that
    `LogReader`s in any process see it; this Log reads through its own `reader`. The
    segment list is copy-on-write: it is replaced, never mutated, so a list handed out
    stays a consistent view. The high watermark belongs to the replica manager: the
    broker stores `state.high_watermark` (the Log only lowers it on truncation).

    Append path: validate (headers, CRC, sizes; no per-record Python objects), producer
    checks, offsets assigned in place, roll if needed, one `os.pwrite` at the active
    segment's committed size, sparse index entries, producer state and leader-epoch cache,
    publish, flush policy.

    Shared mode (`shared`, a `SharedAppend`: worker processes of one broker): several Logs,
    one per process, write the same partition. Every method that changes the files or the
    published state runs under the partition's append lock (`_exclusive`): it first catches
    up with what other processes published since this Log last looked (`_sync_shared`:
    segment list, active segment's size and index bookkeeping from the slot, producer
    state by replaying the headers of their batches), then acts as in single-process mode,
    then publishes the active segment's words and a new generation. A lock taken over from
    a dead holder first repairs the log (`_repair_after_dead_holder`). The high watermark
    follows the log end (single node). See docs/ARCHITECTURE.md, "Shared append".
    """

    __slots__ = ("dir", "topic", "partition", "config", "state", "reader", "_segments", "producers",
                 "leader_epochs", "recovery_point", "log_start_offset", "log_end_offset",
                 "_last_flush_ms", "_unflushed", "_pending_deletes", "load_stats", "_closed",
                 "_producer_state_partial", "_shared", "_flushing", "_reshaped")

    def __init__(self, dir: str, topic: str, partition: int, config: LogConfig, state: PartitionState) -> None:
        self.dir = dir
        self.topic = topic
        self.partition = partition
        self.config = config
        self.state = state
        self.reader = LogReader(dir, state, topic=topic, partition=partition)
        self._segments: list[LogSegment] = []
        self.producers = ProducerStateManager(dir)
        self.leader_epochs = LeaderEpochCache(os.path.join(dir, LEADER_EPOCH_CHECKPOINT))
        self.recovery_point = 0
        self.log_start_offset = 0
        self.log_end_offset = 0
        self._last_flush_ms = _now_ms()
        self._unflushed: list[LogSegment] = []
        self._pending_deletes: list[tuple[int, list[str]]] = []
        self.load_stats = LoadStats(0, 0, 0, 0)
        self._closed = False
        self._producer_state_partial = False
        self._shared: SharedAppend | None = None
        self._flushing: tuple | None = None  # rolled segments being synced by the flush thread
        self._reshaped = 0  # truncations and segment swaps: a sync begun before one moves nothing

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, dir: str, topic: str, partition: int, config: LogConfig, state: PartitionState | None = None,
             *, needs_recovery: bool, recovery_point: int, log_start_offset: int = 0,
             shared: SharedAppend | None = None) -> Log:
        """Load (or create) the log in partition directory `dir`.

        Stray `.deleted` / `.cleaned` / `.tmp` files are removed and interrupted segment
        swaps completed. With `needs_recovery` (no clean shutdown) every segment from the
        one holding `recovery_point` on is re-validated and truncated at the first bad
        batch; a segment after a truncated one is dropped. A missing or insane index is
        rebuilt from its segment in any case. Producer state: latest snapshot at or below
        the log end, then the batch headers after it.
        """
        os.makedirs(dir, exist_ok=True)
        log = cls(dir, topic, partition, config, state if state is not None else PartitionState())
        if shared is None:
            log._load(needs_recovery, recovery_point, log_start_offset)
            return log
        # Shared mode: loaded under the append lock (other workers may be appending: the
        # replacement of a dead owner), which also cuts off a dead holder's torn write.
        log._shared = shared
        log._enter(sync=False)
        try:
            log._load(needs_recovery, recovery_point, log_start_offset)
            shared.in_sync = True
        finally:
            log._leave(publish=True)
        return log

    @classmethod
    def attach(cls, dir: str, topic: str, partition: int, config: LogConfig, state: PartitionState,
               shared: SharedAppend) -> Log:
        """A Log over a partition another process loaded and publishes (shared mode, see the
        class docstring): files opened as they are (no recovery: the slot's state is the
        truth), producer state from the latest snapshot plus the batch headers after it."""
        log = cls(dir, topic, partition, config, state)
        log._shared = shared
        log._enter(sync=False)
        try:
            log._reload_segments()
            log._adopt_active()
            st = state
            log.log_start_offset = st.log_start_offset
            log.log_end_offset = log.recovery_point = st.log_end_offset
            snap = log.producers.load_latest(log.log_end_offset)
            if snap is None:
                log._producer_state_partial = log.log_start_offset > 0
            log._replay_producers(snap if snap is not None else log.log_start_offset)
            shared.seen_gen = shared.gen
            shared.seen_segments_version = st.segments_version
            shared.in_sync = True
        finally:
            log._leave(publish=False)
        return log

    # -- shared mode -------------------------------------------------------------------

    @property
    def publishes_high_watermark(self) -> bool:
        """Shared mode: the high watermark follows the log end, published under the lock."""
        return self._shared is not None and self._shared.hw_follows_end

    @property
    def shared(self) -> SharedAppend | None:
        return self._shared

    def _enter(self, sync: bool = True) -> None:
        sh = self._shared
        assert sh is not None
        sh.rlock.acquire()
        if sh.depth:
            sh.depth += 1
            return
        try:
            stolen = sh.lock.acquire()
        except BaseException:
            sh.rlock.release()
            raise
        sh.depth = 1
        sh.in_sync = False
        try:
            if stolen and sh.gen > 0:
                self._repair_after_dead_holder()
                sh.dirty = True
            if sync:
                self._sync_shared()
                sh.in_sync = True
        except BaseException:
            self._leave(publish=False)
            raise

    def _leave(self, publish: bool) -> None:
        sh = self._shared
        assert sh is not None
        try:
            if sh.depth > 1:
                sh.depth -= 1
                sh.dirty |= publish
                return
            try:
                if (publish or sh.dirty) and sh.in_sync and self._segments:
                    self._publish_shared()
                elif sh.dirty:  # repaired, but this Log's view is not current: others just re-read
                    sh.q[sh.gen_at] = sh.gen + 1
            finally:
                sh.dirty = False
                sh.depth = 0
                sh.lock.release()
        finally:
            sh.rlock.release()

    @contextmanager
    def _exclusive(self, publish: bool = True) -> Iterator[None]:
        if self._shared is None:
            yield
            return
        self._enter()
        try:
            yield
        finally:
            self._leave(publish)

    def _publish_shared(self) -> None:
        """The active segment's bookkeeping into the slot words, then a new generation."""
        sh = self._shared
        assert sh is not None
        seg = self._segments[-1]
        oi, ti = seg.offset_index, seg.time_index
        q, at = sh.q, sh.words_at  # (stored in place: this runs at every shared-mode append)
        q[at + W_OI_ENTRIES] = oi.entries
        q[at + W_TI_ENTRIES] = ti.entries
        q[at + W_OI_SINCE] = oi.bytes_since
        q[at + W_TI_SINCE] = ti.bytes_since
        q[at + W_MAX_TS] = seg.max_timestamp
        q[at + W_MAX_TS_OFFSET] = seg.offset_of_max_timestamp
        q[at + W_FIRST_APPEND] = seg.first_append_ms
        gen = q[sh.gen_at] + 1
        q[sh.gen_at] = gen
        sh.seen_gen = gen
        sh.seen_segments_version = self.state.segments_version

    def _sync_shared(self) -> None:
        """Catch up with what other processes published since this Log last looked."""
        sh = self._shared
        assert sh is not None
        gen = sh.gen
        if gen == sh.seen_gen:
            return
        st = self.state
        old_active = self._segments[-1] if self._segments else None
        old_size = old_active.size if old_active is not None else 0
        if st.segments_version != sh.seen_segments_version or old_active is None \
                or st.active_base_offset != old_active.base_offset:
            self._reload_segments()
        old_end = self.log_end_offset
        self._adopt_active()
        self.log_start_offset = st.log_start_offset
        self.log_end_offset = st.log_end_offset
        if self.log_end_offset > old_end:
            active = self._segments[-1]
            if active is old_active and old_size <= active.size:  # only appends since: walk just their headers
                self._replay_segment(active, old_size, None, old_end)
            else:
                self._replay_producers(old_end)
        elif self.log_end_offset < old_end:  # cut back (a repair): producer state from scratch
            self.producers.clear()
            snap = self.producers.load_latest(self.log_end_offset)
            self._replay_producers(snap if snap is not None else self.log_start_offset)
        sh.seen_gen = gen
        sh.seen_segments_version = st.segments_version

    def _adopt_active(self) -> None:
        """The active segment's size, next offset, timestamps and index bookkeeping as published."""
        sh = self._shared
        assert sh is not None
        st = self.state
        seg = self._segments[-1]
        seg.size = st.active_committed_size
        seg.next_offset = max(st.log_end_offset, seg.base_offset)
        seg.max_timestamp = sh.word(W_MAX_TS)
        seg.offset_of_max_timestamp = sh.word(W_MAX_TS_OFFSET)
        seg.first_append_ms = sh.word(W_FIRST_APPEND)
        seg.offset_index.adopt(sh.word(W_OI_ENTRIES), sh.word(W_OI_SINCE))
        seg.time_index.adopt(sh.word(W_TI_ENTRIES), sh.word(W_TI_SINCE))

    def _reload_segments(self) -> None:
        """Re-list the segment files up to the published active one and (re)open what changed:
        the active segment always, segments that are new to this Log, none that are gone."""
        st = self.state
        active_base = st.active_base_offset
        bases = sorted(b for b in (parse_segment_name(n) for n in os.listdir(self.dir))
                       if b is not None and b <= active_base)
        if not bases or bases[-1] != active_base:
            raise KafkaStorageError(f"{self.topic}-{self.partition}: active segment {active_base} missing")
        old = {s.base_offset: s for s in self._segments}
        old_active = self._segments[-1].base_offset if self._segments else -1
        segs: list[LogSegment] = []
        for b in bases:
            seg = old.pop(b, None)
            if seg is not None and (b == old_active or b == active_base or seg.fd < 0):
                seg.close()
                seg = None
            if seg is None:
                seg, ok = LogSegment.open(self.dir, b, self.config, deep_check=False)
                if not ok:
                    seg._load_tail()
                if b != active_base and 0 <= old_active <= b:
                    self._unflushed.append(seg)  # rolled by another process since: the owner flushes it
            segs.append(seg)
        for seg in old.values():
            seg.close()  # deleted by retention or replaced since
        self._unflushed = [s for s in self._unflushed if any(s is t for t in segs)]
        self._segments = segs

    def _repair_after_dead_holder(self) -> None:
        """The lock's previous holder died holding it: nothing it wrote beyond the published
        state may stay. Segment files past the published active one (a roll in progress,
        whether or not it had made the segments version odd yet) go; the active `.log` is
        cut at the committed size (and at the end of its last whole batch; the log end
        follows that batch: the holder may have died between publishing the size and the
        log end); each index file keeps only the published entries (rewritten by rename, as
        readers map it), after which every process reopens."""
        sh = self._shared
        assert sh is not None
        st = self.state
        sh.q[sh.takeovers_at] += 1
        active_base = st.active_base_offset
        # A roll creates the new segment's files before it makes the version odd, so a holder
        # that died in between left them behind an even version. Kept, the empty segment would
        # end up inside the log: the next appender writes the offsets from its base into the
        # active segment, and once a later roll publishes a segment past it, every process
        # lists the empty one as the segment holding those offsets (a fetch there skips to
        # the next segment: a gap).
        unpublished = {b for b in (parse_segment_name(n) for n in os.listdir(self.dir))
                       if b is not None and b > active_base}
        for b in unpublished:
            for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                _unlink(os.path.join(self.dir, segment_name(b) + ext))
        if st.segments_version & 1:
            st.segments_version += 1
        elif unpublished:
            st.segments_version += 2  # stays even: readers that listed them re-list
        stem = os.path.join(self.dir, segment_name(active_base))
        fd = os.open(stem + LOG_SUFFIX, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            committed = min(st.active_committed_size, size)
            index = read_index_file(stem + INDEX_SUFFIX) or bytearray()
            entries = min(sh.word(W_OI_ENTRIES), len(index) // 8)
            pos = 0
            for i in range(entries - 1, -1, -1):
                p = int.from_bytes(index[i * 8 + 4:i * 8 + 8], "big", signed=True)
                if p <= committed:
                    pos = p
                    break
            end = -1
            while pos < committed:
                h = read_header_at(fd, pos)
                if h is None or pos + h.size > committed:
                    break
                end = h.next_offset
                pos += h.size
            if size > pos:
                os.ftruncate(fd, pos)
            st.active_committed_size = pos
            if end > st.log_end_offset:
                st.log_end_offset = end
                if sh.hw_follows_end:
                    st.high_watermark = end
        finally:
            os.close(fd)
        renamed = False
        for ext, size_, w in ((INDEX_SUFFIX, 8, W_OI_ENTRIES), (TIME_INDEX_SUFFIX, 12, W_TI_ENTRIES)):
            data = read_index_file(stem + ext)
            keep = sh.word(w) * size_
            if data is not None and len(data) != keep:
                replace_file(stem + ext, data[:keep])
                renamed = True
        if renamed:
            st.segments_version += 2  # stays even: every process reopens the segment's index files
        logger.warning("%s-%d: append lock taken over from a dead holder; active segment %d cut at %d bytes, "
                       "log end %d", self.topic, self.partition, active_base, pos, st.log_end_offset)
        sh.seen_gen = -1
        sh.seen_segments_version = -1

    def _load(self, needs_recovery: bool, recovery_point: int, log_start_offset: int) -> None:
        cfg = self.config
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith(_STRAY_SUFFIXES):
                _unlink(os.path.join(self.dir, name))
        self._complete_swaps()
        names = os.listdir(self.dir)
        bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
        scanned = truncated = rebuilt = 0
        segments: list[LogSegment] = []
        for i, base in enumerate(bases):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            unflushed = needs_recovery and (next_base is None or next_base > recovery_point)
            seg, ok = LogSegment.open(self.dir, base, cfg, deep_check=unflushed or next_base is None)
            if unflushed or not ok:
                result = seg.recover()
                scanned += result.scanned_bytes
                truncated += result.truncated_bytes
                rebuilt += 1
                segments.append(seg)
                if result.truncated_bytes and next_base is not None:
                    # Kafka: an invalid batch mid-log invalidates every later segment.
                    for later in bases[i + 1:]:
                        for ext in (LOG_SUFFIX, ".index", ".timeindex"):
                            _unlink(os.path.join(self.dir, f"{later:020d}{ext}"))
                    break
            else:
                segments.append(seg)
        # Drop empty leading leftovers? No: an empty segment is a valid (active) segment.
        if not segments:
            segments.append(LogSegment.create(self.dir, max(log_start_offset, 0), cfg))
        self._segments = segments
        active = segments[-1]
        self.log_end_offset = active.next_offset
        self.log_start_offset = min(max(log_start_offset, segments[0].base_offset), self.log_end_offset)
        self.recovery_point = self.log_end_offset if needs_recovery or recovery_point >= self.log_end_offset \
            else max(min(recovery_point, self.log_end_offset), 0)
        if needs_recovery and scanned:
            for seg in segments:
                seg.flush()
        self.load_stats = LoadStats(scanned, truncated, rebuilt, len(segments))
        # Producer state: snapshot, then replay batch headers.
        snap = self.producers.load_latest(self.log_end_offset)
        if snap is None:
            self._producer_state_partial = self.log_start_offset > 0
            self._replay_producers(self.log_start_offset)
        else:
            self._replay_producers(snap)
        # (in memory: the file is written at the next change, the leadership's assign; a
        # partition leading again at its epoch writes nothing, see LeaderEpochCache)
        self.leader_epochs.truncate_from_end(self.log_end_offset, write=False)
        self.leader_epochs.truncate_from_start(self.log_start_offset, write=False)
        self._truncate_txn_indexes(self.log_end_offset)
        st = self.state
        st.segments_version += 1 + (st.segments_version & 1)  # odd
        st.log_start_offset = self.log_start_offset
        st.active_base_offset = active.base_offset
        st.active_committed_size = active.size
        st.log_end_offset = self.log_end_offset
        st.high_watermark = self.log_end_offset
        st.last_stable_offset = self.last_stable_offset(self.log_end_offset)
        st.offline = 0
        self._publish_max_timestamp()
        st.segments_version += 1  # even

    def _complete_swaps(self) -> None:
        """Finish a `replace_segments` interrupted after its `.swap` files were complete."""
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                _unlink(os.path.join(self.dir, name))  # index swaps: rebuilt from the log
        swaps = sorted(b for b in (parse_segment_name(n, LOG_SUFFIX + SWAP_SUFFIX) for n in names) if b is not None)
        for base in swaps:
            seg, _ = LogSegment.open(self.dir, base, self.config, deep_check=False, suffix=SWAP_SUFFIX)
            seg.recover()
            end = seg.next_offset
            for other in sorted(b for b in (parse_segment_name(n) for n in os.listdir(self.dir)) if b is not None):
                if base <= other < max(end, base + 1):
                    for ext in (LOG_SUFFIX, ".index", ".timeindex"):
                        _unlink(os.path.join(self.dir, f"{other:020d}{ext}"))
            seg.change_suffix(SWAP_SUFFIX, "")
            seg.close()

    def _replay_producers(self, from_offset: int) -> None:
        """Feed producer state the headers of every batch at or after `from_offset`."""
        for seg in self._segments:
            if seg.next_offset <= from_offset or seg.size == 0:
                continue
            pos, header = seg.read_position_for(from_offset) if from_offset > seg.base_offset else (0, None)
            self._replay_segment(seg, pos, header, from_offset)

    def _replay_segment(self, seg: LogSegment, pos: int, header: BatchHeader | None, from_offset: int) -> None:
        """Producer state from the headers of `seg`'s batches from position `pos` on."""
        while pos < seg.size:
            if header is None:
                header = read_header_at(seg.fd, pos)
                if header is None:
                    break
            if header.producer_id >= 0 and header.base_offset >= from_offset:
                self.producers.update(header, header.max_timestamp)
                if header.is_control:
                    self._track_marker(header.producer_id, header.base_offset, os.pread(seg.fd, header.size, pos), 0,
                                       seg.base_offset, replay=True)
            pos += header.size
            header = None

    # -- appending ---------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """The current segment list (a snapshot: the Log replaces, never mutates, it).
        Shared mode: after catching up with the other processes' appends and rolls."""
        self._catch_up()
        return self._segments

    def catch_up(self) -> None:
        """Shared mode: this Log's view brought up to what other processes published."""
        self._catch_up()

    def _catch_up(self) -> None:
        sh = self._shared
        if sh is not None and sh.gen != sh.seen_gen and not self._closed:
            with self._exclusive(publish=False):
                pass

    def append(self, records: bytearray | memoryview | bytes, leader_epoch: int, *, now_ms: int,
               validate: bool = True, allow_control: bool = True) -> AppendResult:
        """Append record batches as leader; offsets are assigned in `records` in place.
        (Shared mode: under the append lock, after catching up; see the class docstring.)

        Raises the records layer's errors for invalid batches, InvalidRecordError for a
        control batch unless `allow_control` (client produce may not write markers), RecordListTooLargeError
        when the set exceeds segment.bytes, the producer-state errors (see
        `ProducerStateManager`), KafkaStorageError when the write fails.
        """
        if self._shared is None:
            return self._append(records, leader_epoch, now_ms, validate, allow_control)
        self._enter()  # as `_exclusive()`, without a generator per produce request
        try:
            if self._shared.guard is not None:
                self._shared.guard(leader_epoch)
            return self._append(records, leader_epoch, now_ms, validate, allow_control)
        finally:
            self._leave(True)

    def _append(self, records: bytearray | memoryview | bytes, leader_epoch: int, now_ms: int,
                validate: bool, allow_control: bool) -> AppendResult:
        if isinstance(records, bytes) or (isinstance(records, memoryview) and records.readonly):
            records = bytearray(records)  # only a read-only input is copied
        cfg = self.config
        headers = validate_batches(records, cfg.max_message_bytes) if validate else _headers(records)
        if not headers:
            return AppendResult(-1, -1, -1, self.log_start_offset, 0)
        if not allow_control and any(h.is_control for h in headers):
            raise InvalidRecordError("control batches are written by the transaction coordinator only")
        total = len(records)
        if total > cfg.segment_bytes:
            raise RecordListTooLargeError(f"record set of {total} bytes exceeds segment.bytes {cfg.segment_bytes}")
        dup = self.producers.check(headers, accept_unknown_sequence=self._producer_state_partial
                                   or self.log_start_offset > 0)
        if dup is not None:
            return AppendResult(dup.first_offset, dup.last_offset, -1, self.log_start_offset,
                                dup.last_offset - dup.first_offset + 1, duplicate=True)
        pos = 0
        for h in headers:  # markers: refused from a coordinator epoch older than the producer's last
            if h.is_control and h.producer_id >= 0:
                self.producers.check_marker(h.producer_id, txn_index.control_marker(records, pos)[1])
            pos += h.size
        base = self.log_end_offset
        append_time = now_ms if cfg.log_append_time else -1
        next_offset = assign_offsets(records, base, leader_epoch, append_time)
        infos: list[tuple[int, int, int, int]] = []
        off = base
        count = 0
        for h in headers:
            nxt = off + h.last_offset_delta + 1
            infos.append((off, nxt, append_time if append_time >= 0 else h.max_timestamp, h.size))
            count += h.records_count
            off = nxt
        seg = self._write(records, infos, next_offset - 1, now_ms)
        pos = 0
        for h, (b, _, max_ts, _) in zip(headers, infos):
            if h.producer_id >= 0:
                h = dataclasses.replace(h, base_offset=b)
                self.producers.update(h, max_ts)
                if h.is_control:
                    self._track_marker(h.producer_id, h.base_offset, records, pos, seg.base_offset)
            pos += h.size
        if leader_epoch >= 0 and leader_epoch > self.leader_epochs.latest_epoch:
            if self._shared is not None:  # another process may have started the epoch: re-read the file
                self.leader_epochs = LeaderEpochCache(os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT))
            if leader_epoch > self.leader_epochs.latest_epoch:
                self.leader_epochs.assign(leader_epoch, base)
        self._publish_append(seg, next_offset)
        return AppendResult(base, next_offset - 1, append_time, self.log_start_offset, count)

    def _write(self, data: bytearray | memoryview, infos: list[tuple[int, int, int, int]], last_offset: int,
               now_ms: int) -> LogSegment:
        """Rolls if the batches do not fit the active segment (the new one starts at the first
        batch's offset), writes them, and cuts a failed write back off. Returns the segment."""
        seg = self._segments[-1]
        if seg.should_roll(self.config, len(data), last_offset, now_ms):
            seg = self._roll(infos[0][0])
        old_size = seg.size
        try:
            seg.append(data, infos, now_ms)
        except OSError as exc:
            try:
                seg.truncate_bytes(old_size)
            except OSError:
                pass
            raise KafkaStorageError(f"{self.topic}-{self.partition}: write failed: {exc}") from exc
        return seg

    def _publish_append(self, seg: LogSegment, next_offset: int) -> None:
        """After a write: the new log end and max timestamp published, the flush policy applied."""
        st = self.state
        st.active_committed_size = seg.size
        st.log_end_offset = next_offset
        self.log_end_offset = next_offset
        # Published unbounded by the HW (the replica manager owns that): readers take the min.
        unstable = self.producers.first_unstable_offset()  # (last_stable_offset, inline: once per append)
        st.last_stable_offset = min(unstable, next_offset) if unstable >= 0 else next_offset
        if self._shared is not None and self._shared.hw_follows_end:
            st.high_watermark = next_offset  # single node: under the lock, with the producer state it reflects
        if seg.max_timestamp > st.max_timestamp:
            st.max_timestamp_offset = seg.offset_of_max_timestamp
            st.max_timestamp = seg.max_timestamp
        if next_offset - self.recovery_point >= self.config.flush_messages:
            self._flush()

    def append_as_follower(self, records: bytearray | memoryview | bytes, *, now_ms: int) -> int:
        """Append a leader's batches byte for byte, at the leader's offsets (a replica
        follower). Batches wholly below the log end are skipped; the producer state and the
        leader-epoch cache follow the batches' own fields. Returns the new log end offset.
        (Shared mode, cluster: under the append lock, as a leader append.)"""
        if self._shared is None:  # (a follower appends once per fetched partition: no context manager)
            return self._append_as_follower(records, now_ms)
        with self._exclusive():
            return self._append_as_follower(records, now_ms)

    def _append_as_follower(self, records: bytearray | memoryview | bytes, now_ms: int) -> int:
        # one pass in the twin: CRCs and headers checked, a cut-off tail dropped, the index
        # entries, the producers' batches and the epoch changes picked out
        start, end, infos, producer_batches, epochs = scan_follower_batches(
            records, self.log_end_offset, self.leader_epochs.latest_epoch)
        if not infos:
            return self.log_end_offset
        if infos[0][0] < self.log_end_offset:
            raise KafkaStorageError(f"{self.topic}-{self.partition}: leader batch at {infos[0][0]} "
                                    f"overlaps the log end {self.log_end_offset}")
        data = memoryview(records)[start:end]
        next_offset = infos[-1][1]
        seg = self._write(data, infos, next_offset - 1, now_ms)
        update = self.producers.update_batch
        for at, pid, producer_epoch, first_seq, last_seq, base, last, max_ts, attributes in producer_batches:
            update(pid, producer_epoch, first_seq, last_seq, base, last, max_ts, max_ts, attributes)
            if attributes & ATTR_CONTROL:
                self._track_marker(pid, base, data, at, seg.base_offset)
        for epoch, base in epochs:
            self.leader_epochs.assign(epoch, base)
        self._publish_append(seg, next_offset)
        return next_offset

    # -- transactions ------------------------------------------------------------------

    def _track_marker(self, producer_id: int, base_offset: int, buf, pos: int, segment_base: int, *,
                      replay: bool = False) -> None:
        """A control batch at `base_offset` (at `pos` of `buf`) ended `producer_id`'s transaction (the
        producer keeps the marker's coordinator epoch); an ABORT is recorded in the marker's
        segment's `.txnindex` (once: a replay after a crash finds the entries already written)."""
        kind, coordinator_epoch = txn_index.control_marker(buf, pos)
        first = self.producers.complete_txn(producer_id, coordinator_epoch)
        if first < 0 or kind != txn_index.ABORT:
            return
        unstable = self.producers.first_unstable_offset()
        entry = txn_index.AbortedTxn(producer_id, first, base_offset,
                                     unstable if unstable >= 0 else base_offset + 1)
        path = txn_index.txn_index_path(self.dir, segment_base)
        if replay and any(e.last_offset == entry.last_offset for e in txn_index.read_entries(path)):
            return
        txn_index.append_entry(path, entry)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the oldest open transaction, capped by the high watermark."""
        unstable = self.producers.first_unstable_offset()
        return min(unstable, high_watermark) if unstable >= 0 else high_watermark

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[txn_index.AbortedTxn]:
        return txn_index.collect_aborted(self.dir, [s.base_offset for s in self._segments], fetch_offset,
                                         upper_offset)

    def _truncate_txn_indexes(self, offset: int) -> None:
        """Drop index entries whose marker is at or after `offset` (gone from the log)."""
        for seg in self._segments:
            if seg.next_offset < offset and seg is not self._segments[-1]:
                continue
            path = txn_index.txn_index_path(self.dir, seg.base_offset)
            entries = txn_index.read_entries(path)
            kept = [e for e in entries if e.last_offset < offset]
            if len(kept) != len(entries):
                txn_index.rewrite(path, kept)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        if self._shared is not None:
            with self._exclusive():
                return self._roll_at_end()
        return self._roll_at_end()

    def _roll_at_end(self) -> LogSegment:
        if self._segments[-1].size == 0:
            return self._segments[-1]
        return self._roll(self.log_end_offset)

    def _roll(self, new_base: int) -> LogSegment:
        old = self._segments[-1]
        old.on_become_inactive()
        # Created before the version turns odd: a holder dying here leaves files past the
        # published active segment, which the repair (`_repair_after_dead_holder`) removes.
        new = LogSegment.create(self.dir, new_base, self.config)
        st = self.state
        st.segments_version += 1
        self._segments = self._segments + [new]
        # base before size: a holder dying in between leaves (new base, old size), which the
        # repair reads as the new, empty file's size (never as an empty old segment)
        st.active_base_offset = new_base
        st.active_committed_size = 0
        st.segments_version += 1
        self._unflushed.append(old)
        # Bounds the header replay after a crash; not fsynced (a torn one fails its CRC).
        # Only an optimisation: a full disk skips it (the replay starts at an older one).
        try:
            self.producers.write_snapshot(new_base, fsync=False)
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
        return new

    # -- flushing ----------------------------------------------------------------------

    def flush(self) -> None:
        """fdatasync everything appended so far; the recovery point becomes the log end."""
        with self._exclusive(publish=False):
            self._flush()

    def _flush(self) -> None:
        observer = flush_observer
        started = time.perf_counter() if observer is not None else 0.0
        self._flush_rolled(timed=False)
        self._segments[-1].flush()
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = _now_ms()
        if observer is not None:
            observer((time.perf_counter() - started) * 1000.0)

    def _flush_rolled(self, *, timed: bool = True) -> None:
        if not self._unflushed:
            return
        observer = flush_observer if timed else None
        started = time.perf_counter() if observer is not None else 0.0
        for seg in self._unflushed:
            if seg.fd >= 0:
                seg.flush_all()
        fsync_dir(self.dir)
        self._unflushed = []
        self.recovery_point = max(self.recovery_point, self._segments[-1].base_offset)
        if observer is not None:
            observer((time.perf_counter() - started) * 1000.0)

    def maybe_flush(self, now_ms: int) -> bool:
        """Time-based flush (flush.ms); rolled segments are flushed at the first call after
        their roll, as Kafka does right after a roll. True if the active segment was synced."""
        sh = self._shared
        if (sh is not None and not self._unflushed and sh.seen_segments_version == self.state.segments_version
                and now_ms - self._last_flush_ms < self.config.flush_ms):
            return False  # no roll since this Log last looked and flush.ms not due: no lock taken
        with self._exclusive(publish=False):
            return self._maybe_flush(now_ms)

    def _maybe_flush(self, now_ms: int) -> bool:
        if not self._flush_rolled_in_background():
            self._flush_rolled()
        if self.log_end_offset > self.recovery_point and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self._flush()
            self._last_flush_ms = now_ms
            return True
        return False

    def _flush_rolled_in_background(self) -> bool:
        """Rolled segments synced by the process's flush thread, as Kafka's scheduler flushes
        a segment after its roll, not on the event loop: the fdatasync of a 64 MiB segment
        written moments ago takes 55 ms on a quiet disk here, several partitions roll
        together, and every request of the broker waited behind them (the RF3 acks=all p99 of
        ~240 ms in perf/results/cluster.md, "Rolled segments synced off the loop"). The
        thread syncs duplicates of the files' descriptors (a retention or truncation closing
        the segment meanwhile does not disturb it); the recovery point moves on the loop when
        it is done (`_rolled_flushed`). Until then the segments stay in `_unflushed`, so a
        `flush()` (clean shutdown, flush.ms) still syncs them itself. False without a running
        event loop: the caller syncs them in place."""
        if not self._unflushed or self._flushing is not None:  # (one sync in flight per log)
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        fds: list[int] = []
        try:
            for seg in self._unflushed:
                if seg.fd >= 0:
                    for fd in (seg.fd, seg.offset_index.writer_fd, seg.time_index.writer_fd):
                        if fd >= 0:
                            fds.append(os.dup(fd))
        except OSError:
            for fd in fds:
                os.close(fd)
            return False
        token = self._flushing = (self._reshaped, tuple(self._unflushed), self._segments[-1].base_offset)
        done = _flush_thread().submit(_sync_files, fds, self.dir)
        done.add_done_callback(lambda f: _back_on(loop, self._rolled_flushed, token, f))
        return True

    def _rolled_flushed(self, token: tuple, done: Future) -> None:
        """On the loop: the flush thread synced the segments rolled before `upto`."""
        if self._flushing is token:
            self._flushing = None
        reshaped, synced, upto = token
        exc = done.exception()
        if exc is not None:
            logger.error("syncing the rolled segments of %s-%d failed: %s", self.topic, self.partition, exc)
            return
        if self._closed or reshaped != self._reshaped:
            return  # truncated or swapped meanwhile: the next periodic call syncs what is left
        self._unflushed = [s for s in self._unflushed if not any(s is t for t in synced)]
        self.recovery_point = max(self.recovery_point, min(upto, self.log_end_offset))
        if flush_observer is not None:
            flush_observer(done.result())

    # -- deletion ----------------------------------------------------------------------

    def delete_records_before(self, offset: int, *, now_ms: int | None = None) -> int:
        """DeleteRecords: move the log start to `offset` (-1: the high watermark) and delete
        the segments wholly below it; the new log start. OffsetOutOfRangeError beyond HW."""
        with self._exclusive():
            return self._delete_records_before(offset, now_ms)

    def _delete_records_before(self, offset: int, now_ms: int | None) -> int:
        hw = self.state.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: cannot delete records before {offset}: high watermark is {hw}")
        if offset > self.log_start_offset:
            self._set_log_start(offset)
            self._delete_segments(lambda seg, next_base: next_base <= offset, now_ms)
        return self.log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest whole segments past retention.ms / retention.bytes or below the
        log start offset; the active segment is never deleted. Number of segments deleted."""
        with self._exclusive():
            return self._apply_retention(now_ms)

    def _apply_retention(self, now_ms: int) -> int:
        cfg = self.config
        deleted = self._delete_segments(lambda seg, next_base: next_base <= self.log_start_offset, now_ms)
        if cfg.delete:
            if cfg.retention_ms >= 0:
                deleted += self._delete_segments(
                    lambda seg, next_base: now_ms - seg.largest_timestamp() > cfg.retention_ms, now_ms)
            if cfg.retention_bytes >= 0:
                diff = sum(s.size for s in self._segments) - cfg.retention_bytes

                def over_size(seg: LogSegment, next_base: int) -> bool:
                    nonlocal diff
                    if diff - seg.size >= 0:
                        diff -= seg.size
                        return True
                    return False

                deleted += self._delete_segments(over_size, now_ms)
        self.delete_pending_files(now_ms)
        return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment, int], bool], now_ms: int | None) -> int:
        segs = self._segments
        hw = self.state.high_watermark
        n = 0
        while n < len(segs) - 1:
            next_base = segs[n + 1].base_offset
            if next_base > hw or not predicate(segs[n], next_base):
                break
            n += 1
        if n == 0:
            return 0
        doomed, kept = segs[:n], segs[n:]
        st = self.state
        st.segments_version += 1
        if kept[0].base_offset > self.log_start_offset:
            self.log_start_offset = kept[0].base_offset
            st.log_start_offset = self.log_start_offset
            self.leader_epochs.truncate_from_start(self.log_start_offset, write=False)
        self._segments = kept
        self._unflushed = [s for s in self._unflushed if s not in doomed]
        self._publish_max_timestamp()
        st.segments_version += 1
        now = _now_ms() if now_ms is None else now_ms
        for seg in doomed:
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg.mark_deleted()))
        self.delete_pending_files(now)
        return n

    def delete_pending_files(self, now_ms: int, *, in_place: bool = False) -> int:
        """Unlink `.deleted` files whose file.delete.delay.ms has passed; how many.

        On an event loop the process's flush thread unlinks them, as Kafka's scheduler deletes
        a segment's files off the request path: unlinking a 64 MiB segment whose pages are
        clean took 23 ms here (the kernel frees every cached page), retention makes several
        partitions' segments due together, and every request of the broker waited behind the
        unlinks. `in_place` (a closing log) or no running loop: unlinked before returning."""
        if not self._pending_deletes:
            return 0
        due = [path for t, paths in self._pending_deletes if t <= now_ms for path in paths]
        if not due:
            return 0
        self._pending_deletes = [(t, p) for t, p in self._pending_deletes if t > now_ms]
        if in_place:
            _unlink_all(due)
        else:
            off_the_loop("log-flush", _unlink_all, due)
        return len(due)

    def _set_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.state.log_start_offset = offset
        self.leader_epochs.truncate_from_start(offset, write=False)

    def _publish_max_timestamp(self) -> None:
        best_ts, best_off = -1, -1
        for seg in self._segments:
            if seg.max_timestamp > best_ts:
                best_ts, best_off = seg.max_timestamp, seg.offset_of_max_timestamp
        self.state.max_timestamp_offset = best_off
        self.state.max_timestamp = best_ts

    # -- truncation (followers) --------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after `offset` (a follower diverged from its leader)."""
        with self._exclusive():
            self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        offset = max(offset, 0)
        st = self.state
        st.segments_version += 1
        now = _now_ms()
        if offset <= self._segments[0].base_offset or offset < self.log_start_offset:
            for seg in self._segments:
                self._pending_deletes.append((now, seg.mark_deleted()))
            self._segments = [LogSegment.create(self.dir, offset, self.config)]
            self.log_start_offset = offset
            st.log_start_offset = offset
            self.log_end_offset = offset
            self.leader_epochs.truncate_from_start(offset)
        else:
            keep = [s for s in self._segments if s.base_offset < offset]
            for seg in self._segments[len(keep):]:
                self._pending_deletes.append((now, seg.mark_deleted()))
            self._segments = keep
            active = keep[-1]
            removed = active.truncate_to(offset)
            self.log_end_offset = min(offset, active.next_offset) if removed else offset
            active.next_offset = self.log_end_offset
        self._unflushed = [s for s in self._unflushed if s in self._segments[:-1]]
        self._reshaped += 1
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.producers.delete_snapshots_above(self.log_end_offset)
        self._truncate_txn_indexes(self.log_end_offset)
        snap = self.producers.load_latest(self.log_end_offset)
        self._replay_producers(snap if snap is not None else self.log_start_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        active = self._segments[-1]
        st.active_base_offset = active.base_offset
        st.active_committed_size = active.size
        st.log_end_offset = self.log_end_offset
        st.high_watermark = min(st.high_watermark, self.log_end_offset)
        st.last_stable_offset = self.last_stable_offset(st.high_watermark)
        self._publish_max_timestamp()
        st.segments_version += 1
        self.delete_pending_files(now)

    # -- segment replacement (the cleaner) ---------------------------------------------

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> None:
        """Atomically swap `old` segments for `new` ones, with Kafka's crash-safe renames.

        `new` segments were written with suffix `.cleaned` (`LogSegment.create(...,
        suffix=".cleaned")`) and must not cover the active segment. Steps: new files
        `.cleaned` -> `.swap`; old files -> `.deleted`; new files `.swap` -> final names.
        A crash before every `.swap` exists leaves the old segments (`.cleaned` are
        dropped at load); after, the load completes the swap (`_complete_swaps`).
        """
        with self._exclusive():
            self._replace_segments(old, new)

    def _replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> None:
        active = self._segments[-1]
        if any(s is active for s in old) or any(s.base_offset >= active.base_offset for s in new):
            raise ValueError("the active segment cannot be replaced")
        new = sorted(new, key=lambda s: s.base_offset)
        for seg in reversed(new):
            seg.flush_all()
            seg.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.dir)
        st = self.state
        st.segments_version += 1
        now = _now_ms()
        for seg in old:
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg.mark_deleted()))
        for seg in new:
            seg.change_suffix(SWAP_SUFFIX, "")
        fsync_dir(self.dir)
        old_ids = {id(s) for s in old}
        self._segments = sorted([s for s in self._segments if id(s) not in old_ids] + new,
                                key=lambda s: s.base_offset)
        self._unflushed = [s for s in self._unflushed if id(s) not in old_ids]
        self._reshaped += 1
        self._publish_max_timestamp()
        st.segments_version += 1

    # -- reading -----------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first record with a
        timestamp >= `timestamp`, or None."""
        return self.reader.offset_for_timestamp(timestamp)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3): (timestamp, offset), or None for an empty log."""
        return self.reader.max_timestamp_offset()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset)."""
        if self._shared is not None:  # another process may have appended, or started an epoch
            self._catch_up()
            self.leader_epochs = LeaderEpochCache(os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT))
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def expire_producers(self, now_ms: int, max_age_ms: int = 86400000) -> int:
        """producer.id.expiration.ms: forget idle producers (their retries become unknown).
        Shared mode: after catching up, so a transaction another worker opened keeps its producer."""
        self._catch_up()
        n = self.producers.remove_expired(now_ms, max_age_ms)
        if n:
            self._producer_state_partial = True
        return n

    # -- closing -----------------------------------------------------------------------

    def close(self, clean: bool = True) -> bool:
        """Close the files. `clean`: flush, record the active segment's max timestamp in its
        time index and snapshot producer state at the log end (no replay at next open).

        True if all that got written. On a full disk what does not fit is skipped (False):
        the log itself is flushed, and the next open recovers from the files it has (an
        older snapshot plus a header replay, the epochs the batches carry)."""
        if self._closed:
            return True
        if self._shared is None:
            return self._close(clean)
        self._enter(sync=clean)  # an unclean close changes nothing (its directory may be gone)
        try:
            return self._close(clean)
        finally:
            self._leave(publish=clean)

    def _close(self, clean: bool) -> bool:
        self._closed = True
        complete = True
        try:
            if clean:
                self._flush()
                self._segments[-1].on_become_inactive()
                complete = self.leader_epochs.flush_if_behind()
                try:
                    self.producers.write_snapshot(self.log_end_offset)
                except OSError as exc:
                    if not is_out_of_space(exc):
                        raise
                    complete = False
        finally:
            for seg in self._segments:
                seg.close()
            self.reader.close()
            self.delete_pending_files(1 << 62 if clean else 0, in_place=True)
        return complete

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset}, "
                f"segments={len(self._segments)})")


def _headers(records: bytearray | memoryview) -> list[BatchHeader]:
    """Headers of trusted batches (validate=False): one header parse per batch."""
    out = []
    pos, n = 0, len(records)
    while pos < n:
        h = read_batch_header(records, pos)
        out.append(h)
        pos += h.size
    return out


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink_all(paths: list[str]) -> None:
    """Unlink each path; one that cannot be is logged and the rest still go (a `.deleted` file
    left over is removed by the next load of the log)."""
    for path in paths:
        try:
            _unlink(path)
        except OSError as exc:
            logger.error("could not delete %s: %s", path, exc)


__all__ = ["AppendResult", "LoadStats", "Log", "scan_to_offset"]
