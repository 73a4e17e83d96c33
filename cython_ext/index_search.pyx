# cython: language_level=3, boundscheck=True, wraparound=False, cdivision=True
"""Compiled twin of `kafkafast.records._pure_index_search`: binary search over the sparse
offset index (8-byte entries: int32 relative offset, int32 position) and the time index
(12-byte entries: int64 timestamp, int32 relative offset), big-endian, sorted ascending.

Buffers may be bytes, bytearray, memoryview or mmap.mmap. `n_entries * entry_size` is
checked against the buffer length before any entry is read.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline int32_t _be32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t _be64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>_be32(p) << 32) | <uint32_t>_be32(p + 4))


cdef Py_ssize_t floor_offset_slot(const uint8_t* base, Py_ssize_t n, int64_t target) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:  # invariant: entries < lo are <= target, entries >= hi are > target
        mid = lo + (hi - lo) // 2
        if _be32(base + mid * OFFSET_ENTRY_SIZE) <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


cdef Py_ssize_t floor_time_slot(const uint8_t* base, Py_ssize_t n, int64_t target) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _be64(base + mid * TIME_ENTRY_SIZE) <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


cdef Py_ssize_t ceil_time_slot(const uint8_t* base, Py_ssize_t n, int64_t target) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:  # invariant: entries < lo are < target, entries >= hi are >= target
        mid = lo + (hi - lo) // 2
        if _be64(base + mid * TIME_ENTRY_SIZE) < target:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < n else -1


cdef inline object _byte_view(object buf):
    if type(buf) is memoryview and (buf.format != "B" or buf.ndim != 1):
        return buf.cast("B")
    return buf


cdef const uint8_t* _checked_base(const uint8_t[::1] view, Py_ssize_t n_entries, Py_ssize_t entry_size) except? NULL:
    if n_entries < 0:
        raise ValueError(f"n_entries {n_entries} is negative")
    if n_entries > view.shape[0] // entry_size:
        raise ValueError(f"{n_entries} entries of {entry_size} bytes do not fit a buffer of {view.shape[0]} bytes")
    if n_entries == 0:
        return NULL
    return &view[0]


def offset_index_lookup(buf, Py_ssize_t n_entries, int64_t target_relative_offset):
    """Slot of the largest offset-index entry with relative offset <= target, or -1."""
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef const uint8_t* base = _checked_base(view, n_entries, OFFSET_ENTRY_SIZE)
    if n_entries == 0:
        return -1
    return floor_offset_slot(base, n_entries, target_relative_offset)


def time_index_lookup(buf, Py_ssize_t n_entries, int64_t target_timestamp):
    """Slot of the largest time-index entry with timestamp <= target, or -1."""
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef const uint8_t* base = _checked_base(view, n_entries, TIME_ENTRY_SIZE)
    if n_entries == 0:
        return -1
    return floor_time_slot(base, n_entries, target_timestamp)


def time_index_lookup_ceil(buf, Py_ssize_t n_entries, int64_t target_timestamp):
    """Slot of the smallest time-index entry with timestamp >= target, or -1 if every entry is older."""
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef const uint8_t* base = _checked_base(view, n_entries, TIME_ENTRY_SIZE)
    if n_entries == 0:
        return -1
    return ceil_time_slot(base, n_entries, target_timestamp)
