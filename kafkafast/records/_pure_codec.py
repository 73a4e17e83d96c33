"""Pure-Python twin of `kafkafast._native.records` (built from `cython_ext/records.pyx`).

Both twins expose the same functions with the same semantics and exceptions; which one
runs is chosen once by `kafkafast.native.load("records")`. The batch grammar they parse is
written at the top of `kafkafast/records/batch.py`.

Buffers may be bytes, bytearray, memoryview (including slices) or mmap.mmap.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from crc32c import crc32c as _crc32c

from kafkafast.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from kafkafast.protocol.primitives import DecodeError
from kafkafast.records.compression import compress
from kafkafast.records.model import BatchHeader, Record

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

HEADER_SIZE = 61
MIN_BATCH_LENGTH = 49
CRC_START = 21
MAX_CODEC = 4
# Smallest record body: attributes, timestampDelta, offsetDelta, keyLength, valueLength,
# headerCount -- one byte each.
MIN_RECORD_BODY = 6

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _view(buf: object) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)  # type: ignore[arg-type]
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


# ---------------------------------------------------------------------------- headers


def _header_error(mv: memoryview, pos: int, avail: int) -> Exception | None:
    """The exception a bad header at `pos` deserves, or None if the header is sane."""
    if avail >= 17 and mv[pos + 16] in (0, 1):
        return UnsupportedForMessageFormatError(
            f"message format v{mv[pos + 16]} at position {pos}; only v2 record batches are accepted"
        )
    if avail < HEADER_SIZE:
        return CorruptMessageError(f"truncated batch header at position {pos}: {avail} of 61 bytes")
    batch_length = _I32.unpack_from(mv, pos + 8)[0]
    if batch_length < MIN_BATCH_LENGTH:
        return CorruptMessageError(f"batch length {batch_length} at position {pos} is below 49")
    if mv[pos + 16] != 2:
        return CorruptMessageError(f"unknown magic {mv[pos + 16]} at position {pos}")
    return None


def _header(mv: memoryview, pos: int) -> BatchHeader:
    return BatchHeader(*_HEADER.unpack_from(mv, pos))


def read_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Decode the v2 batch header at `pos` (checks length and magic, not the CRC)."""
    mv = _view(buf)
    if pos < 0:
        raise ValueError("pos must be >= 0")
    avail = len(mv) - pos
    err = _header_error(mv, pos, avail if avail > 0 else 0)
    if err is not None:
        raise err
    return _header(mv, pos)


def batch_crc_ok(buf: Buffer, pos: int, size: int) -> bool:
    """Whether the stored CRC32C of the batch at [pos, pos+size) matches its bytes [pos+21, pos+size)."""
    mv = _view(buf)
    if pos < 0 or size < CRC_START or size > len(mv) - pos:
        return False
    return _crc32c(mv[pos + CRC_START : pos + size]) == _U32.unpack_from(mv, pos + 17)[0]


# ---------------------------------------------------------------------------- varints


def _uvarint(mv: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Unsigned LEB128 of at most 10 bytes / 64 bits."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        b = mv[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise DecodeError("varint too long")
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _varint32(mv: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint of at most 5 bytes (Kafka's ByteUtils.readVarint); raises DecodeError."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        b = mv[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise DecodeError("varint too long")
    result &= 0xFFFFFFFF
    return (result >> 1) ^ -(result & 1), pos


def decode_uvarint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos`; DecodeError on truncation/overlong."""
    if pos < 0:
        raise ValueError("pos must be >= 0")
    mv = _view(buf)
    return _uvarint(mv, pos, len(mv))


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """(value, position after it) of the zigzag int64 varint at `pos`."""
    if pos < 0:
        raise ValueError("pos must be >= 0")
    mv = _view(buf)
    v, pos = _uvarint(mv, pos, len(mv))
    return (v >> 1) ^ -(v & 1), pos


def _put_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_uvarint(n: int) -> bytes:
    """Unsigned LEB128 of 0 <= n < 2^64."""
    if not 0 <= n <= UINT64_MAX:
        raise ValueError(f"{n} is outside the unsigned 64-bit range")
    out = bytearray()
    _put_uvarint(out, n)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag varint of an int64."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"{n} is outside the signed 64-bit range")
    out = bytearray()
    _put_uvarint(out, (n << 1) ^ (n >> 63))
    return bytes(out)


# ---------------------------------------------------------------------------- validation


def _walk_records(mv: memoryview, pos: int, end: int, expected: int, batch_pos: int) -> None:
    count = 0
    while pos < end:
        try:
            length, pos = _varint32(mv, pos, end)
        except DecodeError:
            raise InvalidRecordError(f"batch at {batch_pos}: bad record length varint") from None
        if length < MIN_RECORD_BODY or length > end - pos:
            raise InvalidRecordError(f"batch at {batch_pos}: record length {length} does not fit the batch")
        pos += length
        count += 1
        if count > expected:
            raise InvalidRecordError(f"batch at {batch_pos}: more records than recordsCount {expected}")
    if count != expected:
        raise InvalidRecordError(f"batch at {batch_pos}: {count} records, recordsCount says {expected}")


def validate_batches(buf: Buffer, max_batch_size: int) -> list[BatchHeader]:
    """Validate a producer's record set: exactly a sequence of whole, sane v2 batches.

    Raises CorruptMessageError, MessageTooLargeError, UnsupportedCompressionTypeError,
    InvalidRecordError or UnsupportedForMessageFormatError (see `batch.py`).
    """
    mv = _view(buf)
    n = len(mv)
    if n == 0:
        raise InvalidRecordError("empty record set")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < n:
        err = _header_error(mv, pos, n - pos)
        if err is not None:
            raise err
        h = _header(mv, pos)
        size = h.batch_length + 12
        if size > n - pos:
            raise CorruptMessageError(f"batch at {pos} claims {size} bytes, {n - pos} present")
        if size > max_batch_size:
            raise MessageTooLargeError(f"batch at {pos} is {size} bytes, limit {max_batch_size}")
        if _crc32c(mv[pos + CRC_START : pos + size]) != h.crc:
            raise CorruptMessageError(f"batch at {pos}: CRC32C mismatch")
        codec = h.attributes & 7
        if codec > MAX_CODEC:
            raise UnsupportedCompressionTypeError(f"batch at {pos}: compression codec {codec}")
        if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
            raise InvalidRecordError(
                f"batch at {pos}: recordsCount {h.records_count}, lastOffsetDelta {h.last_offset_delta}"
            )
        if codec == 0:
            _walk_records(mv, pos + HEADER_SIZE, pos + size, h.records_count, pos)
        headers.append(h)
        pos += size
    return headers


# States of validate_record_stream: where in a record (see batch.py's grammar) the next
# byte belongs. The compiled twin uses the same numbers and messages.
_S_LENGTH, _S_ATTRIBUTES, _S_TIMESTAMP, _S_OFFSET, _S_KEY, _S_VALUE, _S_HEADERS, _S_HKEY, _S_HVALUE, _S_SKIP, \
    _S_END = range(11)
# Where a length-prefixed field leads once its bytes are skipped (header value: see below).
_AFTER_FIELD = {_S_KEY: _S_VALUE, _S_VALUE: _S_HEADERS, _S_HKEY: _S_HVALUE}


def validate_record_stream(chunks: Iterable[Buffer], count: int, max_bytes: int,
                           timestamps: bool = False) -> int | tuple[int, int, int]:
    """Check decompressed v2 records arriving in pieces (`compression.iter_decompressed`):
    exactly `count` well-formed records (every length inside its record, the fields filling
    it), record i with offsetDelta i, nothing after the last. Nothing is buffered: each
    piece is walked as it comes, a value longer than a piece is skipped across pieces.

    Returns the decompressed size; with `timestamps`, (size, the smallest timestampDelta, the
    largest) of the records. Raises CorruptMessageError for malformed records and
    MessageTooLargeError as soon as more than `max_bytes` arrived (the iterator is not
    pulled further, so a decompression bomb costs at most one piece beyond the bound).
    """
    state = _S_LENGTH
    acc = shift = 0
    remaining = skip = 0  # bytes left in the record; bytes left to skip in a field
    after_skip = _S_LENGTH
    seen = headers_left = total = 0
    ts_min = ts_max = 0
    for chunk in chunks:
        mv = _view(chunk)
        n = len(mv)
        total += n
        if total > max_bytes:
            raise MessageTooLargeError(f"records decompress to more than {max_bytes} bytes")
        i = 0
        while i < n or state == _S_END:
            if state == _S_END:
                if remaining:
                    raise CorruptMessageError(f"record {seen}: fields end {remaining} bytes before its length")
                seen += 1
                state = _S_LENGTH
                continue
            if state == _S_SKIP:
                step = skip if skip < n - i else n - i
                i += step
                skip -= step
                if not skip:
                    state = after_skip
                continue
            if state == _S_LENGTH:
                if seen == count and not shift:
                    raise CorruptMessageError(f"more records than recordsCount {count}")
            elif not remaining:
                raise CorruptMessageError(f"record {seen}: fields overrun its length")
            else:
                remaining -= 1
            b = mv[i]
            i += 1
            if state == _S_ATTRIBUTES:
                state = _S_TIMESTAMP
                continue
            acc |= (b & 0x7F) << shift
            if b & 0x80:
                shift += 7
                if shift > (63 if state == _S_TIMESTAMP else 28):
                    raise CorruptMessageError(f"record {seen}: varint too long")
                continue
            value = acc & 0xFFFFFFFF
            value = (value >> 1) ^ -(value & 1)  # zigzag int32 (the varlong timestamp: below)
            if state != _S_TIMESTAMP:
                acc = shift = 0
            if state == _S_LENGTH:
                if value < MIN_RECORD_BODY:
                    raise CorruptMessageError(f"record {seen}: length {value}")
                remaining = value
                state = _S_ATTRIBUTES
            elif state == _S_TIMESTAMP:
                delta = acc & 0xFFFFFFFFFFFFFFFF
                delta = (delta >> 1) ^ -(delta & 1)  # zigzag int64: the varlong of the timestamp delta
                if seen == 0 or delta < ts_min:
                    ts_min = delta
                if seen == 0 or delta > ts_max:
                    ts_max = delta
                acc = shift = 0
                state = _S_OFFSET
            elif state == _S_OFFSET:
                if value != seen:
                    raise CorruptMessageError(f"record {seen}: offset delta {value}")
                state = _S_KEY
            elif state == _S_HEADERS:
                if value < 0:
                    raise CorruptMessageError(f"record {seen}: header count {value}")
                headers_left = value
                state = _S_HKEY if value else _S_END
            else:  # a field's length: key, value, header key or header value
                if value < -1 or (value == -1 and state == _S_HKEY):
                    raise CorruptMessageError(f"record {seen}: field length {value}")
                if state == _S_HVALUE:
                    headers_left -= 1
                    nxt = _S_HKEY if headers_left else _S_END
                else:
                    nxt = _AFTER_FIELD[state]
                if value > 0:
                    if value > remaining:
                        raise CorruptMessageError(f"record {seen}: fields overrun its length")
                    remaining -= value
                    skip = value
                    after_skip = nxt
                    state = _S_SKIP
                else:
                    state = nxt
    if state == _S_END:
        if remaining:
            raise CorruptMessageError(f"record {seen}: fields end {remaining} bytes before its length")
        seen += 1
        state = _S_LENGTH
    if state != _S_LENGTH or shift:
        raise CorruptMessageError(f"record {seen}: truncated")
    if seen != count:
        raise CorruptMessageError(f"{seen} records, recordsCount says {count}")
    if timestamps:
        return total, ts_min, ts_max
    return total


def assign_offsets(buf: Buffer, base_offset: int, leader_epoch: int, log_append_time: int = -1) -> int:
    """Write running baseOffsets and the partitionLeaderEpoch into validated batches in place.

    With log_append_time >= 0 also set the LogAppendTime attribute bit, write maxTimestamp
    and recompute the CRC. Returns the offset after the last record.
    """
    if not INT64_MIN <= base_offset <= INT64_MAX or not INT64_MIN <= log_append_time <= INT64_MAX:
        raise OverflowError("offset or timestamp outside the signed 64-bit range")
    if not INT32_MIN <= leader_epoch <= INT32_MAX:
        raise OverflowError("leader epoch outside the signed 32-bit range")
    mv = _view(buf)
    if mv.readonly:
        raise TypeError("assign_offsets needs a writable buffer")
    n = len(mv)
    pos = 0
    offset = base_offset
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptMessageError(f"truncated batch header at position {pos}")
        batch_length = _I32.unpack_from(mv, pos + 8)[0]
        size = batch_length + 12
        if batch_length < MIN_BATCH_LENGTH or size > n - pos:
            raise CorruptMessageError(f"bad batch length {batch_length} at position {pos}")
        _I64.pack_into(mv, pos, offset)
        _I32.pack_into(mv, pos + 12, leader_epoch)
        if log_append_time >= 0:
            attributes = _I16.unpack_from(mv, pos + 21)[0] | 0x08
            _I16.pack_into(mv, pos + 21, attributes)
            _I64.pack_into(mv, pos + 35, log_append_time)
            _U32.pack_into(mv, pos + 17, _crc32c(mv[pos + CRC_START : pos + size]))
        offset += _I32.unpack_from(mv, pos + 23)[0] + 1
        if offset > INT64_MAX:
            raise OverflowError("offset outside the signed 64-bit range")
        pos += size
    return offset


def scan_valid_prefix(buf: Buffer, start_pos: int = 0) -> tuple[int, list[tuple[int, BatchHeader]]]:
    """Recovery scan: whole batches with sane headers and good CRCs from `start_pos` on.

    Returns (valid bytes counted from start_pos, [(position, header), ...]); stops silently
    at the first truncated, insane or CRC-failing batch.
    """
    mv = _view(buf)
    n = len(mv)
    if start_pos < 0 or start_pos > n:
        raise ValueError(f"start_pos {start_pos} outside the buffer of {n} bytes")
    pos = start_pos
    found: list[tuple[int, BatchHeader]] = []
    while (h := _whole_batch(mv, pos, n)) is not None:
        found.append((pos, h))
        pos += h.batch_length + 12
    return pos - start_pos, found


def _whole_batch(mv: memoryview, pos: int, n: int) -> BatchHeader | None:
    """The header of the batch at `pos` if the batch is whole, with a sane header and a good
    CRC; None if not (where a scan stops)."""
    if n - pos < HEADER_SIZE or _header_error(mv, pos, n - pos) is not None:
        return None
    h = _header(mv, pos)
    size = h.batch_length + 12
    if size > n - pos or _crc32c(mv[pos + CRC_START : pos + size]) != h.crc:
        return None
    return h


def scan_follower_batches(
    buf: Buffer, log_end_offset: int, latest_epoch: int
) -> tuple[int, int, list[tuple[int, int, int, int]], list[tuple[int, ...]], list[tuple[int, int]]]:
    """The pure twin of `scan_follower_batches` in cython_ext/records.pyx: the same checks, the
    same skip and stop, the same five-part answer (its docstring says what each part holds)."""
    mv = _view(buf)
    n = len(mv)
    pos = start = 0
    infos: list[tuple[int, int, int, int]] = []
    producers: list[tuple[int, ...]] = []
    epochs: list[tuple[int, int]] = []
    while (h := _whole_batch(mv, pos, n)) is not None:
        size = h.batch_length + 12
        if h.base_offset < 0 or h.last_offset_delta < 0 or h.base_offset > INT64_MAX - 1 - h.last_offset_delta:
            break  # no offsets a leader assigns
        last = h.base_offset + h.last_offset_delta
        if not infos and last < log_end_offset:
            pos = start = pos + size
            continue
        infos.append((h.base_offset, last + 1, h.max_timestamp, size))
        if h.producer_id >= 0:
            producers.append((pos - start, h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                              h.base_offset, last, h.max_timestamp, h.attributes))
        if h.partition_leader_epoch > latest_epoch:
            latest_epoch = h.partition_leader_epoch
            epochs.append((latest_epoch, h.base_offset))
        pos += size
    return start, pos if infos else start, infos, producers, epochs


# ---------------------------------------------------------------------------- records


def _bytes_field(mv: memoryview, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    try:
        length, pos = _varint32(mv, pos, end)
    except DecodeError:
        raise CorruptMessageError(f"bad {what} length") from None
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise CorruptMessageError(f"{what} length {length} does not fit the record")
    return bytes(mv[pos : pos + length]), pos + length


def _decode_record(mv: memoryview, pos: int, n: int) -> tuple[int, int, int, bytes | None, bytes | None, list, int]:
    """(attributes, timestampDelta, offsetDelta, key, value, headers, next position) of the
    record at `pos`; CorruptMessageError when malformed."""
    try:
        length, pos = _varint32(mv, pos, n)
        if length < MIN_RECORD_BODY or length > n - pos:
            raise CorruptMessageError(f"record length {length} does not fit the batch")
        end = pos + length
        attributes = mv[pos]
        pos += 1
        ts_delta, pos = _uvarint(mv, pos, end)
        ts_delta = (ts_delta >> 1) ^ -(ts_delta & 1)
        offset_delta, pos = _varint32(mv, pos, end)
        key, pos = _bytes_field(mv, pos, end, "key")
        value, pos = _bytes_field(mv, pos, end, "value")
        n_headers, pos = _varint32(mv, pos, end)
        if n_headers < 0:
            raise CorruptMessageError(f"negative header count {n_headers}")
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            hkey, pos = _bytes_field(mv, pos, end, "header key")
            if hkey is None:
                raise CorruptMessageError("null header key")
            hvalue, pos = _bytes_field(mv, pos, end, "header value")
            try:
                hkey_str = hkey.decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptMessageError("header key is not UTF-8") from None
            headers.append((hkey_str, hvalue))
        if pos != end:
            raise CorruptMessageError("record fields do not fill the record length")
    except DecodeError:
        raise CorruptMessageError("truncated or overlong varint in record") from None
    return attributes, ts_delta, offset_delta, key, value, headers, end


def decode_records(buf: Buffer, count: int, base_offset: int, first_timestamp: int) -> list[Record]:
    """Decode `count` v2 records from uncompressed record bytes; offsets/timestamps made absolute.

    Bytes after the `count`-th record are ignored. Malformed records raise CorruptMessageError.
    """
    if count < 0:
        raise CorruptMessageError(f"negative record count {count}")
    mv = _view(buf)
    n = len(mv)
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        attributes, ts_delta, offset_delta, key, value, headers, pos = _decode_record(mv, pos, n)
        records.append(
            Record(base_offset + offset_delta, first_timestamp + ts_delta, key, value, headers, attributes)
        )
    return records


class ConsumerRecord:
    """One record read from a partition: the client's record type.

    Built by `decode_consumer_records` straight from the batch bytes (the key and value
    are the only copies of the payload). Attributes: topic, partition, offset, timestamp,
    timestamp_type (0 CreateTime, 1 LogAppendTime), key, value, headers.
    """

    __slots__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int, timestamp_type: int,
                 key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return (f"ConsumerRecord({self.topic!r}, {self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (ConsumerRecord, tuple(getattr(self, s) for s in self.__slots__))


def decode_consumer_records(
    buf: Buffer, count: int, base_offset: int, first_timestamp: int, log_append_time: int, topic: str,
    partition: int, start: int, end: int, out: list[ConsumerRecord],
) -> int:
    """Decode `count` v2 records like `decode_records`, appending a `ConsumerRecord` to `out`
    for each whose offset is in [start, end) (end < 0: no upper bound); returns how many.

    Decoding stops at the first record at or past `end`. With log_append_time >= 0 every
    record's timestamp is log_append_time and its timestamp_type 1 (LogAppendTime), else
    first_timestamp + its delta and 0. No intermediate Record objects are made.
    """
    if count < 0:
        raise CorruptMessageError(f"negative record count {count}")
    mv = _view(buf)
    n = len(mv)
    pos = 0
    added = 0
    ts_type = 1 if log_append_time >= 0 else 0
    for _ in range(count):
        _attributes, ts_delta, offset_delta, key, value, headers, pos = _decode_record(mv, pos, n)
        offset = base_offset + offset_delta
        if 0 <= end <= offset:
            break
        if offset < start:
            continue
        out.append(ConsumerRecord(topic, partition, offset, log_append_time if ts_type else first_timestamp + ts_delta,
                                  ts_type, key, value, headers))
        added += 1
    return added


def _as_bytes(x: object, what: str) -> bytes:
    if type(x) is bytes:
        return x
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes, bytearray, memoryview or None")


def _put_varint(out: bytearray, n: int) -> None:
    _put_uvarint(out, ((n << 1) ^ (n >> 63)) & UINT64_MAX)


def _put_bytes(out: bytearray, x: object, what: str) -> None:
    if x is None:
        out.append(1)  # zigzag(-1)
        return
    b = _as_bytes(x, what)
    _put_varint(out, len(b))
    out += b


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: Buffer | None,
    value: Buffer | None,
    headers: Iterable[tuple[str | bytes, Buffer | None]] = (),
) -> bytes:
    """One v2 record, length prefix included (attributes byte 0)."""
    if not INT32_MIN <= offset_delta <= INT32_MAX:
        raise OverflowError("offset delta outside the signed 32-bit range")
    if not INT64_MIN <= timestamp_delta <= INT64_MAX:
        raise OverflowError("timestamp delta outside the signed 64-bit range")
    body = bytearray(b"\x00")
    _put_varint(body, timestamp_delta)
    _put_varint(body, offset_delta)
    _put_bytes(body, key, "key")
    _put_bytes(body, value, "value")
    hlist = headers if isinstance(headers, (list, tuple)) else list(headers)
    _put_varint(body, len(hlist))
    for hkey, hvalue in hlist:
        if isinstance(hkey, str):
            _put_bytes(body, hkey.encode("utf-8"), "header key")
        else:
            _put_bytes(body, _as_bytes(hkey, "header key"), "header key")
        _put_bytes(body, hvalue, "header value")
    out = bytearray()
    _put_varint(out, len(body))
    out += body
    return bytes(out)


class BatchBuilder:
    """Accumulates records and builds one v2 batch (grammar at the top of `batch.py`).

    Each appended record is encoded at once into a growing buffer; the batch's
    baseTimestamp is the first record's timestamp and maxTimestamp the largest. `max_size`
    bounds the uncompressed size: `append` returns False (and adds nothing) when the
    record would cross it, unless the batch is still empty (a single oversized record is
    allowed, as Kafka producers do). `build` compresses, writes the header and the CRC.
    """

    __slots__ = (
        "compression", "base_offset", "producer_id", "producer_epoch", "base_sequence",
        "partition_leader_epoch", "max_size", "_attributes", "_buf", "_first_timestamp", "_max_timestamp", "_count",
    )

    def __init__(
        self,
        compression: int = 0,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        max_size: int | None = None,
    ) -> None:
        if compression & ~MAX_CODEC_MASK:
            raise ValueError(f"compression codec {compression} out of range")
        self.compression = compression
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.max_size = max_size
        self._attributes = compression | (0x10 if is_transactional else 0) | (0x20 if is_control else 0)
        self._buf = bytearray()
        self._first_timestamp = -1
        self._max_timestamp = -1
        self._count = 0

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def estimated_size(self) -> int:
        """Size of the batch if built uncompressed (an upper bound for compressed batches in practice)."""
        return HEADER_SIZE + len(self._buf)

    def append(self, timestamp: int, key: Buffer | None, value: Buffer | None,
               headers: Iterable[tuple[str | bytes, Buffer | None]] = ()) -> bool:
        """Add a record; False if it would exceed max_size and the batch is not empty."""
        if not INT64_MIN <= timestamp <= INT64_MAX:
            raise OverflowError("timestamp outside the signed 64-bit range")
        if self._count == 0:
            self._first_timestamp = timestamp
            self._max_timestamp = timestamp
        encoded = encode_record(self._count, timestamp - self._first_timestamp, key, value, headers)
        if self.max_size is not None and self._count and HEADER_SIZE + len(self._buf) + len(encoded) > self.max_size:
            return False
        self._buf += encoded
        self._count += 1
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return True

    def build(self) -> bytes:
        """The complete batch, CRC included. An empty builder gives an empty batch (count 0)."""
        records: bytes | bytearray = self._buf
        if self.compression != 0:
            records = compress(self.compression, bytes(self._buf))
        size = HEADER_SIZE + len(records)
        out = bytearray(size)
        _HEAD.pack_into(out, 0, self.base_offset, size - 12, self.partition_leader_epoch, 2)
        _TAIL.pack_into(
            out, CRC_START, self._attributes, self._count - 1, self._first_timestamp, self._max_timestamp,
            self.producer_id, self.producer_epoch, self.base_sequence, self._count,
        )
        out[HEADER_SIZE:] = records
        _U32.pack_into(out, 17, _crc32c(memoryview(out)[CRC_START:]))
        return bytes(out)

    def reset(self) -> bool:
        """Empties the builder for the next batch (header fields are kept); True when its
        buffer is reused (always here: build() copies it)."""
        self._buf = bytearray()
        self._first_timestamp = -1
        self._max_timestamp = -1
        self._count = 0
        return True


def append_to_last(q: Any, timestamp: int, key: Buffer | None, value: Buffer | None, headers: Any,
                   future_type: Any) -> Any:
    """The producer's per-record path: appends the record to the last batch of a partition
    queue `q` (objects with `builder` and `count`) and returns `future_type((batch, index
    in batch, timestamp))`; None, with nothing appended, when `q` is empty, its last batch
    is sealed (builder None) or full (then the producer opens a new batch)."""
    if not q:
        return None
    batch = q[-1]
    builder = batch.builder
    if builder is None or not builder.append(timestamp, key, value, headers):
        return None
    index = batch.count
    batch.count = index + 1
    return future_type((batch, index, timestamp))


MAX_CODEC_MASK = 0x07
_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
