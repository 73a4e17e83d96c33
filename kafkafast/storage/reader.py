"""LogReader: reads a partition's log in any process, from its files plus published state."""
from __future__ import annotations

import bisect
import os
import time

from kafkafast.protocol.errors import KafkaError, KafkaStorageError, OffsetOutOfRangeError
from kafkafast.protocol.primitives import FileRegion
from kafkafast.records import BATCH_HEADER_SIZE, BatchHeader, decode_batch
from kafkafast.storage.offset_index import OffsetIndexView
from kafkafast.storage.partition_state import PartitionState
from kafkafast.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_segment_name,
    read_header_at,
    scan_to_offset,
    segment_name,
)
from kafkafast.storage.threads import off_the_loop
from kafkafast.storage.time_index import TimeIndexView

# A FileRegion handed out stays readable at least this long after its segment left the
# directory (the response writer sends it long before), unless the file is deleted first (see
# `_SegmentHandle.release`); then the reader closes the fd.
RETIRE_GRACE_S = 60.0
# ... and at least this long when its file is deleted sooner (a short file.delete.delay.ms,
# after retention or a compaction's swap renamed it `.deleted`): `_SegmentHandle.release`.
RELEASE_GRACE_S = 5.0
_SEQLOCK_SPINS = 1000
_MAX_BATCH_DECODE = 64 << 20  # a batch to decode (ListOffsets by timestamp) must be smaller
_PAIRED = object()  # `region`'s stand-in for a header it need not read
_MAX_READ_ENDS = 16  # where recent reads ended (`LogReader._ends`): cleared when it holds more


class ReadResult:
    """What `LogReader.read` found (a plain class: one is made per read).

    `region` covers whole batches only (or is None when there is nothing to send);
    `first_batch_offset` is the base offset of its first batch (-1 if none). The offsets
    are the published state as the read saw it.
    """

    __slots__ = ("region", "first_batch_offset", "high_watermark", "log_start_offset", "log_end_offset",
                 "last_stable_offset")

    def __init__(self, region: FileRegion | None, first_batch_offset: int, high_watermark: int,
                 log_start_offset: int, log_end_offset: int, last_stable_offset: int) -> None:
        self.region = region
        self.first_batch_offset = first_batch_offset
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.last_stable_offset = last_stable_offset

    @property
    def size(self) -> int:
        return self.region.length if self.region is not None else 0


class _SegmentHandle:
    """One segment as a reader knows it: lazily opened .log fd and index views."""

    __slots__ = ("dir", "base_offset", "ino", "_fd", "_index", "_time_index", "final_size", "released")

    def __init__(self, dir: str, base_offset: int, ino: int) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.ino = ino
        self._fd = -1
        self._index: OffsetIndexView | None = None
        self._time_index: TimeIndexView | None = None
        self.final_size = -1  # size of a rolled (immutable) segment, once known
        self.released = False

    def path(self, ext: str) -> str:
        return os.path.join(self.dir, segment_name(self.base_offset) + ext)

    @property
    def fd(self) -> int:
        if self._fd < 0:
            fd = os.open(self.path(LOG_SUFFIX), os.O_RDONLY)
            if os.fstat(fd).st_ino != self.ino:
                os.close(fd)
                raise FileNotFoundError(self.path(LOG_SUFFIX))
            self._fd = fd
        return self._fd

    @property
    def index(self) -> OffsetIndexView:
        if self._index is None:
            self._index = OffsetIndexView(self.path(INDEX_SUFFIX), self.base_offset)
        return self._index

    @property
    def time_index(self) -> TimeIndexView:
        if self._time_index is None:
            self._time_index = TimeIndexView(self.path(TIME_INDEX_SUFFIX), self.base_offset)
        return self._time_index

    def drop_indexes(self, only_replaced: bool = False) -> None:
        """Close the index views (reopened on next use); `only_replaced`: only those whose
        file was rewritten (renamed over) since they were opened."""
        if self._index is not None and (not only_replaced or self._index.replaced()):
            self._index.close()
            self._index = None
        if self._time_index is not None and (not only_replaced or self._time_index.replaced()):
            self._time_index.close()
            self._time_index = None

    def release(self) -> bool:
        """Once the segment's file is deleted (no name left: retention's unlink after
        file.delete.delay.ms), its pages and disk blocks are let go, as Kafka closes a deleted
        segment, not kept until RETIRE_GRACE_S: the fd's number is pointed at an empty
        file (dup2), so a FileRegion still handed out reads nothing there, and its connection
        closes on the short read, instead of the number being reused for another file and sent
        from that; the file's own last descriptor is closed on the `log-flush` thread. The
        number itself is closed with the handle. True when it was let go now."""
        self.drop_indexes()  # (a retired segment is never looked up again)
        if self._fd < 0 or self.released:
            return False
        try:
            if os.fstat(self._fd).st_nlink:
                return False
            held = os.dup(self._fd)  # the file's last reference, closed off the loop (below)
        except OSError:
            return False
        try:
            os.dup2(_empty_fd(), self._fd)
        except OSError:
            os.close(held)
            return False
        # (that close frees the file's cached pages and disk blocks: 20+ ms for a 64 MiB
        # segment, which the event loop would wait out)
        off_the_loop("log-flush", os.close, held)
        self.released = True
        return True

    def close(self) -> None:
        self.release()  # (a deleted file's last close is made off the loop)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_EMPTY_FD = -1


def _empty_fd() -> int:
    """A descriptor of an empty file, made once per process (a forked child may share its
    parent's: nothing is ever written to it)."""
    global _EMPTY_FD
    if _EMPTY_FD < 0:
        fd = os.memfd_create("kafkafast-released-segment", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") \
            else os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        _EMPTY_FD = fd
    return _EMPTY_FD


def _batch_at(h: _SegmentHandle, pos: int, base_offset: int) -> BatchHeader | None:
    """The header of the batch an index entry (`base_offset`, `pos`) points at, or None when
    the entry does not point at that batch: a view of an index rewritten since it was opened
    (found before the next `refresh`, e.g. mid-change in another process). The views are then
    dropped, so the next lookup reads the current files."""
    try:
        header = read_header_at(h.fd, pos)
    except KafkaError:
        header = None
    if header is None or header.base_offset != base_offset:
        h.drop_indexes()
        return None
    return header


class _Snapshot:
    """The published state one read saw (a plain class: one is made per read)."""

    __slots__ = ("version", "log_start_offset", "log_end_offset", "high_watermark", "last_stable_offset",
                 "active_base_offset", "active_committed_size")

    def __init__(self, version: int, log_start_offset: int, log_end_offset: int, high_watermark: int,
                 last_stable_offset: int, active_base_offset: int, active_committed_size: int) -> None:
        self.version = version
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.active_base_offset = active_base_offset
        self.active_committed_size = active_committed_size


class LogReader:
    """Reads one partition's log: usable in any process, never writes.

    It knows the segments by listing the partition directory (again whenever
    `state.segments_version` changed), opens `.log` fds lazily and keeps them (a deleted
    segment's fd still reads; it is closed `RETIRE_GRACE_S` after the segment left the
    directory, so FileRegions handed out meanwhile stay valid), and looks offsets up in the
    `.index` files through read-only mmaps. What it may return is bounded by the published
    `state`: the active segment only up to `active_committed_size`, never at or past the
    log end offset, never past `upper_bound_offset`. See `partition_state` for the protocol.

    Where a read ended is remembered (`_ends`: the offset the next batch should start at ->
    segment, file position, segments version), since a follower's next fetch, and a consumer's,
    asks for exactly that offset: such a read starts there without an index lookup (which at the
    log end also re-maps the growing `.index` file). The position is used only while the segment
    list is the one it was found in (any roll, retention, truncation or compaction changes
    `segments_version`) and the batch header read there starts at the fetch offset (then no
    earlier batch can hold it); otherwise the read looks the offset up as before.
    """

    __slots__ = ("dir", "state", "topic", "partition", "_handles", "_bases", "_version", "_retired", "_ends",
                 "_paired")

    def __init__(self, dir: str, state: PartitionState, *, topic: str, partition: int) -> None:
        self.dir = dir
        self.state = state
        self.topic = topic
        self.partition = partition
        self._handles: list[_SegmentHandle] = []
        self._bases: list[int] = []
        self._version = -1
        self._retired: list[tuple[float, _SegmentHandle]] = []
        self._ends: dict[int, tuple[_SegmentHandle, int, int]] = {}
        self._paired = getattr(state, "paired_ends", False)  # (see `region`)

    # -- segment list ------------------------------------------------------------------

    def _snapshot(self) -> _Snapshot:
        st = self.state
        for _ in range(_SEQLOCK_SPINS):
            v1 = st.segments_version
            if v1 & 1:
                time.sleep(0)
                continue
            snap = _Snapshot(v1, st.log_start_offset, st.log_end_offset, st.high_watermark,
                             st.last_stable_offset, st.active_base_offset, st.active_committed_size)
            if st.segments_version == v1:
                return snap
        # The writer died mid-change (or is very slow): take what is there.
        return _Snapshot(-1, st.log_start_offset, st.log_end_offset, st.high_watermark,
                         st.last_stable_offset, st.active_base_offset, st.active_committed_size)

    def refresh(self, version: int = -1) -> None:
        """Re-list the directory's segments."""
        now = time.monotonic()
        old = {h.base_offset: h for h in self._handles}
        handles: list[_SegmentHandle] = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            names = []
        for name in names:
            base = parse_segment_name(name)
            if base is None:
                continue
            try:
                ino = os.stat(os.path.join(self.dir, name)).st_ino
            except FileNotFoundError:
                continue
            h = old.pop(base, None)
            if h is not None and h.ino != ino:
                self._retired.append((now, h))
                h = None
            if h is not None:
                h.final_size = -1  # a truncated-then-re-rolled segment has a new final size
                # A truncation, recovery or repair rewrites a kept segment's index files by
                # rename: a view of the old file would point past the truncation point.
                h.drop_indexes(only_replaced=True)
            handles.append(h if h is not None else _SegmentHandle(self.dir, base, ino))
        for h in old.values():
            self._retired.append((now, h))
        handles.sort(key=lambda h: h.base_offset)
        self._ends.clear()
        self._handles = handles
        self._bases = [h.base_offset for h in handles]
        self._version = version
        keep = []
        for t, h in self._retired:
            if now - t >= RETIRE_GRACE_S:
                h.close()
                continue
            if now - t >= RELEASE_GRACE_S:
                h.release()  # (its file deleted meanwhile: let go of it now)
            keep.append((t, h))
        self._retired = keep

    def segment_bases(self) -> list[int]:
        snap = self._snapshot()
        if snap.version != self._version or snap.version < 0:
            self.refresh(snap.version)
        return list(self._bases)

    def close(self) -> None:
        for h in self._handles:
            h.close()
        for _, h in self._retired:
            h.close()
        self._handles, self._bases, self._retired = [], [], []
        self._ends.clear()
        self._version = -1

    # -- reads -------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, *, upper_bound_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the batch containing `fetch_offset`, at most `max_bytes`
        (but the first batch whole if `min_one_batch`, KIP-74), from one segment, ending
        before the first batch that reaches `upper_bound_offset` (exclusive; the high
        watermark for consumers, None = log end). OffsetOutOfRangeError when `fetch_offset`
        is below the log start or above the log end; at the log end the result is empty."""
        for _ in range(4):
            snap = self._snapshot()
            if fetch_offset < snap.log_start_offset or fetch_offset > snap.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: offset {fetch_offset} is outside "
                    f"[{snap.log_start_offset}, {snap.log_end_offset}]")
            upper = snap.log_end_offset if upper_bound_offset is None else min(upper_bound_offset, snap.log_end_offset)
            if fetch_offset >= upper:
                return self._result(None, -1, snap)
            if snap.version != self._version or snap.version < 0:
                self.refresh(snap.version)
            try:
                found = self._read(fetch_offset, max_bytes, upper, min_one_batch, snap)
            except FileNotFoundError:
                found = None
            except KafkaError as exc:
                if snap.version >= 0 and self.state.segments_version == snap.version:
                    raise KafkaStorageError(f"{self.topic}-{self.partition}: corrupt log: {exc}") from exc
                found = None  # the files changed under the read (a truncation): read them again
            if found is not None:
                return self._result(found[0], found[1], snap)
            self._version = -1  # inconsistent view: re-list and retry
        return self._result(None, -1, self._snapshot())

    def region(self, fetch_offset: int, max_bytes: int, upper_bound_offset: int | None = None,
               min_one_batch: bool = True) -> FileRegion | None:
        """`read(...).region`. A read starting where an earlier read ended in the active segment
        (`_ends`) and ending at the log end within `max_bytes` (a caught-up follower's, or a
        consumer's at the high watermark with nothing uncommitted) skips what `read` builds
        for its other cases (snapshot and result objects, the segment search, the upper bound
        scan): the state is read as `_snapshot` reads it, and every check `read` and
        `_from_end` make still holds (the segment list the position was found in, the offset
        within the log, the batch header at the position starting at `fetch_offset` and
        ending within the committed bytes). The header is not read when the state pairs its
        ends (`PartitionState.paired_ends`: one thread stores and reads it, so the log end and
        committed size an entry was made from, and those read here, are one append's each: the
        remembered position is the batch at `fetch_offset`, whole below `limit`, every batch
        below `limit` under the log end); a state another process may publish into (a worker's
        slot) is checked as above."""
        end = self._ends.get(fetch_offset)
        if end is not None:
            st = self.state
            v = st.segments_version
            h, pos, version = end
            if version == v and v == self._version and not v & 1:
                log_start = st.log_start_offset
                leo = st.log_end_offset
                active = st.active_base_offset
                limit = st.active_committed_size
                if (st.segments_version == v and h.base_offset == active and log_start <= fetch_offset < leo
                        and (upper_bound_offset is None or upper_bound_offset >= leo)
                        and pos + BATCH_HEADER_SIZE <= limit and limit - pos <= max_bytes):
                    if self._paired:  # the position is the batch at `fetch_offset`, `limit` the log end's
                        header = _PAIRED
                    else:
                        try:
                            header = read_header_at(h.fd, pos)
                        except (KafkaError, OSError):
                            header = None  # `read` decides
                    if header is _PAIRED or (
                            header is not None and header.base_offset == fetch_offset
                            and pos + header.size <= limit and header.last_offset < leo):
                        ends = self._ends
                        if len(ends) >= _MAX_READ_ENDS:
                            ends.clear()
                        ends[leo] = (h, limit, v)
                        return FileRegion(h.fd, pos, limit - pos)
        return self.read(fetch_offset, max_bytes, upper_bound_offset=upper_bound_offset,
                         min_one_batch=min_one_batch).region

    @staticmethod
    def _result(region: FileRegion | None, first: int, snap: _Snapshot) -> ReadResult:
        return ReadResult(region, first, snap.high_watermark, snap.log_start_offset,
                          snap.log_end_offset, snap.last_stable_offset)

    def _limit(self, h: _SegmentHandle, snap: _Snapshot) -> int:
        """Bytes of the segment a reader may use (-1: not visible yet)."""
        if h.base_offset == snap.active_base_offset:
            return snap.active_committed_size
        if h.base_offset > snap.active_base_offset:
            return -1
        if h.final_size < 0:
            h.final_size = os.fstat(h.fd).st_size
        return h.final_size

    @staticmethod
    def _start(h: _SegmentHandle, offset: int, limit: int) -> int:
        """A batch boundary at or before the batch holding `offset`, from the index (checked)."""
        base, pos = h.index.find_nearest(offset)
        if pos <= 0 or pos + BATCH_HEADER_SIZE > limit:
            return 0
        if _batch_at(h, pos, base) is None:
            return 0
        return pos

    def locate(self, offset: int, snap: _Snapshot | None = None) -> tuple[_SegmentHandle, int, BatchHeader, int] | None:
        """(segment, position, header, limit) of the first batch whose last offset >= `offset`."""
        if snap is None:
            snap = self._snapshot()
            if snap.version != self._version or snap.version < 0:
                self.refresh(snap.version)
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        while i < len(self._handles):
            h = self._handles[i]
            limit = self._limit(h, snap)
            if limit < 0:
                return None
            pos, header = scan_to_offset(h.fd, self._start(h, offset, limit), limit, offset)
            if header is not None and pos + header.size <= limit:
                return h, pos, header, limit
            i += 1
        return None

    def _read(self, fetch_offset: int, max_bytes: int, upper: int, min_one: bool,
              snap: _Snapshot) -> tuple[FileRegion | None, int] | None:
        if not self._handles:
            return None
        found = self._from_end(fetch_offset, snap) or self.locate(fetch_offset, snap)
        if found is None:
            return (None, -1) if self._bases and fetch_offset >= self._bases[0] else None
        h, pos, first, limit = found
        if first.base_offset >= upper or first.last_offset >= upper:
            return None, -1
        fd = h.fd
        i = bisect.bisect_right(self._bases, h.base_offset)
        next_base = self._bases[i] if i < len(self._bases) else None
        end = limit
        segment_below_upper = (next_base is not None and next_base <= upper and h.base_offset < snap.active_base_offset) \
            or (h.base_offset == snap.active_base_offset and upper >= snap.log_end_offset)
        # the offset the batch after the region should start at (the next read's, checked there)
        next_offset = snap.log_end_offset if h.base_offset == snap.active_base_offset else -1
        if not segment_below_upper:
            at = self._from_end(upper, snap)  # a follower's read ended at the high watermark
            if at is not None and at[0] is h and at[1] >= pos:
                upos, uheader = at[1], at[2]
            else:
                upos, uheader = scan_to_offset(fd, max(self._start(h, upper, limit), pos), limit, upper)
            if uheader is not None:
                end = upos
                next_offset = uheader.base_offset
        if end - pos <= max_bytes:
            cut = end
        else:
            target = pos + max_bytes
            q = pos
            entry = h.index.find_by_position(target)
            if entry is not None and pos < entry[1] <= target and _batch_at(h, entry[1], entry[0]) is not None:
                q = entry[1]
            while q + BATCH_HEADER_SIZE <= end:
                header = read_header_at(fd, q)
                if header is None or q + header.size > target:
                    next_offset = header.base_offset if header is not None else -1
                    break
                q += header.size
            cut = q
            if cut == pos:
                if not min_one:
                    return None, -1
                cut = pos + first.size
                next_offset = first.last_offset + 1
        if next_offset >= 0 and snap.version >= 0:
            ends = self._ends
            if len(ends) >= _MAX_READ_ENDS:
                ends.clear()
            ends[next_offset] = (h, cut, snap.version)
        return FileRegion(fd, pos, cut - pos), first.base_offset

    def _from_end(self, offset: int, snap: _Snapshot) -> tuple[_SegmentHandle, int, BatchHeader, int] | None:
        """What `locate` finds for `offset`, from where an earlier read ended (`_ends`), or None:
        only in the same segment list (`segments_version`) and when the batch there starts
        exactly at `offset` (every batch before it then ends below it)."""
        end = self._ends.get(offset)
        if end is None:
            return None
        h, pos, version = end
        if version != snap.version:
            return None
        limit = self._limit(h, snap)
        if pos + BATCH_HEADER_SIZE > limit:
            return None
        try:
            header = read_header_at(h.fd, pos)
        except KafkaError:  # not a batch there after all: the lookup decides
            return None
        if header is None or header.base_offset != offset or pos + header.size > limit:
            return None
        return h, pos, header, limit

    # -- timestamps (ListOffsets) ------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        snap = self._snapshot()
        if snap.version != self._version or snap.version < 0:
            self.refresh(snap.version)
        for h in self._handles:
            limit = self._limit(h, snap)
            if limit <= 0:
                continue
            if h.base_offset != snap.active_base_offset:
                last_ts, _ = h.time_index.last_entry()
                if last_ts < timestamp and last_ts >= 0:
                    continue
            ts_entry, start_offset = h.time_index.find_nearest(timestamp)
            start_offset = max(start_offset, snap.log_start_offset)
            pos = self._start(h, start_offset, limit)
            while pos + BATCH_HEADER_SIZE <= limit:
                header = read_header_at(h.fd, pos)
                if header is None or pos + header.size > limit:
                    break
                if header.max_timestamp >= timestamp and header.last_offset >= snap.log_start_offset:
                    return self._record_at_or_after(h.fd, pos, header, timestamp, snap.log_start_offset)
                pos += header.size
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(max timestamp, offset of its record) for ListOffsets MAX_TIMESTAMP, or None."""
        ts, batch_offset = self.state.max_timestamp, self.state.max_timestamp_offset
        if ts < 0 or batch_offset < 0:
            return None
        found = self.locate(batch_offset)
        if found is None:
            return ts, batch_offset
        h, pos, header, _ = found
        offset, record_ts = self._record_at_or_after(h.fd, pos, header, ts, self.state.log_start_offset)
        return ts, offset

    @staticmethod
    def _record_at_or_after(fd: int, pos: int, header: BatchHeader, timestamp: int, min_offset: int) -> tuple[int, int]:
        """Decode one batch for the first record with ts >= `timestamp` at/after `min_offset`."""
        if header.size <= _MAX_BATCH_DECODE:
            data = os.pread(fd, header.size, pos)
            try:
                _, records = decode_batch(data, 0)
            except (KafkaError, ValueError):
                records = []
            for r in records:
                if r.timestamp >= timestamp and r.offset >= min_offset:
                    return r.offset, r.timestamp
        # Undecodable (e.g. a codec not installed): the batch, as Kafka did for old formats.
        return max(header.base_offset, min_offset), header.max_timestamp
