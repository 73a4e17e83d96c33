# Declarations of kafkafast._native.arrow_decode (implemented in cython_ext/arrow_decode.pyx):
# v2 records decoded straight into Arrow column buffers. Pure twin:
# kafkafast/client/_pure_arrow_decode.py; Arrow arrays are made from the buffers by
# kafkafast/client/arrow.py.
from libc.stdint cimport int32_t, int64_t, uint8_t

from kafkafast._native.records cimport RecordView

# The buffers of one ArrowColumns, in the order take() hands them out.
cdef enum:
    B_OFFSET = 0          # int64 per record
    B_TIMESTAMP = 1       # int64 (ms) per record
    B_TS_TYPE = 2         # int32 per record
    B_KEY_OFFSETS = 3     # int32, records + 1
    B_KEY_DATA = 4
    B_KEY_VALID = 5       # validity bitmap
    B_VALUE_OFFSETS = 6
    B_VALUE_DATA = 7
    B_VALUE_VALID = 8
    B_HEADERS = 9         # int32 list offsets, records + 1
    B_HKEY_OFFSETS = 10   # int32, headers + 1
    B_HKEY_DATA = 11      # UTF-8
    B_HVALUE_OFFSETS = 12
    B_HVALUE_DATA = 13
    B_HVALUE_VALID = 14
    N_BUFFERS = 15

# A growing byte buffer; handed to an OwnedBuffer (and replaced) by take().
cdef struct Buf:
    uint8_t* data
    Py_ssize_t size
    Py_ssize_t cap


cdef class OwnedBuffer:
    cdef uint8_t* data
    cdef Py_ssize_t size
    cdef Py_ssize_t cap


cdef class ArrowColumns:
    cdef readonly bint include_headers
    cdef readonly str timestamp_unit   # "ms" or "us" (timestamps multiplied by ts_scale)
    cdef int64_t ts_scale
    cdef Buf bufs[N_BUFFERS]
    cdef Py_ssize_t hint[N_BUFFERS]   # sizes at the last take()
    cdef Py_ssize_t n               # records
    cdef Py_ssize_t nh              # header entries
    cdef Py_ssize_t key_nulls
    cdef Py_ssize_t value_nulls
    cdef Py_ssize_t hvalue_nulls
    cdef int _start(self) except -1
    cdef int _add_headers(self, const RecordView* r) except -1
    cdef int _room_for_data(self, Py_ssize_t size) except -1
