# cython: language_level=3, boundscheck=True, wraparound=False, cdivision=True
"""Compiled twin of `kafkafast.records._pure_codec`: v2 record batch validation, in-place
offset assignment, recovery scan, varints, record encode/decode, the producer's
BatchBuilder and the client's ConsumerRecord decoder.

Same functions, semantics and exceptions as the pure twin; the batch grammar is written at
the top of `kafkafast/records/batch.py`. Every C-level read is checked against the buffer
length before it happens (the pointer helpers below never see an unchecked position), so
hostile input raises instead of crashing. The per-record loops never create Python objects
except where the caller asked for them (decode_records builds Record objects,
decode_consumer_records ConsumerRecords); BatchBuilder.append encodes into a C buffer.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object op)
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from crc32c import crc32c as _crc32c

from kafkafast.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from kafkafast.protocol.primitives import DecodeError

cdef object INT64_MIN = -(1 << 63)
cdef object INT64_MAX = (1 << 63) - 1
cdef object UINT64_MAX = (1 << 64) - 1
cdef int64_t MAX_OFFSET = 0x7FFFFFFFFFFFFFFF  # INT64_MAX, as a C value
# RecordView.bad when a length varint could not be read at all (no int32 length looks like it).
cdef int64_t LENGTH_UNREADABLE = -(1 << 40)


# ---------------------------------------------------------------------------- C helpers

cdef inline int16_t be16(const uint8_t* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t be32u(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int32_t be32(const uint8_t* p) noexcept nogil:
    return <int32_t>be32u(p)


cdef inline int64_t be64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>be32u(p) << 32) | be32u(p + 4))


cdef inline void put_be16(uint8_t* p, int16_t v) noexcept nogil:
    cdef uint16_t u = <uint16_t>v
    p[0] = <uint8_t>(u >> 8)
    p[1] = <uint8_t>u


cdef inline void put_be32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void put_be64(uint8_t* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    put_be32(p, <uint32_t>(u >> 32))
    put_be32(p + 4, <uint32_t>u)


cdef int check_header(const uint8_t* p, Py_ssize_t avail) noexcept nogil:
    """Sanity of the batch header at p with `avail` bytes readable from p (p may be NULL if avail <= 0)."""
    if avail >= 17 and p[16] <= 1:
        return HDR_LEGACY
    if avail < HEADER_SIZE:
        return HDR_SHORT
    if be32(p + 8) < MIN_BATCH_LENGTH:
        return HDR_BAD_LENGTH
    if p[16] != 2:
        return HDR_BAD_MAGIC
    return HDR_OK


cdef Py_ssize_t read_uvarint64(const uint8_t* p, const uint8_t* end, uint64_t* out) noexcept nogil:
    """Unsigned LEB128 of at most 10 bytes / 64 bits, reading only [p, end)."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef const uint8_t* start = p
    cdef uint8_t b
    while True:
        if p >= end:
            return VARINT_TRUNCATED
        b = p[0]
        p += 1
        if shift == 63 and b > 1:
            return VARINT_TOO_LONG
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = result
            return p - start
        shift += 7


cdef Py_ssize_t read_varint32(const uint8_t* p, const uint8_t* end, int32_t* out) noexcept nogil:
    """Zigzag varint of at most 5 bytes (Kafka's ByteUtils.readVarint), reading only [p, end)."""
    cdef uint32_t result = 0
    cdef int shift = 0
    cdef const uint8_t* start = p
    cdef uint8_t b
    while True:
        if p >= end:
            return VARINT_TRUNCATED
        b = p[0]
        p += 1
        result |= (<uint32_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 28:
            return VARINT_TOO_LONG
    out[0] = <int32_t>((result >> 1) ^ (~(result & 1) + 1))
    return p - start


cdef int uvarint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef uint8_t* put_uvarint(uint8_t* p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <uint8_t>((v & 0x7F) | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1


cdef int walk_records(const uint8_t* p, const uint8_t* end, int32_t expected, int32_t* seen) noexcept nogil:
    """Walk the length prefixes of uncompressed records in [p, end): they must exactly fill it
    and number `expected`. The hot loop of produce validation."""
    cdef int32_t count = 0
    cdef int32_t length
    cdef Py_ssize_t used
    while p < end:
        used = read_varint32(p, end, &length)
        if used <= 0:
            seen[0] = count
            return WALK_BAD_VARINT
        p += used
        if length < MIN_RECORD_BODY or length > end - p:
            seen[0] = count
            return WALK_BAD_LENGTH
        p += length
        count += 1
        if count > expected:
            seen[0] = count
            return WALK_TOO_MANY
    seen[0] = count
    if count != expected:
        return WALK_COUNT_MISMATCH
    return WALK_OK


# ---------------------------------------------------------------------------- Python glue

cdef inline object _byte_view(object buf):
    """The object itself, or a byte-format cast of a memoryview with another format."""
    if type(buf) is memoryview and (buf.format != "B" or buf.ndim != 1):
        return buf.cast("B")
    return buf


cdef object _header_exception(const uint8_t* p, Py_ssize_t pos, Py_ssize_t avail, int status):
    if status == HDR_LEGACY:
        return UnsupportedForMessageFormatError(
            f"message format v{p[16]} at position {pos}; only v2 record batches are accepted"
        )
    if status == HDR_SHORT:
        return CorruptMessageError(f"truncated batch header at position {pos}: {avail} of 61 bytes")
    if status == HDR_BAD_LENGTH:
        return CorruptMessageError(f"batch length {be32(p + 8)} at position {pos} is below 49")
    return CorruptMessageError(f"unknown magic {p[16]} at position {pos}")


cdef object _make_header(const uint8_t* p):
    return BatchHeader(
        be64(p), be32(p + 8), be32(p + 12), <int>p[16], be32u(p + 17), be16(p + 21), be32(p + 23),
        be64(p + 27), be64(p + 35), be64(p + 43), be16(p + 51), be32(p + 53), be32(p + 57),
    )


def read_batch_header(buf, Py_ssize_t pos=0):
    """Decode the v2 batch header at `pos` (checks length and magic, not the CRC)."""
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t avail
    cdef const uint8_t* p = NULL
    cdef int status
    if pos < 0:
        raise ValueError("pos must be >= 0")
    avail = n - pos if n > pos else 0
    if avail > 0:
        p = &view[pos]
    status = check_header(p, avail)
    if status != HDR_OK:
        raise _header_exception(p, pos, avail, status)
    return _make_header(p)


def batch_crc_ok(buf, Py_ssize_t pos, Py_ssize_t size):
    """Whether the stored CRC32C of the batch at [pos, pos+size) matches its bytes [pos+21, pos+size)."""
    buf = _byte_view(buf)
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    if pos < 0 or size < CRC_START or size > n - pos:
        return False
    return _crc32c(memoryview(buf)[pos + CRC_START:pos + size]) == be32u(&view[pos + 17])


def decode_uvarint(buf, Py_ssize_t pos=0):
    """(value, position after it) of the unsigned varint at `pos`; DecodeError on truncation/overlong."""
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef Py_ssize_t n = view.shape[0]
    cdef uint64_t v
    cdef Py_ssize_t used
    if pos < 0:
        raise ValueError("pos must be >= 0")
    if pos >= n:
        raise DecodeError("truncated varint")
    used = read_uvarint64(&view[pos], &view[0] + n, &v)
    if used == VARINT_TRUNCATED:
        raise DecodeError("truncated varint")
    if used == VARINT_TOO_LONG:
        raise DecodeError("varint too long")
    return v, pos + used


def decode_varint(buf, Py_ssize_t pos=0):
    """(value, position after it) of the zigzag int64 varint at `pos`."""
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef Py_ssize_t n = view.shape[0]
    cdef uint64_t v
    cdef Py_ssize_t used
    if pos < 0:
        raise ValueError("pos must be >= 0")
    if pos >= n:
        raise DecodeError("truncated varint")
    used = read_uvarint64(&view[pos], &view[0] + n, &v)
    if used == VARINT_TRUNCATED:
        raise DecodeError("truncated varint")
    if used == VARINT_TOO_LONG:
        raise DecodeError("varint too long")
    return <int64_t>((v >> 1) ^ (~(v & 1) + 1)), pos + used


cdef bytes _uvarint_bytes(uint64_t v):
    cdef uint8_t tmp[10]
    cdef uint8_t* end = put_uvarint(tmp, v)
    return PyBytes_FromStringAndSize(<char*>tmp, end - tmp)


def encode_uvarint(n):
    """Unsigned LEB128 of 0 <= n < 2^64."""
    if not 0 <= n <= UINT64_MAX:
        raise ValueError(f"{n} is outside the unsigned 64-bit range")
    return _uvarint_bytes(<uint64_t>n)


def encode_varint(n):
    """Zigzag varint of an int64."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"{n} is outside the signed 64-bit range")
    cdef int64_t v = n
    return _uvarint_bytes((<uint64_t>v << 1) ^ <uint64_t>(v >> 63))


# ---------------------------------------------------------------------------- validation

@cython.boundscheck(False)
def validate_batches(buf, Py_ssize_t max_batch_size):
    """Validate a producer's record set: exactly a sequence of whole, sane v2 batches.

    Raises CorruptMessageError, MessageTooLargeError, UnsupportedCompressionTypeError,
    InvalidRecordError or UnsupportedForMessageFormatError (see `batch.py`).
    """
    buf = _byte_view(buf)
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t size
    cdef const uint8_t* base
    cdef const uint8_t* p
    cdef int status, codec
    cdef int32_t count, last_delta, seen
    cdef object mv = None
    cdef list headers = []
    if n == 0:
        raise InvalidRecordError("empty record set")
    base = &view[0]
    while pos < n:
        p = base + pos
        status = check_header(p, n - pos)
        if status != HDR_OK:
            raise _header_exception(p, pos, n - pos, status)
        size = <Py_ssize_t>be32(p + 8) + 12
        if size > n - pos:
            raise CorruptMessageError(f"batch at {pos} claims {size} bytes, {n - pos} present")
        if size > max_batch_size:
            raise MessageTooLargeError(f"batch at {pos} is {size} bytes, limit {max_batch_size}")
        if mv is None:
            mv = memoryview(buf)
        if _crc32c(mv[pos + CRC_START:pos + size]) != be32u(p + 17):
            raise CorruptMessageError(f"batch at {pos}: CRC32C mismatch")
        codec = be16(p + 21) & 7
        if codec > MAX_CODEC:
            raise UnsupportedCompressionTypeError(f"batch at {pos}: compression codec {codec}")
        count = be32(p + 57)
        last_delta = be32(p + 23)
        if count <= 0 or <int64_t>last_delta != <int64_t>count - 1:
            raise InvalidRecordError(f"batch at {pos}: recordsCount {count}, lastOffsetDelta {last_delta}")
        if codec == 0:
            with nogil:
                status = walk_records(p + HEADER_SIZE, p + size, count, &seen)
            if status == WALK_BAD_VARINT:
                raise InvalidRecordError(f"batch at {pos}: bad record length varint")
            if status == WALK_BAD_LENGTH:
                raise InvalidRecordError(f"batch at {pos}: record length does not fit the batch")
            if status == WALK_TOO_MANY:
                raise InvalidRecordError(f"batch at {pos}: more records than recordsCount {count}")
            if status == WALK_COUNT_MISMATCH:
                raise InvalidRecordError(f"batch at {pos}: {seen} records, recordsCount says {count}")
        headers.append(_make_header(p))
        pos += size
    return headers


cdef inline const uint8_t* skip_field(const uint8_t* p, const uint8_t* rec_end, int32_t least) noexcept nogil:
    """Past the length-prefixed field at `p` (a key, a value, a header's key or value); NULL when
    its length is below `least` (-1: null allowed) or it reaches past `rec_end`."""
    cdef int32_t v
    cdef Py_ssize_t used = read_varint32(p, rec_end, &v)
    if used <= 0 or v < least or (v > 0 and v > rec_end - p - used):
        return NULL
    return p + used + (v if v > 0 else 0)


cdef inline const uint8_t* whole_record(const uint8_t* p, const uint8_t* end, int64_t seen,
                                       int64_t* ts_delta) noexcept nogil:
    """The end of the record at `p` when it lies wholly in [p, end) and stream_feed would take
    it (offsetDelta `seen`, every field inside it, nothing left over), read in one go, with its
    timestampDelta in `ts_delta`; NULL otherwise, and stream_feed walks it byte by byte and
    names what is wrong. (An uncompressed batch is one piece: every record goes this way.)"""
    cdef int32_t v
    cdef uint64_t acc = 0
    cdef int32_t headers
    cdef Py_ssize_t used
    cdef const uint8_t* rec_end
    cdef int n = 0
    used = read_varint32(p, end, &v)
    if used <= 0 or v < MIN_RECORD_BODY or v > end - p - used:
        return NULL
    p += used
    rec_end = p + v
    p += 1  # attributes
    while True:  # timestamp delta: a varint of at most 10 bytes
        if p >= rec_end or n == 10:
            return NULL
        acc |= (<uint64_t>(p[0] & 0x7F)) << (7 * n)
        n += 1
        p += 1
        if not (p[-1] & 0x80):
            break
    ts_delta[0] = <int64_t>((acc >> 1) ^ (~(acc & 1) + 1))
    used = read_varint32(p, rec_end, &v)
    if used <= 0 or v != seen:
        return NULL
    p += used
    p = skip_field(p, rec_end, -1)  # key
    if p != NULL:
        p = skip_field(p, rec_end, -1)  # value
    if p == NULL:
        return NULL
    used = read_varint32(p, rec_end, &headers)
    if used <= 0 or headers < 0:
        return NULL
    p += used
    while headers > 0:
        p = skip_field(p, rec_end, 0)  # a header's key: never null
        if p != NULL:
            p = skip_field(p, rec_end, -1)
        if p == NULL:
            return NULL
        headers -= 1
    return p if p == rec_end else NULL


cdef int stream_feed(RecordStream* s, const uint8_t* p, const uint8_t* end) noexcept nogil:
    """Walks one piece of decompressed records; the state carries over to the next piece
    (the same machine as the pure twin's validate_record_stream). Returns STREAM_OK or the
    error, with s.bad holding the offending number."""
    cdef uint8_t b
    cdef int64_t value
    cdef uint32_t raw
    cdef Py_ssize_t step
    cdef int nxt
    cdef const uint8_t* rec_end
    while p < end or s.state == S_END:
        if s.state == S_LENGTH and not s.shift and s.seen < s.count:
            rec_end = whole_record(p, end, s.seen, &value)
            if rec_end != NULL:
                p = rec_end
                if s.seen == 0 or value < s.ts_min:
                    s.ts_min = value
                if s.seen == 0 or value > s.ts_max:
                    s.ts_max = value
                s.seen += 1
                continue
        if s.state == S_END:
            if s.remaining:
                s.bad = s.remaining
                return STREAM_NOT_FILLED
            s.seen += 1
            s.state = S_LENGTH
            continue
        if s.state == S_SKIP:
            step = end - p
            if s.skip < step:
                step = s.skip
            p += step
            s.skip -= step
            if not s.skip:
                s.state = s.after_skip
            continue
        if s.state == S_LENGTH:
            if s.seen == s.count and not s.shift:
                return STREAM_TOO_MANY
        elif not s.remaining:
            return STREAM_OVERRUN
        else:
            s.remaining -= 1
        b = p[0]
        p += 1
        if s.state == S_ATTRIBUTES:
            s.state = S_TIMESTAMP
            continue
        if s.shift < 64:
            s.acc |= (<uint64_t>(b & 0x7F)) << s.shift
        if b & 0x80:
            s.shift += 7
            if s.shift > (63 if s.state == S_TIMESTAMP else 28):
                return STREAM_VARINT_TOO_LONG
            continue
        raw = <uint32_t>s.acc
        value = <int32_t>((raw >> 1) ^ (~(raw & 1) + 1))
        if s.state == S_TIMESTAMP:  # a varlong: all 64 bits
            value = <int64_t>((s.acc >> 1) ^ (~(s.acc & 1) + 1))
        s.acc = 0
        s.shift = 0
        if s.state == S_LENGTH:
            if value < MIN_RECORD_BODY:
                s.bad = value
                return STREAM_BAD_LENGTH
            s.remaining = value
            s.state = S_ATTRIBUTES
        elif s.state == S_TIMESTAMP:
            if s.seen == 0 or value < s.ts_min:
                s.ts_min = value
            if s.seen == 0 or value > s.ts_max:
                s.ts_max = value
            s.state = S_OFFSET
        elif s.state == S_OFFSET:
            if value != s.seen:
                s.bad = value
                return STREAM_BAD_OFFSET_DELTA
            s.state = S_KEY
        elif s.state == S_HEADERS:
            if value < 0:
                s.bad = value
                return STREAM_BAD_HEADER_COUNT
            s.headers_left = value
            s.state = S_HKEY if value else S_END
        else:
            if value < -1 or (value == -1 and s.state == S_HKEY):
                s.bad = value
                return STREAM_BAD_FIELD_LENGTH
            if s.state == S_HVALUE:
                s.headers_left -= 1
                nxt = S_HKEY if s.headers_left else S_END
            elif s.state == S_KEY:
                nxt = S_VALUE
            elif s.state == S_VALUE:
                nxt = S_HEADERS
            else:
                nxt = S_HVALUE
            if value > 0:
                if value > s.remaining:
                    return STREAM_OVERRUN
                s.remaining -= value
                s.skip = value
                s.after_skip = nxt
                s.state = S_SKIP
            else:
                s.state = nxt
    return STREAM_OK


_STREAM_MESSAGES = {
    STREAM_NOT_FILLED: "record {seen}: fields end {bad} bytes before its length",
    STREAM_TOO_MANY: "more records than recordsCount {count}",
    STREAM_OVERRUN: "record {seen}: fields overrun its length",
    STREAM_VARINT_TOO_LONG: "record {seen}: varint too long",
    STREAM_BAD_LENGTH: "record {seen}: length {bad}",
    STREAM_BAD_OFFSET_DELTA: "record {seen}: offset delta {bad}",
    STREAM_BAD_HEADER_COUNT: "record {seen}: header count {bad}",
    STREAM_BAD_FIELD_LENGTH: "record {seen}: field length {bad}",
}


cdef object _stream_exception(int status, const RecordStream* s):
    return CorruptMessageError(_STREAM_MESSAGES[status].format(seen=s.seen, bad=s.bad, count=s.count))


def validate_record_stream(chunks, int64_t count, int64_t max_bytes, bint timestamps=False):
    """Check decompressed v2 records arriving in pieces (`compression.iter_decompressed`):
    exactly `count` well-formed records (every length inside its record, the fields filling
    it), record i with offsetDelta i, nothing after the last. Nothing is buffered: each
    piece is walked as it comes, a value longer than a piece is skipped across pieces.

    Returns the decompressed size; with `timestamps`, (size, the smallest timestampDelta, the
    largest) of the records. Raises CorruptMessageError for malformed records and
    MessageTooLargeError as soon as more than `max_bytes` arrived (the iterator is not
    pulled further, so a decompression bomb costs at most one piece beyond the bound).
    """
    cdef RecordStream s
    cdef const uint8_t[::1] view
    cdef Py_ssize_t n
    cdef int64_t total = 0
    cdef int status = STREAM_OK
    memset(&s, 0, sizeof(s))
    s.state = S_LENGTH
    s.count = count
    for chunk in chunks:
        view = _byte_view(chunk)
        n = view.shape[0]
        total += n
        if total > max_bytes:
            raise MessageTooLargeError(f"records decompress to more than {max_bytes} bytes")
        if n:
            with nogil:
                status = stream_feed(&s, &view[0], &view[0] + n)
            if status != STREAM_OK:
                raise _stream_exception(status, &s)
    status = stream_feed(&s, NULL, NULL)  # completes a record that ended with the last piece
    if status != STREAM_OK:
        raise _stream_exception(status, &s)
    if s.state != S_LENGTH or s.shift:
        raise CorruptMessageError(f"record {s.seen}: truncated")
    if s.seen != count:
        raise CorruptMessageError(f"{s.seen} records, recordsCount says {count}")
    if timestamps:
        return total, s.ts_min, s.ts_max
    return total


@cython.boundscheck(False)
def assign_offsets(buf, int64_t base_offset, int32_t leader_epoch, int64_t log_append_time=-1):
    """Write running baseOffsets and the partitionLeaderEpoch into validated batches in place.

    With log_append_time >= 0 also set the LogAppendTime attribute bit, write maxTimestamp
    and recompute the CRC. Returns the offset after the last record.
    """
    buf = _byte_view(buf)
    if memoryview(buf).readonly:
        raise TypeError("assign_offsets needs a writable buffer")
    cdef uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t size
    cdef int32_t batch_length
    cdef uint8_t* p
    cdef int64_t offset = base_offset
    cdef object mv = None
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptMessageError(f"truncated batch header at position {pos}")
        p = &view[0] + pos
        batch_length = be32(p + 8)
        size = <Py_ssize_t>batch_length + 12
        if batch_length < MIN_BATCH_LENGTH or size > n - pos:
            raise CorruptMessageError(f"bad batch length {batch_length} at position {pos}")
        put_be64(p, offset)
        put_be32(p + 12, <uint32_t>leader_epoch)
        if log_append_time >= 0:
            put_be16(p + 21, <int16_t>(be16(p + 21) | 0x08))
            put_be64(p + 35, log_append_time)
            if mv is None:
                mv = memoryview(buf)
            put_be32(p + 17, <uint32_t>_crc32c(mv[pos + CRC_START:pos + size]))
        if offset > INT64_MAX - (<int64_t>be32(p + 23) + 1):
            raise OverflowError("offset outside the signed 64-bit range")
        offset += <int64_t>be32(p + 23) + 1
        pos += size
    return offset


@cython.boundscheck(False)
cdef Py_ssize_t _whole_batch(const uint8_t[::1] view, Py_ssize_t pos, Py_ssize_t n, object mv) except -2:
    """The size of the batch at `pos` of `view` (`mv` views the same bytes) if it is whole, with a
    sane header and a good CRC; -1 if not (where a scan stops)."""
    cdef const uint8_t* p
    cdef Py_ssize_t size
    if n - pos < HEADER_SIZE:
        return -1
    p = &view[0] + pos
    if check_header(p, n - pos) != HDR_OK:
        return -1
    size = <Py_ssize_t>be32(p + 8) + 12
    if size > n - pos:
        return -1
    if _crc32c(mv[pos + CRC_START:pos + size]) != be32u(p + 17):
        return -1
    return size


@cython.boundscheck(False)
def scan_valid_prefix(buf, Py_ssize_t start_pos=0):
    """Recovery scan: whole batches with sane headers and good CRCs from `start_pos` on.

    Returns (valid bytes counted from start_pos, [(position, header), ...]); stops silently
    at the first truncated, insane or CRC-failing batch.
    """
    buf = _byte_view(buf)
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t pos = start_pos
    cdef Py_ssize_t size
    cdef object mv = memoryview(buf)
    cdef list found = []
    if start_pos < 0 or start_pos > n:
        raise ValueError(f"start_pos {start_pos} outside the buffer of {n} bytes")
    while True:
        size = _whole_batch(view, pos, n, mv)
        if size < 0:
            break
        found.append((pos, _make_header(&view[0] + pos)))
        pos += size
    return pos - start_pos, found


@cython.boundscheck(False)
def scan_follower_batches(buf, int64_t log_end_offset, int32_t latest_epoch):
    """A replica follower's pass over a leader's batches: whole batches with sane headers and
    good CRCs (stopping silently at the first that is not, as `scan_valid_prefix`, or whose
    offsets are negative or overflow), leading
    batches wholly below `log_end_offset` skipped. Returns (start, end, infos, producer_batches,
    epochs): the kept bytes are buf[start:end]; infos = [(base offset, next offset, max
    timestamp, size)] per kept batch, what a segment append indexes; producer_batches =
    [(position from start, producer id, producer epoch, first sequence, last sequence, base
    offset, last offset, max timestamp, attributes)] of the kept batches with a producer id,
    what the producer state keeps of them; epochs = [(partition leader epoch, base offset)]
    where a kept batch raises the epoch above `latest_epoch` and those before it.
    """
    buf = _byte_view(buf)
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t pos = 0, start = 0, size
    cdef const uint8_t* p
    cdef int64_t base, last, producer_id, last_seq
    cdef int32_t epoch, base_seq, delta
    cdef object mv = memoryview(buf)
    cdef list infos = [], producers = [], epochs = []
    while True:
        size = _whole_batch(view, pos, n, mv)
        if size < 0:
            break
        p = &view[0] + pos
        base = be64(p)
        delta = be32(p + 23)
        if base < 0 or delta < 0 or base > MAX_OFFSET - 1 - delta:  # no offsets a leader assigns
            break
        last = base + delta
        if not infos and last < log_end_offset:
            pos += size
            start = pos
            continue
        infos.append((base, last + 1, be64(p + 35), size))
        producer_id = be64(p + 43)
        if producer_id >= 0:
            base_seq = be32(p + 53)
            last_seq = -1 if base_seq == -1 else (<int64_t>base_seq + delta) & 0x7FFFFFFF  # wraps as Kafka's
            producers.append((pos - start, producer_id, be16(p + 51), base_seq, last_seq, base, last,
                              be64(p + 35), be16(p + 21)))
        epoch = be32(p + 12)
        if epoch > latest_epoch:
            epochs.append((epoch, base))
            latest_epoch = epoch
        pos += size
    return start, pos if infos else start, infos, producers, epochs


# ---------------------------------------------------------------------------- records

cdef inline bint _skip_field(const uint8_t** pp, const uint8_t* end, int32_t* length, int64_t* bad) noexcept nogil:
    """Steps *pp over a varint-length-prefixed nullable field (*length -1: null). False when
    the length is unreadable or does not fit before `end` (*bad says which, for the error)."""
    cdef Py_ssize_t used = read_varint32(pp[0], end, length)
    if used <= 0:
        bad[0] = LENGTH_UNREADABLE
        return False
    pp[0] += used
    if length[0] != -1:
        if length[0] < 0 or length[0] > end - pp[0]:
            bad[0] = length[0]
            return False
        pp[0] += length[0]
    return True


cdef int parse_record(const uint8_t* p, const uint8_t* buf_end, RecordView* r) noexcept nogil:
    """Locate the fields of the record at p (length prefix first), reading only [p, buf_end).

    Every length is checked, header lengths included; nothing is copied. The one parser of
    records: decode_records and decode_consumer_records build their objects from its view."""
    cdef int32_t length, n, j
    cdef uint64_t ts_raw
    cdef Py_ssize_t used = read_varint32(p, buf_end, &length)
    cdef const uint8_t* end
    if used <= 0:
        return REC_BAD_VARINT
    p += used
    if length < MIN_RECORD_BODY or length > buf_end - p:
        r.bad = length
        return REC_BAD_LENGTH
    end = p + length
    r.attributes = p[0]
    p += 1
    used = read_uvarint64(p, end, &ts_raw)
    if used <= 0:
        return REC_BAD_VARINT
    p += used
    r.timestamp_delta = <int64_t>((ts_raw >> 1) ^ (~(ts_raw & 1) + 1))
    used = read_varint32(p, end, &r.offset_delta)
    if used <= 0:
        return REC_BAD_VARINT
    p += used
    if not _skip_field(&p, end, &r.key_length, &r.bad):
        return REC_BAD_KEY
    r.key = NULL if r.key_length == -1 else p - r.key_length
    if not _skip_field(&p, end, &r.value_length, &r.bad):
        return REC_BAD_VALUE
    r.value = NULL if r.value_length == -1 else p - r.value_length
    used = read_varint32(p, end, &r.header_count)
    if used <= 0:
        return REC_BAD_VARINT
    p += used
    if r.header_count < 0:
        r.bad = r.header_count
        return REC_NEGATIVE_HEADERS
    r.headers = p
    for j in range(r.header_count):
        if not _skip_field(&p, end, &n, &r.bad):
            return REC_BAD_HEADER_KEY
        if n == -1:
            return REC_NULL_HEADER_KEY
        if not _skip_field(&p, end, &n, &r.bad):
            return REC_BAD_HEADER_VALUE
    if p != end:
        return REC_NOT_FILLED
    r.end = end
    return REC_OK


cdef object _record_exception(int status, const RecordView* r):
    if status == REC_BAD_LENGTH:
        return CorruptMessageError(f"record length {r.bad} does not fit the batch")
    if status in (REC_BAD_KEY, REC_BAD_VALUE, REC_BAD_HEADER_KEY, REC_BAD_HEADER_VALUE):
        what = {REC_BAD_KEY: "key", REC_BAD_VALUE: "value", REC_BAD_HEADER_KEY: "header key",
                REC_BAD_HEADER_VALUE: "header value"}[status]
        if r.bad == LENGTH_UNREADABLE:
            return CorruptMessageError(f"bad {what} length")
        return CorruptMessageError(f"{what} length {r.bad} does not fit the record")
    if status == REC_NEGATIVE_HEADERS:
        return CorruptMessageError(f"negative header count {r.bad}")
    if status == REC_NULL_HEADER_KEY:
        return CorruptMessageError("null header key")
    if status == REC_NOT_FILLED:
        return CorruptMessageError("record fields do not fill the record length")
    return CorruptMessageError("truncated or overlong varint in record")


cdef inline object _field(const uint8_t* p, int32_t length):
    if p == NULL:
        return None
    return PyBytes_FromStringAndSize(<const char*>p, length)


cdef list _headers(const RecordView* r):
    """The (str key, bytes-or-None value) list of a record parse_record accepted."""
    cdef list headers = []
    cdef const uint8_t* p = r.headers
    cdef int32_t j, n = 0
    for j in range(r.header_count):
        p += read_varint32(p, r.end, &n)
        try:
            hkey = PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
        except UnicodeDecodeError:
            raise CorruptMessageError("header key is not UTF-8") from None
        p += n
        p += read_varint32(p, r.end, &n)
        if n == -1:
            headers.append((hkey, None))
        else:
            headers.append((hkey, PyBytes_FromStringAndSize(<const char*>p, n)))
            p += n
    return headers


@cython.boundscheck(False)
def decode_records(buf, Py_ssize_t count, int64_t base_offset, int64_t first_timestamp):
    """Decode `count` v2 records from uncompressed record bytes; offsets/timestamps made absolute.

    Bytes after the `count`-th record are ignored. Malformed records raise CorruptMessageError.
    """
    if count < 0:
        raise CorruptMessageError(f"negative record count {count}")
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef Py_ssize_t n = view.shape[0]
    cdef const uint8_t* p = &view[0] if n > 0 else NULL
    cdef const uint8_t* buf_end = p + n
    cdef Py_ssize_t i
    cdef int status
    cdef RecordView r
    cdef list records = []
    for i in range(count):
        status = parse_record(p, buf_end, &r)
        if status != REC_OK:
            raise _record_exception(status, &r)
        records.append(Record(base_offset + r.offset_delta, first_timestamp + r.timestamp_delta,
                              _field(r.key, r.key_length), _field(r.value, r.value_length),
                              _headers(&r) if r.header_count else [], r.attributes))
        p = r.end
    return records


@cython.freelist(1024)
@cython.no_gc
cdef class ConsumerRecord:
    """One record read from a partition: the client's record type.

    Built by `decode_consumer_records` straight from the batch bytes (the key and value
    are the only copies of the payload). Attributes: topic, partition, offset, timestamp,
    timestamp_type (0 CreateTime, 1 LogAppendTime), key, value, headers.

    Not tracked by the cyclic garbage collector, and neither are the headers lists the
    decoder makes: a fetch makes hundreds of thousands of them and their fields (str,
    int, bytes, tuples of those) cannot form cycles, while tracking them made the
    collector's full passes cost more than decoding. (A cycle a caller builds through
    them, e.g. a record appended to its own headers, is never freed.)
    """

    def __init__(self, topic, partition, offset, timestamp, timestamp_type, key, value, headers):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self):
        return (f"ConsumerRecord({self.topic!r}, {self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        cdef ConsumerRecord o = <ConsumerRecord>other
        return (self.topic == o.topic and self.partition == o.partition and self.offset == o.offset
                and self.timestamp == o.timestamp and self.timestamp_type == o.timestamp_type
                and self.key == o.key and self.value == o.value and self.headers == o.headers)

    __hash__ = None

    def __reduce__(self):
        return (ConsumerRecord, (self.topic, self.partition, self.offset, self.timestamp, self.timestamp_type,
                                 self.key, self.value, self.headers))


@cython.boundscheck(False)
def decode_consumer_records(buf, Py_ssize_t count, int64_t base_offset, int64_t first_timestamp,
                            int64_t log_append_time, topic, partition, int64_t start, int64_t end, list out):
    """Decode `count` v2 records like `decode_records`, appending a `ConsumerRecord` to `out`
    for each whose offset is in [start, end) (end < 0: no upper bound); returns how many.

    Decoding stops at the first record at or past `end`. With log_append_time >= 0 every
    record's timestamp is log_append_time and its timestamp_type 1 (LogAppendTime), else
    first_timestamp + its delta and 0. No intermediate Record objects are made.
    """
    if count < 0:
        raise CorruptMessageError(f"negative record count {count}")
    cdef const uint8_t[::1] view = _byte_view(buf)
    cdef Py_ssize_t n = view.shape[0]
    cdef const uint8_t* p = &view[0] if n > 0 else NULL
    cdef const uint8_t* buf_end = p + n
    cdef Py_ssize_t i, added = 0
    cdef int status
    cdef int64_t offset
    cdef RecordView r
    cdef ConsumerRecord rec
    cdef object ts_type = 1 if log_append_time >= 0 else 0
    cdef object fixed_ts = log_append_time if log_append_time >= 0 else None
    # Records of a batch mostly share their timestamp (milliseconds): share the int too.
    cdef int64_t last_delta = 0
    cdef object last_ts = first_timestamp
    for i in range(count):
        status = parse_record(p, buf_end, &r)
        if status != REC_OK:
            raise _record_exception(status, &r)
        p = r.end
        offset = base_offset + r.offset_delta
        if 0 <= end <= offset or offset < start:
            if r.header_count:
                _headers(&r)  # the same UTF-8 check as for the records handed out
            if offset < start:
                continue
            break
        rec = ConsumerRecord.__new__(ConsumerRecord)
        rec.topic = topic
        rec.partition = partition
        rec.offset = offset
        if fixed_ts is not None:
            rec.timestamp = fixed_ts
        else:
            if r.timestamp_delta != last_delta:
                last_delta = r.timestamp_delta
                last_ts = first_timestamp + last_delta
            rec.timestamp = last_ts
        rec.timestamp_type = ts_type
        rec.key = _field(r.key, r.key_length)
        rec.value = _field(r.value, r.value_length)
        headers = _headers(&r) if r.header_count else []
        PyObject_GC_UnTrack(headers)
        rec.headers = headers
        out.append(rec)
        added += 1
    return added


cdef inline bytes _as_bytes(object x, str what):
    if type(x) is bytes:
        return <bytes>x
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes, bytearray, memoryview or None")


cdef inline uint64_t _zigzag(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline Py_ssize_t _field_size(object b):
    if b is None:
        return 1
    return uvarint_size(_zigzag(len(<bytes>b))) + len(<bytes>b)


cdef inline uint8_t* _put_field(uint8_t* p, object b):
    cdef Py_ssize_t length
    if b is None:
        p[0] = 1  # zigzag(-1)
        return p + 1
    length = len(<bytes>b)
    p = put_uvarint(p, _zigzag(length))
    memcpy(p, PyBytes_AS_STRING(b), length)
    return p + length


cdef inline list _header_parts(headers):
    """A record's headers as [key0, value0, key1, value1, ...] (keys UTF-8 encoded, values
    bytes or None); None for no headers."""
    cdef list parts = None
    if not headers:
        return None
    for hkey, hvalue in headers:
        if parts is None:
            parts = []
        parts.append((<str>hkey).encode("utf-8") if isinstance(hkey, str) else _as_bytes(hkey, "header key"))
        parts.append(None if hvalue is None else _as_bytes(hvalue, "header value"))
    return parts


cdef inline Py_ssize_t _record_body_size(int64_t ts_delta, int32_t offset_delta, kb, vb, list parts) except -1:
    """Size of a record's body: everything after its length prefix."""
    cdef Py_ssize_t body = 1 + uvarint_size(_zigzag(ts_delta)) + uvarint_size(_zigzag(offset_delta))
    body += _field_size(kb) + _field_size(vb)
    cdef Py_ssize_t n_headers = 0
    if parts is not None:
        n_headers = len(parts) // 2
        for part in parts:
            body += _field_size(part)
    return body + uvarint_size(_zigzag(n_headers))


cdef inline uint8_t* _put_record(uint8_t* p, Py_ssize_t body, int64_t ts_delta, int32_t offset_delta, kb, vb,
                                 list parts):
    """Writes one record (length prefix, attributes 0, the fields) at p; returns its end."""
    p = put_uvarint(p, _zigzag(body))
    p[0] = 0
    p += 1
    p = put_uvarint(p, _zigzag(ts_delta))
    p = put_uvarint(p, _zigzag(offset_delta))
    p = _put_field(p, kb)
    p = _put_field(p, vb)
    if parts is None:
        p[0] = 0  # zigzag(0) headers
        return p + 1
    p = put_uvarint(p, _zigzag(len(parts) // 2))
    for part in parts:
        p = _put_field(p, part)
    return p


def encode_record(offset_delta, timestamp_delta, key, value, headers=()):
    """One v2 record, length prefix included (attributes byte 0)."""
    cdef int32_t c_offset_delta
    cdef int64_t c_ts_delta
    try:
        c_offset_delta = offset_delta
    except OverflowError:
        raise OverflowError("offset delta outside the signed 32-bit range") from None
    try:
        c_ts_delta = timestamp_delta
    except OverflowError:
        raise OverflowError("timestamp delta outside the signed 64-bit range") from None
    cdef object kb = None if key is None else _as_bytes(key, "key")
    cdef object vb = None if value is None else _as_bytes(value, "value")
    cdef list parts = _header_parts(headers)
    cdef Py_ssize_t body = _record_body_size(c_ts_delta, c_offset_delta, kb, vb, parts)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, uvarint_size(_zigzag(body)) + body)
    _put_record(<uint8_t*>PyBytes_AS_STRING(out), body, c_ts_delta, c_offset_delta, kb, vb, parts)
    return out


cdef extern from *:
    bint sub_overflow "__builtin_sub_overflow"(int64_t a, int64_t b, int64_t* out) noexcept nogil


cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject** bytes, Py_ssize_t newsize) except -1
    void Py_XDECREF(PyObject* o)
    void Py_INCREF(PyObject* o)
    Py_ssize_t Py_REFCNT(PyObject* o)
    void Py_SET_SIZE(PyObject* o, Py_ssize_t size)
    ctypedef struct PyBytesObject:
        Py_hash_t ob_shash

# A builder's first buffer holds up to this many record bytes (at most max_size): the pages
# are only touched as records arrive, and build() gives the unused tail back when more than
# half of it is unused (a nearly full buffer keeps its tail, so that reset() can reuse it).
DEF FIRST_CAPACITY_MAX = 16 * 1024 * 1024


cdef class BatchBuilder:
    """Accumulates records and builds one v2 batch (grammar at the top of `batch.py`).

    Each appended record is encoded at once into a growing buffer; the batch's
    baseTimestamp is the first record's timestamp and maxTimestamp the largest. `max_size`
    bounds the uncompressed size: `append` returns False (and adds nothing) when the
    record would cross it, unless the batch is still empty (a single oversized record is
    allowed, as Kafka producers do). `build` compresses, writes the header and the CRC.
    """

    def __cinit__(self):
        self._data = NULL
        self._shared = False
        self._len = 0
        self._cap = 0

    def __init__(self, int compression=0, *, int64_t base_offset=0, int64_t producer_id=-1,
                 int16_t producer_epoch=-1, int32_t base_sequence=-1, bint is_transactional=False,
                 bint is_control=False, int32_t partition_leader_epoch=-1, max_size=None):
        if compression & ~7:
            raise ValueError(f"compression codec {compression} out of range")
        self.compression = compression
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.max_size = max_size
        self._attributes = compression | (0x10 if is_transactional else 0) | (0x20 if is_control else 0)
        self._len = 0
        self._first_timestamp = -1
        self._max_timestamp = -1
        self._count = 0

    def __dealloc__(self):
        Py_XDECREF(self._data)

    @property
    def max_size(self):
        return None if self._max_size < 0 else self._max_size

    @max_size.setter
    def max_size(self, value):
        self._max_size = -1 if value is None else value

    @property
    def record_count(self):
        return self._count

    @property
    def estimated_size(self):
        """Size of the batch if built uncompressed (an upper bound for compressed batches in practice)."""
        return HEADER_SIZE + self._len

    cdef inline uint8_t* _records(self) noexcept:
        return <uint8_t*>PyBytes_AS_STRING(<object>self._data) + HEADER_SIZE

    cdef int _reserve(self, Py_ssize_t extra) except -1:
        """Room for `extra` more record bytes, in a buffer nobody else holds."""
        cdef Py_ssize_t cap = self._cap
        cdef object fresh
        if self._data == NULL:
            cap = 4096
            if 0 < self._max_size <= FIRST_CAPACITY_MAX:
                cap = max(cap, self._max_size - HEADER_SIZE)
        while cap < self._len + extra:
            cap *= 2
        if self._data == NULL or self._shared:
            fresh = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + cap)
            if self._len:
                memcpy(<uint8_t*>PyBytes_AS_STRING(fresh) + HEADER_SIZE, self._records(), self._len)
            Py_XDECREF(self._data)
            self._data = <PyObject*>fresh
            Py_INCREF(self._data)
            self._shared = False
        elif cap != self._cap:
            _PyBytes_Resize(&self._data, HEADER_SIZE + cap)
        self._cap = cap
        return 0

    cpdef bint append(self, int64_t timestamp, key, value, headers=()) except -1:
        """Add a record; False if it would exceed max_size and the batch is not empty."""
        cdef int64_t ts_delta
        cdef int32_t offset_delta = self._count
        cdef list parts
        cdef Py_ssize_t body, total
        if self._count == 0:
            self._first_timestamp = timestamp
            self._max_timestamp = timestamp
        if sub_overflow(timestamp, self._first_timestamp, &ts_delta):
            raise OverflowError("timestamp delta outside the signed 64-bit range")
        kb = key if (key is None or type(key) is bytes) else _as_bytes(key, "key")
        vb = value if (value is None or type(value) is bytes) else _as_bytes(value, "value")
        parts = _header_parts(headers)
        body = _record_body_size(ts_delta, offset_delta, kb, vb, parts)
        total = uvarint_size(_zigzag(body)) + body
        if self._max_size >= 0 and self._count and HEADER_SIZE + self._len + total > self._max_size:
            return False
        if self._len + total > self._cap or self._shared:
            self._reserve(total)
        _put_record(self._records() + self._len, body, ts_delta, offset_delta, kb, vb, parts)
        self._len += total
        self._count += 1
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return True

    def build(self):
        """The complete batch, CRC included. An empty builder gives an empty batch (count 0).

        Uncompressed, the batch is the builder's own buffer with the header written in
        front of the records (no copy); the builder copies it before any later append."""
        cdef object out
        cdef const uint8_t[::1] cview
        cdef Py_ssize_t n = self._len
        cdef uint8_t* p
        if self.compression != 0:
            from kafkafast.records.compression import compress
            payload = compress(self.compression, b"" if self._data == NULL else
                               PyBytes_FromStringAndSize(<const char*>self._records(), self._len))
            cview = _byte_view(payload)
            n = cview.shape[0]
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + n)
            if n:
                memcpy(<uint8_t*>PyBytes_AS_STRING(out) + HEADER_SIZE, &cview[0], n)
        else:
            if self._data == NULL or self._shared:
                self._reserve(0)  # a buffer of our own: one handed out is never written again
            if self._cap > 2 * self._len:
                _PyBytes_Resize(&self._data, HEADER_SIZE + self._len)
                self._cap = self._len
            elif self._cap != self._len:
                # The bytes object claims only the batch; its memory keeps the tail.
                Py_SET_SIZE(self._data, HEADER_SIZE + self._len)
                PyBytes_AS_STRING(<object>self._data)[HEADER_SIZE + self._len] = 0
            out = <object>self._data
            self._shared = True
        p = <uint8_t*>PyBytes_AS_STRING(out)
        put_be64(p, self.base_offset)
        put_be32(p + 8, <uint32_t>(HEADER_SIZE + n - 12))
        put_be32(p + 12, <uint32_t>self.partition_leader_epoch)
        p[16] = 2
        put_be16(p + 21, self._attributes)
        put_be32(p + 23, <uint32_t>(self._count - 1))
        put_be64(p + 27, self._first_timestamp)
        put_be64(p + 35, self._max_timestamp)
        put_be64(p + 43, self.producer_id)
        put_be16(p + 51, self.producer_epoch)
        put_be32(p + 53, <uint32_t>self.base_sequence)
        put_be32(p + 57, <uint32_t>self._count)
        put_be32(p + 17, <uint32_t>_crc32c(memoryview(out)[CRC_START:]))
        return out

    def reset(self):
        """Empties the builder for the next batch (header fields are kept). Its buffer is
        reused when no batch it built is referenced any more (True), so the next batch
        writes into memory that is already mapped; otherwise it is let go (False)."""
        self._len = 0
        self._count = 0
        self._first_timestamp = -1
        self._max_timestamp = -1
        if self._data == NULL:
            return False
        if self._shared:
            if Py_REFCNT(self._data) != 1:  # a built batch is still held: never write it again
                Py_XDECREF(self._data)
                self._data = NULL
                self._cap = 0
                self._shared = False
                return False
            Py_SET_SIZE(self._data, HEADER_SIZE + self._cap)
            (<PyBytesObject*>self._data).ob_shash = -1
            self._shared = False
        return True


def append_to_last(q, int64_t timestamp, key, value, headers, future_type):
    """The producer's per-record path: appends the record to the last batch of a partition
    queue `q` (objects with `builder` and `count`) and returns `future_type((batch, index
    in batch, timestamp))`; None, with nothing appended, when `q` is empty, its last batch
    is sealed (builder None) or full (then the producer opens a new batch)."""
    if not q:
        return None
    batch = q[len(q) - 1]  # (negative indices do not wrap around in this module)
    builder = batch.builder
    if builder is None or not (<BatchBuilder?>builder).append(timestamp, key, value, headers):
        return None
    index = batch.count
    batch.count = index + 1
    return future_type((batch, index, timestamp))


# Imported last on purpose: importing kafkafast.records.model initialises the
# kafkafast.records package, whose batch.py fetches this module's functions through
# kafkafast.native.load("records"); they must exist by then (functions look these names
# up at call time).
from kafkafast.records.model import BatchHeader, Record  # noqa: E402
