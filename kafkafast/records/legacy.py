"""Reading legacy message sets (magic v0 and v1), as old brokers and old logs hold them.

A message set is a sequence of entries:

    offset        int64
    message_size  int32          bytes of the message that follows
    message:
      crc         uint32         CRC32 (zlib/IEEE) of magic .. end of value
      magic       int8           0 or 1
      attributes  int8           bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 timestamp type (v1)
      timestamp   int64          v1 only
      key         int32 length (-1 = null) + bytes
      value       int32 length (-1 = null) + bytes

A compressed message is a wrapper whose value is a compressed message set of inner
(uncompressed) messages. Inner offsets are absolute in v0; in v1 they are relative
(0..n-1) and the wrapper carries the offset of the last inner message, so
absolute = wrapper_offset - last_relative + relative. With LogAppendTime (v1) every inner
message takes the wrapper's timestamp. v0 messages have no timestamp (-1).

The broker reads it from Produce v0-2 requests and writes it for Fetch v0-3 responses
(`convert.py`: the log holds v2 batches only). Magic-0 LZ4 wrappers carry the pre-0.10
broken frame header checksum (KAFKA-3160); it is corrected before decoding.
"""
from __future__ import annotations

import struct
import zlib

from kafkafast.protocol.errors import CorruptMessageError
from kafkafast.records.compression import MAX_DECOMPRESSED_SIZE, decompress
from kafkafast.records.lz4_legacy import fix_lz4_header
from kafkafast.records.model import (
    ATTR_TIMESTAMP_TYPE,
    CODEC_LZ4,
    CODEC_MASK,
    CODEC_NONE,
    NO_TIMESTAMP,
    LegacyHeader,
    Record,
)

Buffer = bytes | bytearray | memoryview

LOG_OVERHEAD = 12  # offset + message_size
_ENTRY = struct.Struct(">qi")
_V0 = struct.Struct(">IbB")  # crc, magic, attributes
_V1 = struct.Struct(">IbBq")  # crc, magic, attributes, timestamp
_I32 = struct.Struct(">i")
MIN_MESSAGE_SIZE = {0: _V0.size + 8, 1: _V1.size + 8}


def _bytes_field(mv: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise CorruptMessageError("truncated legacy message")
    length = _I32.unpack_from(mv, pos)[0]
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise CorruptMessageError(f"legacy message field length {length} does not fit")
    return bytes(mv[pos : pos + length]), pos + length


def read_legacy_message(buf: Buffer, pos: int = 0, *, check_crc: bool = True) -> tuple[LegacyHeader, Record]:
    """The legacy entry at `pos` (which must be whole): its header and its message as a Record.

    For a compressed wrapper, the Record's value is the compressed inner message set.
    """
    mv = memoryview(buf)
    if len(mv) - pos < LOG_OVERHEAD:
        raise CorruptMessageError(f"truncated legacy entry at {pos}")
    offset, size = _ENTRY.unpack_from(mv, pos)
    start = pos + LOG_OVERHEAD
    end = start + size
    if size < MIN_MESSAGE_SIZE[0] or end > len(mv):
        raise CorruptMessageError(f"legacy message size {size} at {pos} does not fit")
    crc, magic, attributes = _V0.unpack_from(mv, start)
    if magic not in (0, 1):
        raise CorruptMessageError(f"magic {magic} in a legacy message set")
    if size < MIN_MESSAGE_SIZE[magic]:
        raise CorruptMessageError(f"legacy message size {size} at {pos} too small for v{magic}")
    if check_crc and zlib.crc32(mv[start + 4 : end]) != crc:
        raise CorruptMessageError(f"legacy message at {pos}: CRC32 mismatch")
    p = start + _V0.size
    timestamp = NO_TIMESTAMP
    if magic == 1:
        timestamp = _V1.unpack_from(mv, start)[3]
        p = start + _V1.size
    key, p = _bytes_field(mv, p, end)
    value, p = _bytes_field(mv, p, end)
    header = LegacyHeader(offset, size + LOG_OVERHEAD, crc, magic, attributes, timestamp)
    return header, Record(offset, timestamp, key, value, [], attributes)


def decode_legacy_entry(buf: Buffer, pos: int = 0, *, check_crc: bool = True,
                        max_size: int = MAX_DECOMPRESSED_SIZE) -> tuple[LegacyHeader, list[Record]]:
    """The legacy entry at `pos` with its records (a compressed wrapper expanded, to at most
    `max_size` decompressed bytes, else DecompressedSizeError)."""
    header, record = read_legacy_message(buf, pos, check_crc=check_crc)
    codec = header.attributes & CODEC_MASK
    if codec == CODEC_NONE:
        return header, [record]
    if record.value is None:
        raise CorruptMessageError("compressed legacy wrapper without a value")
    value = record.value
    if codec == CODEC_LZ4 and header.magic == 0:
        value = fix_lz4_header(value, broken=False)
    inner_set = memoryview(decompress(codec, value, max_size))
    inner: list[Record] = []
    p = 0
    while len(inner_set) - p >= LOG_OVERHEAD:
        size = _I32.unpack_from(inner_set, p + 8)[0]
        if size < 0 or p + LOG_OVERHEAD + size > len(inner_set):
            break  # partial tail
        inner_header, inner_record = read_legacy_message(inner_set, p, check_crc=check_crc)
        if inner_header.compression != CODEC_NONE:
            raise CorruptMessageError("nested compression in a legacy message set")
        inner.append(inner_record)
        p += inner_header.size
    if header.magic == 1 and inner:
        last_relative = inner[-1].offset
        log_append = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
        for r in inner:
            r.offset = header.offset - last_relative + r.offset
            if log_append:
                r.timestamp = header.timestamp
    return header, inner
