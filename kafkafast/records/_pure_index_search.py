"""Pure-Python twin of `kafkafast._native.index_search` (built from `cython_ext/index_search.pyx`).

Binary search over the sparse indexes written by storage, big-endian, sorted ascending:

* `.index` entries, 8 bytes: int32 offset relative to the segment base, int32 file position;
* `.timeindex` entries, 12 bytes: int64 timestamp, int32 relative offset.

Buffers may be bytes, bytearray, memoryview or mmap.mmap. `n_entries * entry_size` is
checked against the buffer length (ValueError) before any entry is read.
"""
from __future__ import annotations

import mmap
import struct

Buffer = bytes | bytearray | memoryview | mmap.mmap

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _checked(buf: Buffer, n_entries: int, entry_size: int, target: int) -> memoryview:
    if not _INT64_MIN <= target <= _INT64_MAX:
        raise OverflowError("target outside the signed 64-bit range")
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    if n_entries < 0:
        raise ValueError(f"n_entries {n_entries} is negative")
    if n_entries > len(mv) // entry_size:
        raise ValueError(f"{n_entries} entries of {entry_size} bytes do not fit a buffer of {len(mv)} bytes")
    return mv


def offset_index_lookup(buf: Buffer, n_entries: int, target_relative_offset: int) -> int:
    """Slot of the largest offset-index entry with relative offset <= target, or -1."""
    mv = _checked(buf, n_entries, OFFSET_ENTRY_SIZE, target_relative_offset)
    lo, hi = 0, n_entries
    unpack = _I32.unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(mv, mid * OFFSET_ENTRY_SIZE)[0] <= target_relative_offset:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def time_index_lookup(buf: Buffer, n_entries: int, target_timestamp: int) -> int:
    """Slot of the largest time-index entry with timestamp <= target, or -1."""
    mv = _checked(buf, n_entries, TIME_ENTRY_SIZE, target_timestamp)
    lo, hi = 0, n_entries
    unpack = _I64.unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(mv, mid * TIME_ENTRY_SIZE)[0] <= target_timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def time_index_lookup_ceil(buf: Buffer, n_entries: int, target_timestamp: int) -> int:
    """Slot of the smallest time-index entry with timestamp >= target, or -1 if every entry is older."""
    mv = _checked(buf, n_entries, TIME_ENTRY_SIZE, target_timestamp)
    lo, hi = 0, n_entries
    unpack = _I64.unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(mv, mid * TIME_ENTRY_SIZE)[0] < target_timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < n_entries else -1
