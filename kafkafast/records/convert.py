"""Conversion between legacy message sets (magic 0 and 1) and v2 record batches.

Up-conversion (Produce v0-2, whose clients write magic 0 or 1): every legacy entry of the
request is read (CRC32 checked, a compressed wrapper's inner set decompressed to at most
`max_decompressed` bytes) and the messages are written again as v2 batches: the
uncompressed messages that follow each other go into one uncompressed batch, each
compressed wrapper becomes one batch compressed with the wrapper's codec. Offsets start at
0 (the log assigns them on append, which also computes the CRC32C and applies
message.timestamp.type). Magic-0 messages have no timestamp (-1, as Kafka up-converts them).

Down-conversion (Fetch v0-3, whose clients read magic 0 or 1): a v2 batch becomes plain
messages (uncompressed batch) or one wrapper message holding the inner messages compressed
with the batch's codec. In magic 1 the inner offsets are relative (0..n-1), the wrapper
carries the last inner offset and the batch's max timestamp, and the timestamp type bit;
in magic 0 inner offsets are absolute and there are no timestamps. Headers are dropped,
control batches skipped. zstd cannot be expressed in magic 0/1: UnsupportedCompressionType.

LZ4 and magic 0: the frame header checksum is computed the pre-0.10 way (`lz4_legacy.py`).
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator

from kafkafast.protocol.errors import (
    CorruptMessageError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from kafkafast.records.batch import decode_batch, encode_batch, iter_entries
from kafkafast.records.compression import DecompressedSizeError, compress
from kafkafast.records.legacy import LOG_OVERHEAD, decode_legacy_entry
from kafkafast.records.lz4_legacy import fix_lz4_header
from kafkafast.records.model import (
    ATTR_TIMESTAMP_TYPE,
    CODEC_LZ4,
    CODEC_MASK,
    CODEC_NONE,
    CODEC_ZSTD,
    NO_TIMESTAMP,
    TIMESTAMP_LOG_APPEND,
    Record,
)

Buffer = bytes | bytearray | memoryview

_ENTRY = struct.Struct(">qi")
_HEAD_V0 = struct.Struct(">bb")  # magic, attributes
_HEAD_V1 = struct.Struct(">bbq")  # magic, attributes, timestamp
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
def legacy_compress(codec: int, magic: int, data: Buffer) -> bytes:
    """A legacy wrapper's value: `data` compressed as a magic-`magic` writer does."""
    out = compress(codec, data)
    return fix_lz4_header(out, broken=True) if codec == CODEC_LZ4 and magic == 0 else out


# ------------------------------------------------------------------ writing legacy messages


def encode_message(magic: int, offset: int, timestamp: int, key: Buffer | None, value: Buffer | None,
                   attributes: int = 0) -> bytes:
    """One legacy entry: offset, size and the message with its CRC32."""
    body = bytearray(_HEAD_V1.pack(magic, attributes, timestamp) if magic == 1 else _HEAD_V0.pack(magic, attributes))
    for field in (key, value):
        if field is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _I32.pack(len(field))
            body += field
    crc = zlib.crc32(body)
    return _ENTRY.pack(offset, len(body) + 4) + _U32.pack(crc) + bytes(body)


def encode_message_set(magic: int, records: Iterable[Record], codec: int = CODEC_NONE, *,
                       log_append_time: bool = False) -> bytes:
    """`records` (absolute offsets) as a magic-`magic` message set: plain messages, or one
    wrapper holding them compressed with `codec`."""
    records = list(records)
    ts_attr = ATTR_TIMESTAMP_TYPE if magic == 1 and log_append_time else 0
    if codec == CODEC_NONE:
        return b"".join(encode_message(magic, r.offset, r.timestamp if magic == 1 else NO_TIMESTAMP,
                                       r.key, r.value, ts_attr) for r in records)
    if codec == CODEC_ZSTD:
        raise UnsupportedCompressionTypeError("zstd cannot be written in a magic 0 or 1 message set")
    if not records:
        return b""
    last = records[-1].offset
    if magic == 1:
        inner = b"".join(encode_message(1, r.offset - records[0].offset, r.timestamp, r.key, r.value, ts_attr)
                         for r in records)
        wrapper_ts = max(r.timestamp for r in records)
    else:
        inner = b"".join(encode_message(0, r.offset, NO_TIMESTAMP, r.key, r.value) for r in records)
        wrapper_ts = NO_TIMESTAMP
    return encode_message(magic, last, wrapper_ts, None, legacy_compress(codec, magic, inner),
                          (codec & CODEC_MASK) | ts_attr)


# ------------------------------------------------------------------ up-conversion


def _legacy_runs(buf: Buffer, max_decompressed: int) -> Iterator[tuple[int, list[Record]]]:
    """(codec, records) runs of a producer's legacy message set: consecutive plain messages
    together, each compressed wrapper alone. A partial entry at the end is an error."""
    mv = memoryview(buf)
    pos = 0
    plain: list[Record] = []
    while pos < len(mv):
        if len(mv) - pos < LOG_OVERHEAD:
            raise CorruptMessageError(f"truncated legacy entry at {pos}")
        try:
            header, records = decode_legacy_entry(mv, pos, max_size=max_decompressed)
        except DecompressedSizeError:
            raise MessageTooLargeError(
                f"message at {pos}: its inner messages decompress to more than {max_decompressed} bytes") from None
        if header.compression == CODEC_NONE:
            plain += records
        else:
            if plain:
                yield CODEC_NONE, plain
                plain = []
            if not records:
                raise CorruptMessageError(f"compressed message at {pos} holds no messages")
            yield header.compression, records
        pos += header.size
    if plain:
        yield CODEC_NONE, plain


def upconvert(buf: Buffer, max_decompressed: int) -> bytearray:
    """A producer's record set with every legacy (magic 0/1) entry written as v2 batches;
    v2 batches in it are kept as they are. CorruptMessageError or MessageTooLargeError when
    a message is bad or decompresses past `max_decompressed` bytes."""
    mv = memoryview(buf)
    out = bytearray()
    pos = 0
    while pos < len(mv):
        if len(mv) - pos < 17:
            raise CorruptMessageError(f"truncated entry at {pos}")
        size = _I32.unpack_from(mv, pos + 8)[0] + 12
        if size < 12 + 14 or pos + size > len(mv):
            raise CorruptMessageError(f"entry at {pos} does not fit")
        if mv[pos + 16] == 2:
            out += mv[pos : pos + size]
            pos += size
            continue
        end = pos  # the legacy entries up to the next v2 batch
        while end < len(mv) and len(mv) - end >= 17 and mv[end + 16] in (0, 1):
            end += _I32.unpack_from(mv, end + 8)[0] + 12
        if end > len(mv):
            raise CorruptMessageError(f"legacy entry at {pos} does not fit")
        for codec, records in _legacy_runs(mv[pos:end], max_decompressed):
            out += encode_batch(((r.timestamp, r.key, r.value, []) for r in records), codec)
        pos = end
    return out


# ------------------------------------------------------------------ down-conversion


def downconvert_batch(buf: Buffer, pos: int, magic: int, min_offset: int = 0) -> bytes:
    """The v2 batch at `pos` as a magic-`magic` message set (records below `min_offset`
    left out; a control batch gives nothing)."""
    header, records = decode_batch(buf, pos, check_crc=False)
    if header.is_control:
        return b""
    if header.compression == CODEC_ZSTD:
        raise UnsupportedCompressionTypeError("a zstd batch cannot be read with magic 0 or 1")
    records = [r for r in records if r.offset >= min_offset]
    return encode_message_set(magic, records, header.compression,
                              log_append_time=header.timestamp_type == TIMESTAMP_LOG_APPEND)


def downconvert(buf: Buffer, magic: int, min_offset: int = 0) -> bytes:
    """Every v2 batch of `buf` (whole batches) as one magic-`magic` message set."""
    out = bytearray()
    mv = memoryview(buf)
    for pos, _size, entry_magic in iter_entries(mv):
        if entry_magic != 2:
            raise CorruptMessageError(f"magic {entry_magic} where a v2 batch was expected")
        out += downconvert_batch(mv, pos, magic, min_offset)
    return bytes(out)
