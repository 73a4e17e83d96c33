# Declarations of kafkafast._native.index_search (implemented in cython_ext/index_search.pyx).
# Index layouts: .index entries are 8 bytes (int32 relative offset, int32 file position),
# .timeindex entries are 12 bytes (int64 timestamp, int32 relative offset), big-endian,
# sorted ascending by their first field.
from libc.stdint cimport int32_t, int64_t, uint8_t

cdef enum:
    OFFSET_ENTRY_SIZE = 8
    TIME_ENTRY_SIZE = 12

cdef Py_ssize_t floor_offset_slot(const uint8_t* base, Py_ssize_t n, int64_t target) noexcept nogil
cdef Py_ssize_t floor_time_slot(const uint8_t* base, Py_ssize_t n, int64_t target) noexcept nogil
cdef Py_ssize_t ceil_time_slot(const uint8_t* base, Py_ssize_t n, int64_t target) noexcept nogil
