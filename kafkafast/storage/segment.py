"""One log segment: a `.log` file of record batches and its two sparse indexes."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from kafkafast import clock
from kafkafast.protocol.errors import KafkaError
from kafkafast.records import BATCH_HEADER_SIZE, BatchHeader, read_batch_header, scan_valid_prefix
from kafkafast.storage.config import LogConfig
from kafkafast.storage.offset_index import OffsetIndex
from kafkafast.storage.time_index import TimeIndex
from kafkafast.storage.writeback import WRITEBACK_BYTES, start_writeback

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TXN_INDEX_SUFFIX = ".txnindex"  # aborted transactions (kafkafast/storage/txn_index.py), only when some

RECOVERY_CHUNK_BYTES = 8 << 20
MAX_RELATIVE_OFFSET = 0x7FFFFFFF


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


def parse_segment_name(filename: str, suffix: str = LOG_SUFFIX) -> int | None:
    """Base offset of `00000000000000000042.log` (with `suffix`), else None."""
    if not filename.endswith(suffix):
        return None
    stem = filename[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def read_header_at(fd: int, pos: int) -> BatchHeader | None:
    """The batch header at `pos`, or None if fewer than 61 bytes are there (end of data)."""
    data = os.pread(fd, BATCH_HEADER_SIZE, pos)
    if len(data) < BATCH_HEADER_SIZE:
        return None
    return read_batch_header(data, 0)


def scan_to_offset(fd: int, start_pos: int, limit: int, offset: int) -> tuple[int, BatchHeader | None]:
    """Walk batch headers from `start_pos` (a batch boundary) to the first batch whose last
    offset is >= `offset`; (its position, its header), or (end position, None) at `limit`."""
    pos = start_pos
    while pos + BATCH_HEADER_SIZE <= limit:
        header = read_header_at(fd, pos)
        if header is None:
            break
        if header.last_offset >= offset:
            return pos, header
        pos += header.size
    return min(pos, limit), None


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    scanned_bytes: int
    truncated_bytes: int
    batches: int


# Test hook (kafkafast.testing): called with the partition directory before each segment
# write; raises OSError to make the write fail.
write_fault: Callable[[str], None] | None = None


class LogSegment:
    """A segment of a partition's log.

    Files (in the partition directory, stem = 20-digit zero-padded base offset, the
    offset of the segment's first batch):

    * `<stem>.log`: record batches v2 exactly as produced (compressed batches stay
      compressed), with baseOffset and partitionLeaderEpoch assigned by the leader.
      Append-only: each append is one `os.pwrite` of whole, already validated batches at
      the segment's committed size.
      Nothing else is in the file, so recovery can re-validate it batch by batch.
    * `<stem>.index` and `<stem>.timeindex`: see `OffsetIndex` and `TimeIndex`.
    * `<stem>.<ext>.deleted`: a segment removed by retention / DeleteRecords, unlinked
      after `file.delete.delay.ms`; removed at load.
    * `<stem>.<ext>.cleaned` / `.swap`: replacement segments being installed
      (`Log.replace_segments`, Kafka's protocol); `.cleaned` are dropped at load and
      `.swap` are completed.

    The segment is rolled when it would exceed `segment.bytes`, when its first append is
    older than `segment.ms`, when an index is full, or when an offset would not fit the
    indexes' int32 relative offsets.
    """

    __slots__ = ("dir", "base_offset", "suffix", "fd", "size", "offset_index", "time_index",
                 "max_timestamp", "offset_of_max_timestamp", "first_append_ms", "next_offset", "written_back")

    def __init__(self, dir: str, base_offset: int, suffix: str, fd: int, size: int,
                 offset_index: OffsetIndex, time_index: TimeIndex) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self.fd = fd
        self.size = size
        self.offset_index = offset_index
        self.time_index = time_index
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_append_ms = -1
        self.next_offset = base_offset
        self.written_back = size  # where the last early writeback ended (see `append`)

    # -- files -------------------------------------------------------------------------

    def path(self, ext: str, suffix: str | None = None) -> str:
        return os.path.join(self.dir, segment_name(self.base_offset) + ext + (self.suffix if suffix is None else suffix))

    @property
    def log_path(self) -> str:
        return self.path(LOG_SUFFIX)

    @classmethod
    def create(cls, dir: str, base_offset: int, config: LogConfig, *, suffix: str = "") -> LogSegment:
        """A new empty segment (any leftover files with the same names are replaced)."""
        stem = os.path.join(dir, segment_name(base_offset))
        fd = os.open(stem + LOG_SUFFIX + suffix, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        oi = OffsetIndex(stem + INDEX_SUFFIX + suffix, base_offset, config.segment_index_bytes, config.index_interval_bytes)
        ti = TimeIndex(stem + TIME_INDEX_SUFFIX + suffix, base_offset, config.segment_index_bytes, config.index_interval_bytes)
        return cls(dir, base_offset, suffix, fd, 0, oi, ti)

    @classmethod
    def open(cls, dir: str, base_offset: int, config: LogConfig, *, deep_check: bool,
             suffix: str = "") -> tuple[LogSegment, bool]:
        """Open an existing segment; (segment, indexes_ok). With indexes_ok False the caller
        must `recover()` it (a missing or insane index is rebuilt from the log)."""
        stem = os.path.join(dir, segment_name(base_offset))
        fd = os.open(stem + LOG_SUFFIX + suffix, os.O_RDWR)
        size = os.fstat(fd).st_size
        oi, oi_ok = OffsetIndex.load(stem + INDEX_SUFFIX + suffix, base_offset, config.segment_index_bytes,
                                     config.index_interval_bytes, size, deep_check)
        ti, ti_ok = TimeIndex.load(stem + TIME_INDEX_SUFFIX + suffix, base_offset, config.segment_index_bytes,
                                   config.index_interval_bytes, MAX_RELATIVE_OFFSET, deep_check)
        seg = cls(dir, base_offset, suffix, fd, size, oi, ti)
        ok = oi_ok and ti_ok and seg._index_points_at_batch()
        if ok and size:
            ok = seg._load_tail()
        if ok and ti.entries and ti.last_rel_offset + base_offset >= seg.next_offset:
            ok = False
        if size == 0:
            # An empty log: whatever the indexes said, they must be empty.
            if oi.entries:
                oi.reset()
            if ti.entries:
                ti.reset()
            ok = True
        return seg, ok

    def _index_points_at_batch(self) -> bool:
        oi = self.offset_index
        if not oi.entries:
            return True
        try:
            header = read_header_at(self.fd, oi.last_position)
        except KafkaError:
            return False
        return header is not None and header.base_offset == self.base_offset + oi.last_rel_offset

    def _load_tail(self) -> bool:
        """Next offset and max timestamp from the indexes plus a header walk of the tail."""
        try:
            first = read_header_at(self.fd, 0)
            if first is None:
                return False
            self.first_append_ms = first.max_timestamp if first.max_timestamp >= 0 else self._mtime_ms()
            self.max_timestamp = self.time_index.last_timestamp
            self.offset_of_max_timestamp = self.time_index.last_rel_offset + self.base_offset
            pos = max(self.offset_index.last_position, 0)
            next_offset = self.base_offset
            since_last = 0
            while pos < self.size:
                header = read_header_at(self.fd, pos)
                if header is None or pos + header.size > self.size:
                    return False
                if header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.base_offset
                next_offset = header.next_offset
                since_last += header.size
                pos += header.size
        except KafkaError:
            return False
        self.next_offset = next_offset
        self.offset_index.set_bytes_since(since_last)
        self.time_index.set_bytes_since(since_last)
        return True

    def _mtime_ms(self) -> int:
        return int(os.fstat(self.fd).st_mtime * 1000)

    # -- writing -----------------------------------------------------------------------

    def append(self, data: bytearray | memoryview, batches: list[tuple[int, int, int, int]], now_ms: int) -> None:
        """Write whole batches with one `os.pwrite` at the segment's size (what is committed:
        anything a failed or abandoned write left beyond it is overwritten); `batches` =
        (base, next offset, max ts, size)."""
        if write_fault is not None:
            write_fault(self.dir)
        view = memoryview(data)
        total = len(view)
        pos = self.size
        if self.written_back > pos:  # truncated since
            self.written_back = pos
        written = os.pwrite(self.fd, view, pos)
        while written < total:  # regular files do not write short, except on ENOSPC-like paths
            n = os.pwrite(self.fd, view[written:], pos + written)
            if n <= 0:
                raise OSError("short write to segment")
            written += n
        # the index entries of all the batches: one write per index, one call each
        self.offset_index.track_run(batches, pos)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.track_run(
            batches, self.max_timestamp, self.offset_of_max_timestamp)
        self.next_offset = batches[-1][1]
        pos += total
        if self.first_append_ms < 0:
            self.first_append_ms = now_ms
        self.size = pos
        if pos - self.written_back >= WRITEBACK_BYTES:  # the disk write starts now (storage/writeback.py)
            start_writeback(self.fd, self.written_back, pos - self.written_back)
            self.written_back = pos

    def truncate_bytes(self, size: int) -> None:
        """Undo a failed write (the file goes back to `size` bytes)."""
        os.ftruncate(self.fd, size)
        self.size = size
        self.written_back = min(self.written_back, size)

    def on_become_inactive(self) -> None:
        """Roll / clean close: the time index's last entry becomes the segment's max timestamp."""
        if self.max_timestamp >= 0:
            self.time_index.append_if_grown(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)

    def should_roll(self, config: LogConfig, incoming_bytes: int, last_offset: int, now_ms: int) -> bool:
        if self.size == 0:
            return False
        if self.size > config.segment_bytes - incoming_bytes:
            return True
        if self.first_append_ms >= 0 and now_ms - self.first_append_ms > config.max_segment_ms - config.segment_jitter_ms:
            return True
        oi, ti = self.offset_index._w, self.time_index._w  # (their is_full, without two properties each)
        if oi.entries >= oi.max_entries or ti.entries >= ti.max_entries:
            return True
        return last_offset - self.base_offset > MAX_RELATIVE_OFFSET

    def flush(self) -> None:
        os.fdatasync(self.fd)

    def flush_all(self) -> None:
        os.fdatasync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()

    # -- reading -----------------------------------------------------------------------

    def read_position_for(self, offset: int) -> tuple[int, BatchHeader | None]:
        """(position, header) of the batch containing `offset`, or (size, None) if past the end."""
        base, pos = self.offset_index.find_nearest(offset)
        return scan_to_offset(self.fd, pos, self.size, offset)

    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when no record had one (Kafka's rule)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self._mtime_ms()

    # -- recovery ----------------------------------------------------------------------

    def recover(self) -> RecoveryResult:
        """Re-validate every batch (header, CRC, increasing offsets), truncate the file at the
        first invalid or incomplete one, and rebuild both indexes.

        Reads in `RECOVERY_CHUNK_BYTES` chunks; a batch cut by a chunk boundary is re-read
        with the next chunk. A batch longer than a chunk is read whole, but only when its
        length fits in what remains of the file (a longer length is just a truncated tail).
        """
        file_size = os.fstat(self.fd).st_size
        oi, ti = self.offset_index, self.time_index
        oi.begin_rebuild()
        ti.begin_rebuild()
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        next_offset = self.base_offset
        pos = 0
        n_batches = 0
        first_ts = -1
        stop = False
        while pos < file_size and not stop:
            buf = _pread_full(self.fd, min(RECOVERY_CHUNK_BYTES, file_size - pos), pos)
            valid, batches = scan_valid_prefix(buf, 0)
            if not batches:
                if len(buf) < BATCH_HEADER_SIZE:
                    break
                try:
                    header = read_batch_header(buf, 0)
                except KafkaError:
                    break
                if header.size <= len(buf) or pos + header.size > file_size:
                    break  # bad CRC / bad records, or a truncated tail
                buf = _pread_full(self.fd, header.size, pos)
                valid, batches = scan_valid_prefix(buf, 0)
                if not batches:
                    break
            consumed = 0
            for bpos, header in batches:
                if header.base_offset < next_offset or header.magic != 2:
                    stop = True
                    break
                if header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.base_offset
                if first_ts < 0:
                    first_ts = header.max_timestamp
                oi.maybe_track(header.base_offset, pos + bpos, header.size)
                ti.maybe_track(self.max_timestamp, self.offset_of_max_timestamp, header.size)
                next_offset = header.next_offset
                consumed = bpos + header.size
                n_batches += 1
            pos += consumed
            if consumed == 0:
                break
        if self.max_timestamp >= 0:
            ti.append_if_grown(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        oi.end_rebuild()
        ti.end_rebuild()
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = next_offset
        self.first_append_ms = first_ts if first_ts >= 0 else (self._mtime_ms() if pos else -1)
        return RecoveryResult(scanned_bytes=file_size, truncated_bytes=truncated, batches=n_batches)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; bytes removed."""
        pos, header = self.read_position_for(offset)
        if header is None:
            return 0
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = header.base_offset if pos else self.base_offset
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        # The max timestamp of what is left: the last time entry, then a walk of the batches after it.
        ti = self.time_index
        self.max_timestamp = ti.last_timestamp
        self.offset_of_max_timestamp = ti.last_rel_offset + self.base_offset if ti.entries else -1
        p = self.offset_index.find_nearest(self.offset_of_max_timestamp)[1] if ti.entries else 0
        while p < self.size:
            h = read_header_at(self.fd, p)
            if h is None:
                break
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.base_offset
            p += h.size
        if pos == 0:
            self.first_append_ms = -1
        return removed

    # -- renames and deletion ----------------------------------------------------------

    def change_suffix(self, old: str, new: str) -> None:
        """Rename all three files from suffix `old` to `new` (e.g. ".cleaned" -> ".swap")."""
        assert self.suffix == old, (self.suffix, old)
        os.rename(self.path(LOG_SUFFIX), self.path(LOG_SUFFIX, new))
        self.offset_index.rename(self.path(INDEX_SUFFIX, new))
        self.time_index.rename(self.path(TIME_INDEX_SUFFIX, new))
        self.suffix = new

    def files(self) -> list[str]:
        return [self.path(ext) for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)]

    def mark_deleted(self) -> list[str]:
        """Rename the files to `.deleted` and close them; the paths to unlink later."""
        out = []
        for path in self.files():
            try:
                os.rename(path, path + DELETED_SUFFIX)
                out.append(path + DELETED_SUFFIX)
            except FileNotFoundError:
                pass
        self.close()
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.close()
        self.time_index.close()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"


def _pread_full(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, pos + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def now_ms() -> int:
    return clock.now_ms()
