# Declarations of the C-level helpers of kafkafast._native.records (implemented in cython_ext/records.pyx).
# The batch grammar is documented at the top of kafkafast/records/batch.py.
from cpython.ref cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef enum:
    HEADER_SIZE = 61
    MIN_BATCH_LENGTH = 49
    CRC_START = 21
    MAX_CODEC = 4
    MIN_RECORD_BODY = 6

# Result of check_header().
cdef enum HeaderStatus:
    HDR_OK = 0
    HDR_SHORT = 1        # fewer than 61 bytes available
    HDR_LEGACY = 2       # magic 0 or 1
    HDR_BAD_LENGTH = 3   # batchLength < 49
    HDR_BAD_MAGIC = 4    # magic not 0, 1 or 2

# Result of the varint readers: bytes consumed (> 0), or one of these.
cdef enum VarintStatus:
    VARINT_TRUNCATED = 0
    VARINT_TOO_LONG = -1

# Result of walk_records().
cdef enum WalkStatus:
    WALK_OK = 0
    WALK_BAD_VARINT = 1
    WALK_BAD_LENGTH = 2
    WALK_TOO_MANY = 3
    WALK_COUNT_MISMATCH = 4

# States of the streaming record walker (stream_feed): where in a record the next byte belongs.
cdef enum StreamState:
    S_LENGTH = 0
    S_ATTRIBUTES = 1
    S_TIMESTAMP = 2
    S_OFFSET = 3
    S_KEY = 4
    S_VALUE = 5
    S_HEADERS = 6
    S_HKEY = 7
    S_HVALUE = 8
    S_SKIP = 9
    S_END = 10

# Result of stream_feed().
cdef enum StreamStatus:
    STREAM_OK = 0
    STREAM_NOT_FILLED = 1        # the fields end before the record length says
    STREAM_TOO_MANY = 2          # bytes after the declared number of records
    STREAM_OVERRUN = 3           # a field reaches past its record
    STREAM_VARINT_TOO_LONG = 4
    STREAM_BAD_LENGTH = 5        # record length below 6
    STREAM_BAD_OFFSET_DELTA = 6  # record i whose offsetDelta is not i
    STREAM_BAD_HEADER_COUNT = 7
    STREAM_BAD_FIELD_LENGTH = 8  # below -1, or a null header key

# Where validate_record_stream is between two pieces of decompressed records.
cdef struct RecordStream:
    int state
    int after_skip              # the state once `skip` bytes are skipped
    uint64_t acc                # varint being read
    int shift
    int64_t remaining           # bytes left in the current record
    int64_t skip
    int64_t seen                # complete records
    int64_t count               # records the batch declares
    int64_t headers_left
    int64_t bad                 # the offending number, for the error message
    int64_t ts_min              # the smallest and largest timestampDelta of the records walked
    int64_t ts_max

cdef int stream_feed(RecordStream* s, const uint8_t* p, const uint8_t* end) noexcept nogil

cdef int16_t be16(const uint8_t* p) noexcept nogil
cdef int32_t be32(const uint8_t* p) noexcept nogil
cdef uint32_t be32u(const uint8_t* p) noexcept nogil
cdef int64_t be64(const uint8_t* p) noexcept nogil
cdef void put_be16(uint8_t* p, int16_t v) noexcept nogil
cdef void put_be32(uint8_t* p, uint32_t v) noexcept nogil
cdef void put_be64(uint8_t* p, int64_t v) noexcept nogil

cdef int check_header(const uint8_t* p, Py_ssize_t avail) noexcept nogil
cdef Py_ssize_t read_uvarint64(const uint8_t* p, const uint8_t* end, uint64_t* out) noexcept nogil
cdef Py_ssize_t read_varint32(const uint8_t* p, const uint8_t* end, int32_t* out) noexcept nogil
cdef int uvarint_size(uint64_t v) noexcept nogil
cdef uint8_t* put_uvarint(uint8_t* p, uint64_t v) noexcept nogil
cdef int walk_records(const uint8_t* p, const uint8_t* end, int32_t expected, int32_t* seen) noexcept nogil

# Result of parse_record().
cdef enum RecordStatus:
    REC_OK = 0
    REC_BAD_VARINT = 1      # truncated or overlong varint
    REC_BAD_LENGTH = 2      # record length below 6 or past the buffer
    REC_BAD_KEY = 3         # key length varint unreadable, or the key does not fit
    REC_BAD_VALUE = 4
    REC_NEGATIVE_HEADERS = 5
    REC_BAD_HEADER_KEY = 6
    REC_NULL_HEADER_KEY = 7
    REC_BAD_HEADER_VALUE = 8
    REC_NOT_FILLED = 9      # the fields end before the record length says

# One v2 record located in its buffer by parse_record(); nothing is copied.
cdef struct RecordView:
    int attributes
    int64_t timestamp_delta
    int32_t offset_delta
    const uint8_t* key          # NULL when key_length == -1
    int32_t key_length
    const uint8_t* value
    int32_t value_length
    const uint8_t* headers      # first header; every header's lengths are checked
    int32_t header_count
    const uint8_t* end          # the next record
    int64_t bad                 # the offending length, for the error message

cdef int parse_record(const uint8_t* p, const uint8_t* buf_end, RecordView* r) noexcept nogil


cdef class ConsumerRecord:
    cdef public object topic
    cdef public object partition
    cdef public object offset
    cdef public object timestamp
    cdef public object timestamp_type
    cdef public object key
    cdef public object value
    cdef public object headers


cdef class BatchBuilder:
    cdef public int compression
    cdef public int64_t base_offset
    cdef public int64_t producer_id
    cdef public int16_t producer_epoch
    cdef public int32_t base_sequence
    cdef public int32_t partition_leader_epoch
    cdef Py_ssize_t _max_size       # -1: unbounded
    cdef int16_t _attributes
    # A bytes object of 61 + _cap bytes: room for the batch header, then the encoded
    # records (_len bytes). build() writes the header, shrinks it and hands it out; after
    # that (_shared) it is copied before it is written again, unless reset() finds that
    # nobody else holds it any more.
    cdef PyObject* _data
    cdef bint _shared
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef int64_t _first_timestamp
    cdef int64_t _max_timestamp
    cdef int32_t _count
    cdef int _reserve(self, Py_ssize_t extra) except -1
    cpdef bint append(self, int64_t timestamp, key, value, headers=*) except -1
    cdef inline uint8_t* _records(self) noexcept
