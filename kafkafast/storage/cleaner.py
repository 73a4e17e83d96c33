"""Log compaction: keep the latest record per key in the non-active segments.

For logs with `cleanup.policy` containing `compact` (`__consumer_offsets` included). Kafka's
cleaner, simplified to one cleaner thread:

* **Choosing a log.** The *dirty* part of a log is from its first dirty offset (the end of
  the last cleaning, kept in `<log dir>/cleaner-offset-checkpoint`, Kafka's file and
  format) up to the first uncleanable offset: the active segment's base, or the first
  segment younger than `min.compaction.lag.ms`. A log is cleanable when dirty bytes /
  (clean + dirty bytes) >= `min.cleanable.dirty.ratio`, when the first batch of a dirty
  non-active segment is older than `max.compaction.lag.ms` (KIP-354: whatever the ratio),
  or when a tombstone it retained has passed its delete horizon. The active segment is
  never cleaned, so `segment.ms` and `segment.bytes` (which roll it) decide how soon
  records become cleanable; in a compacted topic `max.compaction.lag.ms` bounds
  `segment.ms` (`LogConfig.max_segment_ms`). Among the cleanable logs the one with the
  highest ratio goes first.
* **Cleaning.** An offset map key -> last offset is built from the dirty part; then every
  segment from the log start to the first uncleanable offset is rewritten keeping a record
  iff no later offset has its key (records without a key are kept). A tombstone (null
  value) is kept until its segment's largest timestamp is older than
  `delete.retention.ms` (so a consumer that read the key has that long to see its
  deletion), then dropped. Transactions, as Kafka's cleaner: cleaning stops at the first
  offset of an open transaction; records of aborted transactions (known from the
  `.txnindex` files) are removed and never enter the offset map; an ABORT marker is removed
  once its segment is past `delete.retention.ms`; committed transactional records are
  compacted like any others; COMMIT markers are kept. Cleaned segments are filled up to
  `segment.bytes`, so small ones merge.
* **Batches.** A batch whose records all survive is copied byte for byte. Otherwise it is
  re-encoded with the records codec (`kafkafast.records`, the compiled twin when built):
  same base offset, last offset delta, partition leader epoch, attributes (codec,
  timestamp type), producer id/epoch and base sequence; each record keeps its offset
  delta, so every surviving record keeps its offset; compressed with the batch's codec.
  A batch left with no records is dropped. Producer state is not rebuilt from cleaned
  segments (it comes from the producer-state snapshots).
* **Swapping.** The cleaned segments are written as `<base>.log.cleaned` (+ indexes) and
  installed with `Log.replace_segments` (`.cleaned` -> `.swap` -> final names, crash-safe;
  the replaced files become `.deleted` and readers holding them finish their reads).

* **Bad batches.** A compressed batch is first checked as produce checks it
  (`validate_compressed_records`: streaming decompression, never more than one 128 KiB
  piece held, at most `message.max.decompressed.bytes` decompressed, by default 64 x the
  topic's max.message.bytes) and only then decoded, so a decompression bomb costs bounded
  memory. A batch that cannot be decoded (one that reached the log before produce checked
  compressed batches, or through a path that does not) makes its partition *uncleanable*,
  as in Kafka: the cleaning is discarded, the error logged once, the partition counted in
  `uncleanable_partitions` and skipped from then on, while the other partitions keep being
  cleaned. It becomes cleanable again once the bad batch has left the log (retention,
  DeleteRecords). Other failures (I/O) are logged and retried after `backoff_ms`.

* **Bounded offset map.** `log.cleaner.dedupe.buffer.size` bounds the keys one cleaning
  maps as Kafka sizes its map (24 bytes an entry, filled to 90%): when the next batch would
  pass that, mapping stops there (at least one batch is mapped, so every cleaning makes
  progress) and the cleaning covers the log up to that offset only (segments beyond it are
  left alone, tombstones and ABORT markers in the partly mapped segment are kept); the
  clean point becomes that offset and the next cleaning continues from it.
* **Throttling.** `log.cleaner.io.max.bytes.per.second` bounds the cleaner's reads plus
  writes on average (Kafka's Throttler): after each segment read and batch written the
  cleaner thread sleeps as long as its bytes so far are ahead of the rate. It and
  `log.cleaner.backoff.ms` are dynamic broker configs (`reconfigure`); a new rate applies
  to a cleaning in progress from its next read or write.

Threading: the expensive part (reading, decoding, re-encoding, writing `.cleaned` files)
runs in one background `threading.Thread` that only reads immutable non-active segment
files and writes new files nobody else sees. The caller drives `periodic()` from the
thread that owns the logs (the broker's event loop); the swap into the log's segment list
happens there, after checking that the segments cleaned are still the log's (retention or
truncation may have replaced them meanwhile; then the work is discarded). Produce and
fetch therefore never wait for a cleaning, only for the swap (renames and an fsync).
"""
from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from crc32c import crc32c as _crc32c

from kafkafast import clock, native
from kafkafast.config import max_decompressed_bytes
from kafkafast.protocol.errors import KafkaError
from kafkafast.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Record,
    compress,
    decode_batch,
    read_batch_header,
    validate_compressed_records,
)
from kafkafast.records.model import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BATCH_LENGTH_OVERHEAD,
    CODEC_NONE,
    CRC_START,
    TIMESTAMP_LOG_APPEND,
)
from kafkafast.storage.checkpoint import OffsetCheckpointFile
from kafkafast.storage.log import Log
from kafkafast.storage.config import LONG_MAX
from kafkafast.storage.segment import CLEANED_SUFFIX, MAX_RELATIVE_OFFSET, LogSegment, read_header_at, segment_name

log = logging.getLogger("kafkafast.cleaner")

# Called with {absolute log dir: uncleanable partitions of this cleaner there} whenever that
# changes (Kafka's LogCleanerManager uncleanable-partitions-count per logDirectory), set by
# kafkafast.metrics when the broker serves metrics; None: not reported.
uncleanable_observer: Callable[[dict[str, int]], None] | None = None

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_READ_CHUNK = 8 << 20
_THROTTLED_CHUNK = 64 << 10  # reads under an I/O rate: small enough to pace evenly
DEDUPE_BUFFER_SIZE = 128 << 20  # log.cleaner.dedupe.buffer.size's default
MAP_ENTRY_BYTES, MAP_LOAD_FACTOR = 24, 0.9  # Kafka's offset map: MD5 of the key + offset; log.cleaner.io.buffer.load.factor

_HEADER_HEAD = struct.Struct(">qiib")
_HEADER_TAIL = struct.Struct(">hiqqqhii")
_U32 = struct.Struct(">I")

_codec = native.load("records")


@dataclass(slots=True)
class CleanStats:
    segments_in: int = 0
    segments_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    aborted_dropped: int = 0  # records of aborted transactions removed
    tombstone_due_ms: int = -1  # earliest time a retained tombstone may go; -1 none


class _AbortedTracker:
    """Walks the batches in offset order and says which belong to aborted transactions (the
    consumer's algorithm over the `.txnindex` entries): a transactional batch of a producer
    whose aborted transaction began at or before it, up to and including its ABORT marker."""

    def __init__(self, aborted: list) -> None:
        self.pending = sorted(aborted, key=lambda a: a.first_offset, reverse=True)
        self.open: dict[int, int] = {}  # producer id -> last offset (marker) of its aborted transaction

    def is_aborted(self, header: BatchHeader) -> bool:
        while self.pending and self.pending[-1].first_offset <= header.last_offset:
            a = self.pending.pop()
            self.open[a.producer_id] = a.last_offset
        if not header.attributes & ATTR_TRANSACTIONAL:
            return False
        end = self.open.get(header.producer_id)
        if end is None or header.base_offset > end:
            return False
        if header.attributes & ATTR_CONTROL:
            del self.open[header.producer_id]
        return True


class UncleanableBatchError(Exception):
    """A batch of the log that the cleaner cannot decode."""

    def __init__(self, offset: int, cause: KafkaError) -> None:
        super().__init__(f"batch at offset {offset}: {cause.message or cause.name}")
        self.offset = offset


class _Throttler:
    """Sleeps the calling (cleaner) thread while the bytes it recorded in the current window
    are ahead of `rate()` bytes per second; windows restart every WINDOW_S so a rate raised
    mid-cleaning applies at once."""

    WINDOW_S = 1.0

    def __init__(self, rate: Callable[[], float]) -> None:
        self.rate = rate
        self._start = time.monotonic()
        self._bytes = 0

    def record(self, nbytes: int) -> None:
        while True:
            rate = self.rate()
            now = time.monotonic()
            if not rate < float("inf"):
                self._start, self._bytes = now, 0
                return
            self._bytes += nbytes
            nbytes = 0
            ahead = self._bytes / rate - (now - self._start)
            if ahead <= 0:
                if now - self._start >= self.WINDOW_S:
                    self._start, self._bytes = now, 0
                return
            time.sleep(min(ahead, 0.1))  # short sleeps: a rate changed meanwhile is looked at again


@dataclass(slots=True)
class _Job:
    log: Log
    segments: list[LogSegment]
    dirty_end: int
    now_ms: int
    new_segments: list[LogSegment] = field(default_factory=list)
    stats: CleanStats = field(default_factory=CleanStats)
    error: BaseException | None = None
    thread: threading.Thread | None = None
    partial_from: int = 2**63 - 1  # base offset of the segment the map covers partly (_cut), if any
    aborted: list = field(default_factory=list)  # the log's aborted transactions (txn_index.AbortedTxn)


class LogCleaner:
    """Chooses compacted logs to clean and cleans one at a time in a background thread."""

    def __init__(self, log_dirs: list[str], *, backoff_ms: int = 15000, enabled: bool = True,
                 max_decompressed: str | None = None, io_max_bytes_per_second: float = float("inf"),
                 dedupe_buffer_size: int = DEDUPE_BUFFER_SIZE) -> None:
        self.log_dirs = list(log_dirs)
        self.backoff_ms = backoff_ms
        self.dedupe_buffer_size = dedupe_buffer_size
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self._throttler = _Throttler(lambda: self.io_max_bytes_per_second)
        self.enabled = enabled
        self.max_decompressed = max_decompressed  # message.max.decompressed.bytes, None: unset
        # partition -> offset of the batch that made it uncleanable (see the module doc)
        self.uncleanable: dict[tuple[str, int], int] = {}
        self._uncleanable_dir: dict[tuple[str, int], str] = {}  # partition -> its log dir (absolute)
        self.clean_points: dict[tuple[str, int], int] = {}
        self.tombstone_due: dict[tuple[str, int], int] = {}
        self._job: _Job | None = None
        self._last_idle_check_ms = 0
        self.cleanings = 0
        for d in self.log_dirs:
            try:
                self.clean_points.update(OffsetCheckpointFile(os.path.join(d, CLEANER_CHECKPOINT)).read())
            except Exception:  # a bad checkpoint only costs a full re-clean
                log.warning("ignoring unreadable %s in %s", CLEANER_CHECKPOINT, d)
        self._publish_uncleanable()

    def _publish_uncleanable(self) -> None:
        observer = uncleanable_observer
        if observer is None:
            return
        counts = {os.path.abspath(d): 0 for d in self.log_dirs}
        for key in self.uncleanable:
            d = self._uncleanable_dir.get(key)
            if d is not None:
                counts[d] = counts.get(d, 0) + 1
        try:
            observer(counts)
        except Exception:  # noqa: BLE001 - metrics never stop the cleaner
            pass

    def reconfigure(self, backoff_ms: int, io_max_bytes_per_second: float, dedupe_buffer_size: int) -> None:
        """New dynamic settings (the broker's thread; the cleaner thread reads the rate anew
        on each read or write it throttles, the map bound when a cleaning starts)."""
        self.backoff_ms = backoff_ms
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self.dedupe_buffer_size = dedupe_buffer_size

    @property
    def map_capacity(self) -> int:
        """Keys one cleaning maps (Kafka's SkimpyOffsetMap slots x the 0.9 load factor)."""
        return max(int(self.dedupe_buffer_size // MAP_ENTRY_BYTES * MAP_LOAD_FACTOR), 1)

    # -- driving -------------------------------------------------------------------------

    def periodic(self, logs: Iterable[Log], now_ms: int | None = None) -> bool:
        """Install a finished cleaning, or start one if a log is due. Call often, from the
        thread that appends to the logs. True while a cleaning is running."""
        now = clock.now_ms() if now_ms is None else now_ms
        job = self._job
        if job is not None:
            if job.thread is not None and job.thread.is_alive():
                return True
            self._job = None
            self._finish(job)
            if job.error is None or isinstance(job.error, UncleanableBatchError):
                self._last_idle_check_ms = 0  # look again at once: another log may be due
            return False
        if not self.enabled or now - self._last_idle_check_ms < self.backoff_ms:
            return False
        self._last_idle_check_ms = now
        best = self.filthiest(logs, now)
        if best is None:
            return False
        self._start(best, now)
        return True

    def clean_now(self, lg: Log, now_ms: int | None = None) -> CleanStats:
        """Clean `lg` in the calling thread, whatever its dirty ratio (tests, tools)."""
        now = clock.now_ms() if now_ms is None else now_ms
        job = self._plan(lg, now)
        if job is None:
            return CleanStats()
        self._run(job)
        self._finish(job)
        return job.stats

    def shutdown(self) -> None:
        job, self._job = self._job, None
        if job is not None and job.thread is not None:
            job.thread.join()
            self._discard(job)
        self.checkpoint()

    # -- choosing ------------------------------------------------------------------------

    def _first_uncleanable(self, lg: Log, now: int) -> tuple[list[LogSegment], int]:
        """The cleanable segments (non-active, older than min.compaction.lag.ms) and the
        first offset after them."""
        segs = lg.segments
        out: list[LogSegment] = []
        lag = lg.config.min_compaction_lag_ms
        unstable = lg.producers.first_unstable_offset()  # an open transaction's data is not cleaned yet
        for seg, nxt in zip(segs[:-1], segs[1:]):
            if lag > 0 and now - seg.largest_timestamp() < lag:
                break
            if 0 <= unstable < nxt.base_offset:
                break
            out.append(seg)
        end = segs[len(out)].base_offset if len(out) < len(segs) else lg.log_end_offset
        return out, end

    def dirty_ratio(self, lg: Log, now: int) -> tuple[float, int]:
        segs, _ = self._first_uncleanable(lg, now)
        first_dirty = max(self.clean_points.get((lg.topic, lg.partition), 0), lg.log_start_offset)
        clean = dirty = 0
        for seg in segs:
            if seg.next_offset <= first_dirty:
                clean += seg.size
            else:
                dirty += seg.size
        total = clean + dirty
        return (dirty / total if total else 0.0), dirty

    @property
    def uncleanable_partitions(self) -> int:
        """How many partitions are skipped because of a batch the cleaner cannot decode
        (Kafka's uncleanable-partitions-count)."""
        return len(self.uncleanable)

    def _is_uncleanable(self, lg: Log) -> bool:
        key = (lg.topic, lg.partition)
        bad = self.uncleanable.get(key)
        if bad is None:
            return False
        if lg.log_start_offset > bad:  # the bad batch is gone
            del self.uncleanable[key]
            self._uncleanable_dir.pop(key, None)
            self._publish_uncleanable()
            log.info("%s-%d is cleanable again: the batch at offset %d left the log", lg.topic, lg.partition, bad)
            return False
        return True

    def _past_max_lag(self, lg: Log, now: int) -> bool:
        """Whether a dirty non-active segment's first batch is older than max.compaction.lag.ms
        (Kafka's KIP-354: then the log is cleaned whatever its dirty ratio). The first batch's
        maxTimestamp is its time; a segment whose first batch has none does not count."""
        lag = lg.config.max_compaction_lag_ms
        if lag >= LONG_MAX:
            return False
        first_dirty = max(self.clean_points.get((lg.topic, lg.partition), 0), lg.log_start_offset)
        for seg in lg.segments[:-1]:
            if seg.next_offset <= first_dirty:
                continue
            header = read_header_at(seg.fd, 0)
            if header is not None and 0 < header.max_timestamp < now - lag:
                return True
        return False

    def filthiest(self, logs: Iterable[Log], now: int) -> Log | None:
        best, best_ratio = None, -1.0
        for lg in logs:
            if not lg.config.compact or len(lg.segments) < 2 or self._is_uncleanable(lg):
                continue
            ratio, dirty = self.dirty_ratio(lg, now)
            due = self.tombstone_due.get((lg.topic, lg.partition), -1)
            if (dirty > 0 and (ratio >= lg.config.min_cleanable_dirty_ratio or self._past_max_lag(lg, now))) \
                    or (0 <= due <= now):
                if ratio > best_ratio:
                    best, best_ratio = lg, ratio
        return best

    def _plan(self, lg: Log, now: int) -> _Job | None:
        segs, end = self._first_uncleanable(lg, now)
        if not segs:
            return None
        return _Job(lg, segs, end, now, aborted=lg.aborted_transactions(lg.log_start_offset, lg.log_end_offset))

    def _start(self, lg: Log, now: int) -> None:
        job = self._plan(lg, now)
        if job is None:
            return
        job.thread = threading.Thread(target=self._run, args=(job,), name=f"cleaner-{lg.topic}-{lg.partition}",
                                      daemon=True)
        self._job = job
        job.thread.start()

    # -- cleaning (background thread) ----------------------------------------------------

    def _run(self, job: _Job) -> None:
        try:
            first_dirty = max(self.clean_points.get((job.log.topic, job.log.partition), 0), job.log.log_start_offset)
            offset_map = self._build_offset_map(job, first_dirty)
            self._clean_into(job, offset_map)
        except BaseException as exc:  # reported and discarded by _finish
            job.error = exc

    def _read(self, fd: int, need: int, pos: int) -> bytes:
        """At least `need` bytes from `pos` (less only at the end of the file): a large chunk,
        or a small one under an I/O rate so the throttle paces evenly."""
        chunk = _READ_CHUNK if not self.io_max_bytes_per_second < float("inf") else _THROTTLED_CHUNK
        data = os.pread(fd, max(chunk, need), pos)
        self._throttler.record(len(data))
        return data

    def _batches(self, seg: LogSegment):
        """(position, header, raw bytes) of every batch in a non-active segment, read through
        a file descriptor of our own (the segment's may be closed under us)."""
        fd = os.open(seg.log_path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            pos = 0
            buf = b""
            buf_start = 0
            while pos + BATCH_HEADER_SIZE <= size:
                if pos + BATCH_HEADER_SIZE > buf_start + len(buf):
                    buf = self._read(fd, BATCH_HEADER_SIZE, pos)
                    buf_start = pos
                header = read_batch_header(buf, pos - buf_start)
                if pos + header.size > size:
                    break
                if pos + header.size > buf_start + len(buf):
                    buf = self._read(fd, header.size, pos)
                    buf_start = pos
                rel = pos - buf_start
                yield pos, header, memoryview(buf)[rel:rel + header.size]
                pos += header.size
        finally:
            os.close(fd)

    def _records(self, lg: Log, header: BatchHeader, raw: memoryview) -> list[Record]:
        """The records of a batch, decompressed within the bound (see the module doc)."""
        try:
            if header.compression != CODEC_NONE:
                limit = max_decompressed_bytes(self.max_decompressed, lg.config.max_message_bytes)
                validate_compressed_records(raw, limit)
            return decode_batch(raw, 0, check_crc=False)[1]
        except KafkaError as exc:
            raise UncleanableBatchError(header.base_offset, exc) from None

    def _build_offset_map(self, job: _Job, first_dirty: int) -> dict[bytes, int]:
        """Key -> last offset over the dirty part, up to `map_capacity` keys: when the next
        batch could pass it, `job` is cut back to end at that batch (`_cut`)."""
        offset_map: dict[bytes, int] = {}
        aborted = _AbortedTracker(job.aborted)
        capacity = self.map_capacity
        for seg in job.segments:
            for _, header, raw in self._batches(seg):
                if aborted.is_aborted(header):  # aborted records never displace committed ones
                    continue
                if header.attributes & ATTR_CONTROL or header.last_offset < first_dirty:
                    continue
                if offset_map and len(offset_map) + header.records_count > capacity:
                    self._cut(job, header.base_offset)
                    return offset_map
                records = self._records(job.log, header, raw)
                for r in records:
                    if r.key is not None and r.offset >= first_dirty:
                        offset_map[bytes(r.key)] = r.offset
        return offset_map

    @staticmethod
    def _cut(job: _Job, end: int) -> None:
        """The map is full at offset `end`: this cleaning covers the log below it only."""
        job.dirty_end = end
        job.segments = [s for s in job.segments if s.base_offset < end]
        job.partial_from = job.segments[-1].base_offset

    def _clean_into(self, job: _Job, offset_map: dict[bytes, int]) -> None:
        """Write the surviving batches of every cleanable segment into new `.cleaned`
        segments, starting another when one would pass segment.bytes (so small cleaned
        segments merge). The first keeps the first old segment's base offset."""
        lg = job.log
        cfg = lg.config
        horizon = job.now_ms - cfg.delete_retention_ms
        st = job.stats
        out: LogSegment | None = None
        aborted = _AbortedTracker(job.aborted)
        for seg in job.segments:
            st.segments_in += 1
            st.bytes_in += seg.size
            if out is None:
                out = self._new_segment(job, seg.base_offset)
            # a partly mapped segment's tombstones may delete keys the map does not hold yet
            drop_tombstones = seg.largest_timestamp() < horizon and seg.base_offset < job.partial_from
            for _, header, raw in self._batches(seg):
                if aborted.is_aborted(header):
                    # Kafka's cleaner: an aborted transaction's records go, and its ABORT marker
                    # too once the segment is past delete.retention.ms (like a tombstone).
                    if not header.attributes & ATTR_CONTROL:
                        st.aborted_dropped += header.records_count
                        continue
                    if drop_tombstones:
                        continue
                    kept = raw
                else:
                    kept = self._clean_batch(header, raw, offset_map, drop_tombstones, st, seg, lg)
                if kept is None:
                    continue
                h = header if kept is raw else read_batch_header(kept, 0)
                if out.size and (out.size + h.size > cfg.segment_bytes
                                 or h.last_offset - out.base_offset > MAX_RELATIVE_OFFSET):
                    out = self._new_segment(job, h.base_offset)
                out.append(bytearray(kept), [(h.base_offset, h.next_offset, h.max_timestamp, h.size)], job.now_ms)
                self._throttler.record(h.size)
        for new in job.new_segments:
            new.on_become_inactive()
            new.flush_all()
            st.segments_out += 1
            st.bytes_out += new.size

    @staticmethod
    def _new_segment(job: _Job, base_offset: int) -> LogSegment:
        seg = LogSegment.create(job.log.dir, base_offset, job.log.config, suffix=CLEANED_SUFFIX)
        job.new_segments.append(seg)
        return seg

    def _clean_batch(self, header: BatchHeader, raw: memoryview, offset_map: dict[bytes, int],
                     drop_tombstones: bool, st: CleanStats, seg: LogSegment, lg: Log) -> memoryview | bytes | None:
        if header.last_offset < lg.log_start_offset:
            return None  # deleted (DeleteRecords) but still in the segment: never read again
        if header.attributes & ATTR_CONTROL:
            return raw  # a COMMIT marker (kept: consumers of the committed records may need it)
        records = self._records(lg, header, raw)
        st.records_in += len(records)
        kept = []
        for r in records:
            if r.key is not None and offset_map.get(bytes(r.key), -1) > r.offset:
                continue
            if r.value is None and r.key is not None:
                if drop_tombstones:
                    st.tombstones_dropped += 1
                    continue
                due = seg.largest_timestamp() + lg.config.delete_retention_ms
                if st.tombstone_due_ms < 0 or due < st.tombstone_due_ms:
                    st.tombstone_due_ms = due
            kept.append(r)
        st.records_out += len(kept)
        if len(kept) == len(records):
            return raw
        if not kept:
            return None
        return rebuild_batch(header, kept)

    # -- installing (caller's thread) ----------------------------------------------------

    def _finish(self, job: _Job) -> None:
        lg = job.log
        if isinstance(job.error, UncleanableBatchError):
            self._discard(job)
            key = (lg.topic, lg.partition)
            if key not in self.uncleanable:
                log.error("%s-%d is uncleanable, compaction skips it until that batch leaves the log: %s",
                          lg.topic, lg.partition, job.error)
            self.uncleanable[key] = job.error.offset
            self._uncleanable_dir[key] = os.path.abspath(os.path.dirname(lg.dir))
            self._publish_uncleanable()
            return
        if job.error is not None:
            log.error("cleaning %s-%d failed (retried after log.cleaner.backoff.ms): %r", lg.topic, lg.partition,
                      job.error)
            self._discard(job)
            return
        current = {id(s) for s in lg.segments[:-1]}
        old = job.segments
        if any(id(s) not in current for s in old):
            log.info("cleaning %s-%d discarded: its segments changed meanwhile", lg.topic, lg.partition)
            self._discard(job)
            return
        lg.replace_segments(old, job.new_segments)
        key = (lg.topic, lg.partition)
        self.clean_points[key] = job.dirty_end
        if job.stats.tombstone_due_ms >= 0:
            self.tombstone_due[key] = job.stats.tombstone_due_ms
        else:
            self.tombstone_due.pop(key, None)
        self.cleanings += 1
        st = job.stats
        log.info("cleaned %s-%d up to %d: %d segments/%d bytes/%d records -> %d/%d/%d, %d tombstones dropped",
                 lg.topic, lg.partition, job.dirty_end, st.segments_in, st.bytes_in, st.records_in,
                 st.segments_out, st.bytes_out, st.records_out, st.tombstones_dropped)
        self.checkpoint()

    @staticmethod
    def _discard(job: _Job) -> None:
        for seg in job.new_segments:
            _drop(seg)
        job.new_segments = []

    def forget(self, topic: str, partition: int) -> None:
        """The partition was deleted."""
        self.clean_points.pop((topic, partition), None)
        self.tombstone_due.pop((topic, partition), None)
        if self.uncleanable.pop((topic, partition), None) is not None:
            self._uncleanable_dir.pop((topic, partition), None)
            self._publish_uncleanable()

    @staticmethod
    def _merge_checkpoint(log_dir: str, points: dict[tuple[str, int], int]) -> None:
        """Several worker processes each clean the partitions they own and share one file
        per log dir: under an flock, keep the other entries of partitions that still exist
        and replace this process's."""
        path = os.path.join(log_dir, CLEANER_CHECKPOINT)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cp = OffsetCheckpointFile(path)
            try:
                merged = cp.read()
            except Exception:  # a malformed file is rewritten from what this process knows
                merged = {}
            merged = {k: v for k, v in merged.items() if os.path.isdir(os.path.join(log_dir, f"{k[0]}-{k[1]}"))}
            merged.update(points)
            cp.write(merged)

    def checkpoint(self) -> None:
        by_dir: dict[str, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
        for d in self.log_dirs:
            for key, off in self.clean_points.items():
                if os.path.isdir(os.path.join(d, f"{key[0]}-{key[1]}")):
                    by_dir[d][key] = off
        for d, points in by_dir.items():
            try:
                self._merge_checkpoint(d, points)
            except OSError:
                log.exception("writing %s in %s failed", CLEANER_CHECKPOINT, d)


def rebuild_batch(header: BatchHeader, records: list) -> bytes:
    """A v2 batch with `header`'s identity (base offset, last offset delta, leader epoch,
    attributes, producer id/epoch, base sequence) holding only `records`, each at its own
    offset, compressed with the header's codec."""
    log_append = header.timestamp_type == TIMESTAMP_LOG_APPEND
    if log_append:
        first_ts = header.first_timestamp
        max_ts = header.max_timestamp
    else:
        first_ts = records[0].timestamp
        max_ts = max(r.timestamp for r in records)
    encode = _codec.encode_record
    parts = [encode(r.offset - header.base_offset, 0 if log_append else r.timestamp - first_ts,
                    r.key, r.value, r.headers) for r in records]
    body = b"".join(parts)
    if header.compression != CODEC_NONE:
        body = compress(header.compression, body)
    size = BATCH_HEADER_SIZE + len(body)
    out = bytearray(size)
    _HEADER_HEAD.pack_into(out, 0, header.base_offset, size - BATCH_LENGTH_OVERHEAD, header.partition_leader_epoch, 2)
    _HEADER_TAIL.pack_into(out, CRC_START, header.attributes, header.last_offset_delta, first_ts, max_ts,
                           header.producer_id, header.producer_epoch, header.base_sequence, len(records))
    out[BATCH_HEADER_SIZE:] = body
    _U32.pack_into(out, 17, _crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _drop(seg: LogSegment) -> None:
    try:
        seg.close()
    except Exception:
        pass
    for ext in (".log", ".index", ".timeindex"):
        try:
            os.unlink(os.path.join(seg.dir, segment_name(seg.base_offset) + ext + CLEANED_SUFFIX))
        except FileNotFoundError:
            pass
