"""Sparse time index of one segment: `<20-digit base offset>.timeindex`."""
from __future__ import annotations

import struct

from kafkafast.storage.index_file import (Buffer, IndexView, IndexWriter, SparseIndex, index_search,
                                           read_index_file)

ENTRY = struct.Struct(">qi")
ENTRY_SIZE = 12


class TimeIndex(SparseIndex):
    """Writer of a segment's sparse time index.

    File `<20-digit zero-padded base offset>.timeindex`, a packed array of 12-byte entries::

        int64 timestamp         largest record timestamp in the segment so far (BE)
        int32 relative offset   base offset of the batch holding that timestamp, minus the
                                segment's base offset (BE)

    Entries are added at the same cadence as the offset index (more than
    `index.interval.bytes` since the last entry) and only when the segment's max timestamp
    grew since the last entry, so timestamps strictly increase and offsets never decrease.
    When a segment is rolled or closed cleanly a final entry records the segment's max
    timestamp (Kafka does the same), so the last entry of a rolled segment is its max.
    Not preallocated; at most `segment.index.bytes / 12` entries.

    API: `maybe_track(max_ts_so_far, offset_of_max, batch_size)` while appending (`track_run`
    for an append's batches at once), `find_nearest(ts) -> (timestamp, base offset)` when reading.
    """

    __slots__ = ("last_timestamp", "last_rel_offset")

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, interval_bytes: int,
                 initial: bytearray | None = None) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self._w = IndexWriter(path, ENTRY_SIZE, max_index_bytes, initial)
        self._bytes_since = 0
        self._reload_last()

    @classmethod
    def load(cls, path: str, base_offset: int, max_index_bytes: int, interval_bytes: int,
             max_rel_offset: int, deep: bool) -> tuple[TimeIndex, bool]:
        data = read_index_file(path)
        ok = data is not None and sanity_check(data, max_rel_offset, deep)
        return cls(path, base_offset, max_index_bytes, interval_bytes, data if ok else None), ok

    def _reload_last(self) -> None:
        if self._w.entries:
            self.last_timestamp, self.last_rel_offset = ENTRY.unpack_from(self._w.buf, (self._w.entries - 1) * ENTRY_SIZE)
        else:
            self.last_timestamp, self.last_rel_offset = -1, -1

    def maybe_track(self, max_ts_so_far: int, offset_of_max: int, batch_size: int) -> None:
        if self._bytes_since > self.interval_bytes:
            if max_ts_so_far > self.last_timestamp:  # (else append_if_grown would add nothing)
                self.append_if_grown(max_ts_so_far, offset_of_max)
            self._bytes_since = 0
        self._bytes_since += batch_size

    def track_run(self, batches: list[tuple[int, int, int, int]], max_ts: int, offset_of_max: int) -> tuple[int, int]:
        """`maybe_track` over consecutive batches (base, next offset, max timestamp, size),
        following the segment's max timestamp so far (`max_ts` at `offset_of_max`); their
        entries written with one write. Returns the max timestamp and its offset after them."""
        w = self._w
        since, interval, base = self._bytes_since, self.interval_bytes, self.base_offset
        room = w.max_entries - w.entries
        last_ts, last_rel = self.last_timestamp, self.last_rel_offset
        entries: list[bytes] = []
        for b, _, ts, size in batches:
            if ts > max_ts:
                max_ts, offset_of_max = ts, b
            if since > interval:
                rel = offset_of_max - base  # (append_if_grown)
                if max_ts > last_ts and len(entries) < room and rel >= last_rel:
                    entries.append(ENTRY.pack(max_ts, rel))
                    last_ts, last_rel = max_ts, rel
                since = 0
            since += size
        self._bytes_since = since
        if entries:
            w._append(b"".join(entries), len(entries))
            self.last_timestamp, self.last_rel_offset = last_ts, last_rel
        return max_ts, offset_of_max

    def append_if_grown(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        if timestamp > self.last_timestamp and (skip_full_check or not self._w.is_full):
            rel = offset - self.base_offset
            if rel < self.last_rel_offset:
                return
            self._w._append(ENTRY.pack(timestamp, rel))
            self.last_timestamp, self.last_rel_offset = timestamp, rel

    def find_nearest(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, base offset) of the last entry with timestamp <= `timestamp`; else (-1, base)."""
        return lookup(self._w.buf, self._w.entries, self.base_offset, timestamp)

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at batches whose base offset is >= `offset`."""
        buf, n = self._w.buf, self._w.entries
        keep = n
        while keep and ENTRY.unpack_from(buf, (keep - 1) * ENTRY_SIZE)[1] + self.base_offset >= offset:
            keep -= 1
        if keep < n:
            self._w.reset(buf[: keep * ENTRY_SIZE])
            self._reload_last()
        self._bytes_since = 0


def lookup(buf: Buffer, n: int, base_offset: int, timestamp: int) -> tuple[int, int]:
    if n == 0:
        return -1, base_offset
    slot = index_search.time_index_lookup(buf, n, timestamp)
    if slot < 0:
        return -1, base_offset
    ts, rel = ENTRY.unpack_from(buf, slot * ENTRY_SIZE)
    return ts, base_offset + rel


def sanity_check(data: bytes | bytearray, max_rel_offset: int, deep: bool) -> bool:
    """Size a multiple of 12, last offset inside the segment; `deep`: monotonic columns."""
    if len(data) % ENTRY_SIZE:
        return False
    n = len(data) // ENTRY_SIZE
    if n == 0:
        return True
    ts, rel = ENTRY.unpack_from(data, (n - 1) * ENTRY_SIZE)
    if rel < 0 or rel > max_rel_offset:
        return False
    if deep:
        pairs = list(ENTRY.iter_unpack(bytes(data)))
        timestamps = [t for t, _ in pairs]
        offsets = [r for _, r in pairs]
        if timestamps != sorted(timestamps) or len(set(timestamps)) != n:
            return False
        if offsets != sorted(offsets) or offsets[0] < 0:
            return False
    return True


class TimeIndexView:
    """Read-only view of a segment's `.timeindex` for a `LogReader` in any process."""

    __slots__ = ("base_offset", "_view")

    def __init__(self, path: str, base_offset: int) -> None:
        self.base_offset = base_offset
        self._view = IndexView(path, ENTRY_SIZE)

    def find_nearest(self, timestamp: int) -> tuple[int, int]:
        buf, n = self._view.entries(refresh=True)
        return lookup(buf, n, self.base_offset, timestamp)

    def last_entry(self) -> tuple[int, int]:
        buf, n = self._view.entries(refresh=True)
        if n == 0:
            return -1, self.base_offset
        ts, rel = ENTRY.unpack_from(buf, (n - 1) * ENTRY_SIZE)
        return ts, self.base_offset + rel

    def replaced(self) -> bool:
        return self._view.replaced()

    def close(self) -> None:
        self._view.close()

