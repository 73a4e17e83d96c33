# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of `kafkafast.client._pure_arrow_decode`: v2 records decoded straight
into Arrow column buffers, with no Python object per record.

`ArrowColumns.add_records` walks the records of one (uncompressed) batch payload with the
record parser of `kafkafast._native.records` (`parse_record`: every length is checked
against the buffer before anything is read) and appends each record's fields to growing
C buffers: offset and timestamp (int64), timestamp type (int32), key and value as Arrow
binary columns (int32 offsets, one data buffer, validity bitmap) and, when asked for,
headers as the buffers of list<struct<key: string, value: binary>>. The bytes of a key or
value are copied once, from the batch payload to the column's data buffer. `take()` hands
the buffers out as `OwnedBuffer`s (buffer protocol, no copy) and starts empty ones;
`kafkafast.client.arrow` makes the Arrow arrays from them.
"""
cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from kafkafast._native.records cimport (
    MIN_RECORD_BODY,
    REC_OK,
    RecordView,
    parse_record,
    read_uvarint64,
    read_varint32,
)

from kafkafast._native import records as _codec
from kafkafast.protocol.errors import CorruptMessageError

# Millisecond timestamps that fit in int64 microseconds (timestamp_unit "us").
cdef int64_t TS_US_MAX = 9223372036854775
cdef int64_t TS_US_MIN = -9223372036854775

# Arrow binary and string columns have int32 offsets: a column's data stays below 2 GiB.
cdef Py_ssize_t MAX_COLUMN_BYTES = 2147483647

# How many buffers take() hands out (the B_* constants of arrow_decode.pxd).
globals()["N_BUFFERS"] = N_BUFFERS


# Memory of freed OwnedBuffers kept for the next columns (a reader takes columns of about
# the same size again and again): a block written again is already mapped, where fresh
# memory from malloc costs a page fault per 4 KiB on its first write. Bounded in blocks
# and bytes; small blocks go back to malloc at once.
cdef enum:
    POOL_BLOCKS = 32
    POOL_MIN_BLOCK = 16384
cdef Py_ssize_t POOL_MAX_BYTES = 64 * 1024 * 1024
cdef uint8_t* pool_data[POOL_BLOCKS]
cdef Py_ssize_t pool_cap[POOL_BLOCKS]
cdef int pool_n = 0
cdef Py_ssize_t pool_bytes = 0


cdef uint8_t* pool_take(Py_ssize_t need, Py_ssize_t* cap) noexcept:
    """The smallest pooled block of at least `need` bytes (its size in cap), or NULL."""
    global pool_n, pool_bytes
    cdef int i, best = -1
    cdef uint8_t* data
    for i in range(pool_n):
        if pool_cap[i] >= need and (best < 0 or pool_cap[i] < pool_cap[best]):
            best = i
    if best < 0:
        return NULL
    data = pool_data[best]
    cap[0] = pool_cap[best]
    pool_bytes -= pool_cap[best]
    pool_n -= 1
    pool_data[best] = pool_data[pool_n]
    pool_cap[best] = pool_cap[pool_n]
    return data


cdef void pool_give(uint8_t* data, Py_ssize_t cap) noexcept:
    """Keeps `data` for pool_take, or frees it when the pool is full or the block small."""
    global pool_n, pool_bytes
    if data == NULL:
        return
    if cap < POOL_MIN_BLOCK or pool_n >= POOL_BLOCKS or pool_bytes + cap > POOL_MAX_BYTES:
        PyMem_Free(data)
        return
    pool_data[pool_n] = data
    pool_cap[pool_n] = cap
    pool_n += 1
    pool_bytes += cap


cdef int buf_reserve(Buf* b, Py_ssize_t extra) except -1:
    """Room for `extra` more bytes after b.size (a buffer without memory first looks in
    the pool); capacity doubles."""
    cdef Py_ssize_t need = b.size + extra
    cdef Py_ssize_t cap = b.cap
    cdef uint8_t* data
    if need <= cap:
        return 0
    if b.data == NULL and need >= POOL_MIN_BLOCK:
        data = pool_take(need, &cap)
        if data != NULL:
            b.data = data
            b.cap = cap
            return 0
    if cap < 64:
        cap = 64
    while cap < need:
        cap *= 2
    data = <uint8_t*>PyMem_Realloc(b.data, cap)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.cap = cap
    return 0


cdef inline int bits_reserve(Buf* b, Py_ssize_t nbits) except -1:
    """A validity bitmap of at least `nbits` bits, new bytes zero (null)."""
    cdef Py_ssize_t size = (nbits + 7) >> 3
    if size > b.size:
        buf_reserve(b, size - b.size)
        memset(b.data + b.size, 0, size - b.size)
        b.size = size
    return 0


cdef inline void put_i64(Buf* b, int64_t v) noexcept nogil:
    memcpy(b.data + b.size, &v, 8)
    b.size += 8


cdef inline void put_i32(Buf* b, int32_t v) noexcept nogil:
    memcpy(b.data + b.size, &v, 4)
    b.size += 4


cdef inline bint is_ascii(const uint8_t* p, int32_t n) noexcept nogil:
    cdef int32_t i
    for i in range(n):
        if p[i] & 0x80:
            return False
    return True


cdef int check_utf8(const uint8_t* p, int32_t n) except -1:
    if is_ascii(p, n):
        return 0
    try:
        PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        raise CorruptMessageError("header key is not UTF-8") from None
    return 0


cdef inline int put_binary(Buf* offsets, Buf* data, Buf* valid, Py_ssize_t index, const uint8_t* p,
                           int32_t length) noexcept nogil:
    """Appends one value (p NULL: null) to a binary column whose buffers have room for it
    (valid NULL: a column without a bitmap, never null); 1 if it was null."""
    if p == NULL:
        put_i32(offsets, <int32_t>data.size)
        return 1
    memcpy(data.data + data.size, p, length)
    data.size += length
    put_i32(offsets, <int32_t>data.size)
    if valid != NULL:
        valid.data[index >> 3] |= <uint8_t>(1 << (index & 7))
    return 0


cdef inline const uint8_t* _ptr(bytes b):
    return NULL if b is None else <const uint8_t*>PyBytes_AS_STRING(b)


cdef inline int32_t _len(bytes b):
    return 0 if b is None else <int32_t>PyBytes_GET_SIZE(b)


cdef inline Py_ssize_t varint32(const uint8_t* p, const uint8_t* end, int32_t* out) noexcept nogil:
    """read_varint32 with its one- to three-byte cases inline (offset deltas of batches up
    to a million records); longer ones are read by read_varint32."""
    cdef uint32_t v
    if end - p >= 3:
        v = p[0]
        if v < 0x80:
            out[0] = <int32_t>(v >> 1) ^ -<int32_t>(v & 1)
            return 1
        v = (v & 0x7F) | (<uint32_t>(p[1] & 0x7F) << 7)
        if p[1] < 0x80:
            out[0] = <int32_t>(v >> 1) ^ -<int32_t>(v & 1)
            return 2
        if p[2] < 0x80:
            v |= <uint32_t>p[2] << 14
            out[0] = <int32_t>(v >> 1) ^ -<int32_t>(v & 1)
            return 3
    return read_varint32(p, end, out)


cdef inline Py_ssize_t uvarint64(const uint8_t* p, const uint8_t* end, uint64_t* out) noexcept nogil:
    """read_uvarint64 with its one- to three-byte cases inline."""
    cdef uint64_t v
    if end - p >= 3:
        v = p[0]
        if v < 0x80:
            out[0] = v
            return 1
        v = (v & 0x7F) | (<uint64_t>(p[1] & 0x7F) << 7)
        if p[1] < 0x80:
            out[0] = v
            return 2
        if p[2] < 0x80:
            out[0] = v | (<uint64_t>p[2] << 14)
            return 3
    return read_uvarint64(p, end, out)


cdef inline bint plain_field(const uint8_t** pp, const uint8_t* end, int32_t* length) noexcept nogil:
    cdef Py_ssize_t used = varint32(pp[0], end, length)
    if used <= 0:
        return False
    pp[0] += used
    if length[0] != -1:
        if length[0] < 0 or length[0] > end - pp[0]:
            return False
        pp[0] += length[0]
    return True


cdef inline int parse_plain_record(const uint8_t* p, const uint8_t* buf_end, RecordView* r) noexcept nogil:
    """The common case of parse_record, inline: a well-formed record without headers.
    0 when it is one (r filled as parse_record fills it), else -1 and the caller asks
    parse_record, which accepts or rejects the record in full."""
    cdef int32_t length
    cdef uint64_t ts_raw
    cdef const uint8_t* end
    cdef Py_ssize_t used = varint32(p, buf_end, &length)
    if used <= 0:
        return -1
    p += used
    if length < MIN_RECORD_BODY or length > buf_end - p:
        return -1
    end = p + length
    r.attributes = p[0]
    p += 1
    used = uvarint64(p, end, &ts_raw)
    if used <= 0:
        return -1
    p += used
    r.timestamp_delta = <int64_t>((ts_raw >> 1) ^ (~(ts_raw & 1) + 1))
    used = varint32(p, end, &r.offset_delta)
    if used <= 0:
        return -1
    p += used
    if not plain_field(&p, end, &r.key_length):
        return -1
    r.key = NULL if r.key_length == -1 else p - r.key_length
    if not plain_field(&p, end, &r.value_length):
        return -1
    r.value = NULL if r.value_length == -1 else p - r.value_length
    if p >= end or p[0] != 0:  # header count 0 (one byte) ends the record
        return -1
    p += 1
    if p != end:
        return -1
    r.header_count = 0
    r.headers = p
    r.end = end
    return 0


@cython.final
cdef class OwnedBuffer:
    """Memory filled by ArrowColumns, exported read-only through the buffer protocol (what
    pyarrow.py_buffer wraps without copying); freed when the last user lets go."""

    def __len__(self):
        return self.size

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, <void*>self.data, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dealloc__(self):
        pool_give(self.data, self.cap)


cdef int check_header_keys(const RecordView* r) except -1:
    """CorruptMessageError unless every header key of the record is UTF-8 (checked for
    every record, as the record codec does, whether headers are kept or not)."""
    cdef const uint8_t* p = r.headers
    cdef int32_t j, klen = 0, vlen = 0
    for j in range(r.header_count):
        p += read_varint32(p, r.end, &klen)
        check_utf8(p, klen)
        p += klen
        p += read_varint32(p, r.end, &vlen)
        if vlen > 0:
            p += vlen
    return 0


cdef class ArrowColumns:
    """The Arrow buffers of the records added since the last take()."""

    def __cinit__(self, bint include_headers=True, str timestamp_unit="ms"):
        if timestamp_unit not in ("ms", "us"):
            raise ValueError(f"timestamp_unit must be 'ms' or 'us', not {timestamp_unit!r}")
        self.include_headers = include_headers
        self.timestamp_unit = timestamp_unit
        self.ts_scale = 1000 if timestamp_unit == "us" else 1
        memset(self.bufs, 0, sizeof(self.bufs))
        memset(self.hint, 0, sizeof(self.hint))
        self._start()

    def __dealloc__(self):
        cdef int i
        for i in range(N_BUFFERS):
            pool_give(self.bufs[i].data, self.bufs[i].cap)

    cdef int _start(self) except -1:
        """Empty columns: every buffer allocated (as large as it was at the last take(), so
        columns of similar batches do not grow by steps), every offsets buffer holding its
        first 0."""
        cdef int i
        for i in range(N_BUFFERS):
            buf_reserve(&self.bufs[i], max(64, self.hint[i]))
        for i in (B_KEY_OFFSETS, B_VALUE_OFFSETS, B_HEADERS, B_HKEY_OFFSETS, B_HVALUE_OFFSETS):
            put_i32(&self.bufs[i], 0)
        self.n = self.nh = 0
        self.key_nulls = self.value_nulls = self.hvalue_nulls = 0
        return 0

    def __len__(self):
        return self.n

    @property
    def data_bytes(self):
        """Bytes of keys, values and headers held (the variable-size part)."""
        return (self.bufs[B_KEY_DATA].size + self.bufs[B_VALUE_DATA].size + self.bufs[B_HKEY_DATA].size
                + self.bufs[B_HVALUE_DATA].size)

    cdef int _room_for_data(self, Py_ssize_t size) except -1:
        """Room for `size` more bytes in every data buffer (a batch payload's bytes bound
        the bytes of its keys, values and headers)."""
        cdef int i
        for i in (B_KEY_DATA, B_VALUE_DATA, B_HKEY_DATA, B_HVALUE_DATA):
            if size > MAX_COLUMN_BYTES - self.bufs[i].size:
                raise OverflowError("an Arrow binary column would exceed 2 GiB; take() the columns sooner")
            if i == B_KEY_DATA or i == B_VALUE_DATA or self.include_headers:
                buf_reserve(&self.bufs[i], size)
        return 0

    cdef int _add_headers(self, const RecordView* r) except -1:
        """Appends the headers of a record parse_record accepted (lengths all checked)."""
        cdef const uint8_t* p = r.headers
        cdef int32_t j, klen = 0, vlen = 0
        cdef Buf* b = self.bufs
        buf_reserve(&b[B_HKEY_OFFSETS], 4 * r.header_count)
        buf_reserve(&b[B_HVALUE_OFFSETS], 4 * r.header_count)
        bits_reserve(&b[B_HVALUE_VALID], self.nh + r.header_count)
        for j in range(r.header_count):
            p += read_varint32(p, r.end, &klen)
            put_binary(&b[B_HKEY_OFFSETS], &b[B_HKEY_DATA], NULL, self.nh, p, klen)
            p += klen
            p += read_varint32(p, r.end, &vlen)
            self.hvalue_nulls += put_binary(&b[B_HVALUE_OFFSETS], &b[B_HVALUE_DATA], &b[B_HVALUE_VALID], self.nh,
                                            NULL if vlen < 0 else p, vlen)
            if vlen > 0:
                p += vlen
            self.nh += 1
        return 0

    def add_records(self, payload, Py_ssize_t count, int64_t base_offset, int64_t first_timestamp,
                    int64_t log_append_time, int64_t start, int64_t end):
        """Adds the records with offsets in [start, end) (end < 0: no upper bound) of one v2
        batch's uncompressed records payload; returns how many. Same arguments and
        semantics as `decode_consumer_records`; malformed records raise its
        CorruptMessageError (the records before the bad one stay added)."""
        if count < 0:
            raise CorruptMessageError(f"negative record count {count}")
        cdef const uint8_t[::1] view = payload
        cdef Py_ssize_t size = view.shape[0]
        cdef const uint8_t* p = &view[0] if size > 0 else NULL
        cdef const uint8_t* buf_end = p + size
        cdef Py_ssize_t i, room, added = 0
        cdef int status
        cdef int64_t offset
        cdef int32_t ts_type = 1 if log_append_time >= 0 else 0
        cdef int64_t ts, scale = self.ts_scale
        cdef RecordView r
        cdef Buf* b = self.bufs
        # Room for every record up front, sized by the payload and not by the batch's count
        # field: a record takes at least 7 bytes, so a larger count fails parsing before.
        room = min(count, size // 7)
        buf_reserve(&b[B_OFFSET], 8 * room)
        buf_reserve(&b[B_TIMESTAMP], 8 * room)
        buf_reserve(&b[B_TS_TYPE], 4 * room)
        buf_reserve(&b[B_KEY_OFFSETS], 4 * room)
        buf_reserve(&b[B_VALUE_OFFSETS], 4 * room)
        buf_reserve(&b[B_HEADERS], 4 * room)
        bits_reserve(&b[B_KEY_VALID], self.n + room)
        bits_reserve(&b[B_VALUE_VALID], self.n + room)
        self._room_for_data(size)
        for i in range(count):
            if parse_plain_record(p, buf_end, &r) != 0:
                status = parse_record(p, buf_end, &r)
                if status != REC_OK:
                    _raise_record_error(payload, count, base_offset, first_timestamp, log_append_time, start, end)
                if r.header_count:
                    check_header_keys(&r)
            if i >= room:  # unreachable by the argument above; kept so no write can pass the room
                raise CorruptMessageError("more records than the payload can hold")
            p = r.end
            offset = base_offset + r.offset_delta
            if 0 <= end <= offset:
                break
            if offset < start:
                continue
            ts = log_append_time if ts_type else first_timestamp + r.timestamp_delta
            if scale != 1:
                if ts > TS_US_MAX or ts < TS_US_MIN:
                    raise OverflowError(f"timestamp {ts} ms of offset {offset} does not fit in int64 microseconds")
                ts *= scale
            if self.include_headers:
                if r.header_count:
                    self._add_headers(&r)
                put_i32(&b[B_HEADERS], <int32_t>self.nh)
            put_i64(&b[B_OFFSET], offset)
            put_i64(&b[B_TIMESTAMP], ts)
            put_i32(&b[B_TS_TYPE], ts_type)
            self.key_nulls += put_binary(&b[B_KEY_OFFSETS], &b[B_KEY_DATA], &b[B_KEY_VALID], self.n, r.key,
                                         r.key_length)
            self.value_nulls += put_binary(&b[B_VALUE_OFFSETS], &b[B_VALUE_DATA], &b[B_VALUE_VALID], self.n, r.value,
                                           r.value_length)
            self.n += 1
            added += 1
        return added

    def add_record(self, int64_t offset, int64_t timestamp, int32_t timestamp_type, key, value, headers):
        """Adds one record given as Python objects (legacy v0/v1 entries)."""
        cdef Buf* b = self.bufs
        if self.ts_scale != 1:
            if timestamp > TS_US_MAX or timestamp < TS_US_MIN:
                raise OverflowError(f"timestamp {timestamp} ms of offset {offset} does not fit in int64 microseconds")
            timestamp *= self.ts_scale
        cdef bytes kb = None if key is None else bytes(key)
        cdef bytes vb = None if value is None else bytes(value)
        cdef bytes hk, hv
        cdef Py_ssize_t size = (0 if kb is None else len(kb)) + (0 if vb is None else len(vb))
        encoded = []
        if self.include_headers:
            for k, v in headers:
                hk = k.encode("utf-8") if isinstance(k, str) else bytes(k)
                check_utf8(<const uint8_t*>PyBytes_AS_STRING(hk), <int32_t>PyBytes_GET_SIZE(hk))
                hv = None if v is None else bytes(v)
                size += len(hk) + (0 if hv is None else len(hv))
                encoded.append((hk, hv))
        self._room_for_data(size)
        for i in (B_KEY_OFFSETS, B_VALUE_OFFSETS, B_HEADERS, B_TS_TYPE):
            buf_reserve(&b[i], 4)
        buf_reserve(&b[B_OFFSET], 8)
        buf_reserve(&b[B_TIMESTAMP], 8)
        buf_reserve(&b[B_HKEY_OFFSETS], 4 * len(encoded))
        buf_reserve(&b[B_HVALUE_OFFSETS], 4 * len(encoded))
        bits_reserve(&b[B_HVALUE_VALID], self.nh + len(encoded))
        bits_reserve(&b[B_KEY_VALID], self.n + 1)
        bits_reserve(&b[B_VALUE_VALID], self.n + 1)
        for hk, hv in encoded:
            put_binary(&b[B_HKEY_OFFSETS], &b[B_HKEY_DATA], NULL, self.nh, _ptr(hk), _len(hk))
            self.hvalue_nulls += put_binary(&b[B_HVALUE_OFFSETS], &b[B_HVALUE_DATA], &b[B_HVALUE_VALID], self.nh,
                                            _ptr(hv), _len(hv))
            self.nh += 1
        if self.include_headers:
            put_i32(&b[B_HEADERS], <int32_t>self.nh)
        put_i64(&b[B_OFFSET], offset)
        put_i64(&b[B_TIMESTAMP], timestamp)
        put_i32(&b[B_TS_TYPE], timestamp_type)
        self.key_nulls += put_binary(&b[B_KEY_OFFSETS], &b[B_KEY_DATA], &b[B_KEY_VALID], self.n, _ptr(kb), _len(kb))
        self.value_nulls += put_binary(&b[B_VALUE_OFFSETS], &b[B_VALUE_DATA], &b[B_VALUE_VALID], self.n, _ptr(vb),
                                       _len(vb))
        self.n += 1

    def take(self):
        """(records, header entries, key nulls, value nulls, header value nulls, buffers):
        the columns so far, handed out without copying; the columns start empty again.
        `buffers` are the N_BUFFERS buffers in B_* order (header buffers hold only their
        first offset when headers are not included)."""
        cdef int i
        cdef OwnedBuffer out
        buffers = []
        for i in range(N_BUFFERS):
            out = OwnedBuffer.__new__(OwnedBuffer)
            out.data = self.bufs[i].data
            out.size = self.hint[i] = self.bufs[i].size
            out.cap = self.bufs[i].cap
            self.bufs[i].data = NULL
            self.bufs[i].size = self.bufs[i].cap = 0
            buffers.append(out)
        result = (self.n, self.nh, self.key_nulls, self.value_nulls, self.hvalue_nulls, tuple(buffers))
        self._start()
        return result


cdef int _raise_record_error(payload, Py_ssize_t count, int64_t base_offset, int64_t first_timestamp,
                             int64_t log_append_time, int64_t start, int64_t end) except -1:
    """Raises the CorruptMessageError the record codec raises for this payload (one wording
    of every record error)."""
    _codec.decode_consumer_records(payload, count, base_offset, first_timestamp, log_append_time, "", 0, start, end, [])
    raise CorruptMessageError("malformed record")
