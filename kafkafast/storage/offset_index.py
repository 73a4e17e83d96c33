"""Sparse offset index of one segment: `<20-digit base offset>.index`."""
from __future__ import annotations

import struct
from array import array

from kafkafast.storage.index_file import (Buffer, IndexView, IndexWriter, SparseIndex, index_search,
                                           read_index_file)

ENTRY = struct.Struct(">ii")
ENTRY_SIZE = 8


class OffsetIndex(SparseIndex):
    """Writer of a segment's sparse offset index.

    File `<20-digit zero-padded base offset>.index`, a packed array of 8-byte entries::

        int32 relative offset   base offset of a batch minus the segment's base offset (BE)
        int32 position          byte position of that batch in the segment's .log (BE)

    One entry is added for a batch when more than `index.interval.bytes` bytes of log have
    been written since the previous entry (Kafka's rule: the first batch of a segment is
    never indexed; it sits at position 0). Entries index a batch's *base* offset, as
    Redpanda does, so the entry found for an offset is the batch to start scanning at and,
    when the offset is a batch's first, exactly that batch. Both columns strictly increase.
    The file is not preallocated (see `index_file`). At most `segment.index.bytes / 8`
    entries; a full index rolls the segment.

    API: `maybe_track(base_offset, position, batch_size)` while appending (`track_run` for
    an append's batches at once), `find_nearest(offset) -> (base offset, position)` when reading.
    """

    __slots__ = ("last_rel_offset", "last_position")

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, interval_bytes: int,
                 initial: bytearray | None = None) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self._w = IndexWriter(path, ENTRY_SIZE, max_index_bytes, initial)
        self._bytes_since = 0
        self.last_rel_offset = -1
        self.last_position = -1
        if self._w.entries:
            self.last_rel_offset, self.last_position = ENTRY.unpack_from(self._w.buf, (self._w.entries - 1) * ENTRY_SIZE)

    @classmethod
    def load(cls, path: str, base_offset: int, max_index_bytes: int, interval_bytes: int,
             log_size: int, deep: bool) -> tuple[OffsetIndex, bool]:
        """Open an existing index; (index, ok). A failed sanity check leaves it empty, ok=False."""
        data = read_index_file(path)
        ok = data is not None and sanity_check(data, log_size, deep)
        return cls(path, base_offset, max_index_bytes, interval_bytes, data if ok else None), ok

    def maybe_track(self, base_offset: int, position: int, batch_size: int) -> None:
        w = self._w
        if self._bytes_since > self.interval_bytes and w.entries < w.max_entries:  # (not w.is_full)
            rel = base_offset - self.base_offset
            w._append(ENTRY.pack(rel, position))
            self.last_rel_offset, self.last_position = rel, position
            self._bytes_since = 0
        self._bytes_since += batch_size

    def track_run(self, batches: list[tuple[int, int, int, int]], position: int) -> None:
        """`maybe_track` over consecutive batches (base, next offset, max timestamp, size)
        written from `position`, their entries written with one write."""
        w = self._w
        since, interval, base = self._bytes_since, self.interval_bytes, self.base_offset
        room = w.max_entries - w.entries
        entries: list[bytes] = []
        rel = -1
        for b, _, _, size in batches:
            if since > interval and len(entries) < room:
                rel = b - base
                entries.append(ENTRY.pack(rel, position))
                last_position = position
                since = 0
            since += size
            position += size
        self._bytes_since = since
        if entries:
            w._append(b"".join(entries), len(entries))
            self.last_rel_offset, self.last_position = rel, last_position

    def find_nearest(self, offset: int) -> tuple[int, int]:
        """(base offset, position) of the last indexed batch at or below `offset`; else (base, 0)."""
        return lookup(self._w.buf, self._w.entries, self.base_offset, offset)

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches whose base offset is >= `offset`."""
        slot = index_search.offset_index_lookup(self._w.buf, self._w.entries, offset - self.base_offset - 1)
        keep = slot + 1
        if keep < self._w.entries:
            self._w.reset(self._w.buf[: keep * ENTRY_SIZE])
            self._reload_last()
        self._bytes_since = 0

    def _reload_last(self) -> None:
        if self._w.entries:
            self.last_rel_offset, self.last_position = ENTRY.unpack_from(self._w.buf, (self._w.entries - 1) * ENTRY_SIZE)
        else:
            self.last_rel_offset, self.last_position = -1, -1


def lookup(buf: Buffer, n: int, base_offset: int, offset: int) -> tuple[int, int]:
    rel = offset - base_offset
    if n == 0 or rel < 0:
        return base_offset, 0
    if rel > 0x7FFFFFFF:
        rel = 0x7FFFFFFF
    slot = index_search.offset_index_lookup(buf, n, rel)
    if slot < 0:
        return base_offset, 0
    r, pos = ENTRY.unpack_from(buf, slot * ENTRY_SIZE)
    return base_offset + r, pos


def lookup_by_position(buf: Buffer, n: int, base_offset: int, max_position: int) -> tuple[int, int] | None:
    """The last entry whose position is <= max_position (entries are sorted by position too)."""
    lo, hi, found = 0, n - 1, -1
    while lo <= hi:
        mid = (lo + hi) >> 1
        if ENTRY.unpack_from(buf, mid * ENTRY_SIZE)[1] <= max_position:
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    if found < 0:
        return None
    r, pos = ENTRY.unpack_from(buf, found * ENTRY_SIZE)
    return base_offset + r, pos


def sanity_check(data: bytes | bytearray, log_size: int, deep: bool) -> bool:
    """Size a multiple of 8, last position inside the log; `deep`: both columns strictly increase."""
    if len(data) % ENTRY_SIZE:
        return False
    n = len(data) // ENTRY_SIZE
    if n == 0:
        return True
    rel, pos = ENTRY.unpack_from(data, (n - 1) * ENTRY_SIZE)
    if rel < 0 or pos < 0 or pos >= log_size:
        return False
    if deep:
        cols = array("i", bytes(data))
        if struct.pack("=i", 1) != struct.pack(">i", 1):
            cols.byteswap()
        offsets, positions = cols[0::2].tolist(), cols[1::2].tolist()
        if offsets[0] < 0 or positions[0] < 0:
            return False
        if offsets != sorted(offsets) or len(set(offsets)) != n:
            return False
        if positions != sorted(positions) or len(set(positions)) != n:
            return False
    return True


class OffsetIndexView:
    """Read-only view of a segment's `.index` for a `LogReader` in any process."""

    __slots__ = ("base_offset", "_view")

    def __init__(self, path: str, base_offset: int) -> None:
        self.base_offset = base_offset
        self._view = IndexView(path, ENTRY_SIZE)

    def find_nearest(self, offset: int) -> tuple[int, int]:
        buf, n = self._view.entries()
        slot_base, pos = lookup(buf, n, self.base_offset, offset)
        if n == 0 or (slot_base, pos) == lookup_last(buf, n, self.base_offset):
            # Maybe stale: the writer may have added entries since we mapped the file.
            buf, n = self._view.entries(refresh=True)
            slot_base, pos = lookup(buf, n, self.base_offset, offset)
        return slot_base, pos

    def find_by_position(self, max_position: int) -> tuple[int, int] | None:
        buf, n = self._view.entries()
        return lookup_by_position(buf, n, self.base_offset, max_position)

    def replaced(self) -> bool:
        return self._view.replaced()

    def close(self) -> None:
        self._view.close()


def lookup_last(buf: Buffer, n: int, base_offset: int) -> tuple[int, int]:
    if n == 0:
        return base_offset, 0
    r, pos = ENTRY.unpack_from(buf, (n - 1) * ENTRY_SIZE)
    return base_offset + r, pos
