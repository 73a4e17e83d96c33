"""Compression codecs of Kafka record batches (attribute bits 0-2).

| codec | id | wire format |
|---|---|---|
| none   | 0 | the records as they are |
| gzip   | 1 | gzip stream (RFC 1952, as java.util.zip.GZIPOutputStream writes); zlib streams are accepted too |
| snappy | 2 | xerial/snappy-java framing as the Java client writes (see below); raw snappy is accepted too (librdkafka writes it) |
| lz4    | 3 | LZ4 frame format (Kafka >= 0.10 / magic >= 1); written with independent 64 KiB blocks, no content size/checksum -- what Java's KafkaLZ4BlockOutputStream writes |
| zstd   | 4 | zstd frame(s) |

xerial framing: magic `82 'SNAPPY' 00` (8 bytes), int32 version (1), int32 minimum
compatible version (1), then blocks of int32 big-endian compressed length + raw snappy
block (each block at most 32 KiB uncompressed when we write it). Both librdkafka and
kafka-python/aiokafka decode xerial.

Decompression output is bounded (`MAX_DECOMPRESSED_SIZE`, 256 MiB, or the `max_size`
argument): a compression bomb raises CorruptMessageError instead of exhausting memory.
Unknown codecs raise UnsupportedCompressionTypeError.
"""
from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kafkafast.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError
from kafkafast.records.model import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

Buffer = bytes | bytearray | memoryview

MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")

CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}


def _too_big(limit: int) -> CorruptMessageError:
    return CorruptMessageError(f"decompressed records exceed {limit} bytes")


# ---------------------------------------------------------------------------- gzip


def _gzip_compress(data: Buffer) -> bytes:
    c = zlib.compressobj(wbits=31)  # 31 = gzip container
    return c.compress(data) + c.flush()


def _gzip_decompress(data: Buffer, limit: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while rest:
        d = zlib.decompressobj(wbits=47)  # 47 = gzip or zlib, auto-detected
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise CorruptMessageError(f"bad gzip data: {exc}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise _too_big(limit)
        if not d.eof:
            raise CorruptMessageError("truncated gzip data")
        rest = d.unused_data  # concatenated gzip members
    return bytes(out)


# ---------------------------------------------------------------------------- snappy


def _snappy_raw_length(block: Buffer) -> int:
    """Uncompressed length announced by a raw snappy block's uvarint preamble."""
    result = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise CorruptMessageError("bad snappy length preamble")


def _snappy_raw_decompress(block: Buffer, limit: int) -> bytes:
    if _snappy_raw_length(block) > limit:
        raise _too_big(limit)
    try:
        return bytes(cramjam.snappy.decompress_raw(bytes(block)))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CorruptMessageError(f"bad snappy data: {exc}") from None


def _snappy_compress(data: Buffer) -> bytes:
    mv = memoryview(data)
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(bytes(mv[start : start + XERIAL_BLOCK_SIZE])))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer, limit: int) -> bytes:
    mv = memoryview(data)
    if len(mv) < XERIAL_HEADER.size or bytes(mv[:8]) != XERIAL_MAGIC:
        return _snappy_raw_decompress(mv, limit)
    out = bytearray()
    pos = XERIAL_HEADER.size
    while pos < len(mv):
        if len(mv) - pos < 4:
            raise CorruptMessageError("truncated xerial snappy block length")
        length = _I32.unpack_from(mv, pos)[0]
        pos += 4
        if length < 0 or length > len(mv) - pos:
            raise CorruptMessageError(f"xerial snappy block length {length} exceeds the data")
        out += _snappy_raw_decompress(mv[pos : pos + length], limit - len(out))
        pos += length
    return bytes(out)


# ---------------------------------------------------------------------------- lz4


def _lz4_compress(data: Buffer) -> bytes:
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_decompress(data: Buffer, limit: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        try:
            out += d.decompress(rest, max_length=limit + 1 - len(out))
        except RuntimeError as exc:
            raise CorruptMessageError(f"bad lz4 data: {exc}") from None
        if len(out) > limit:
            raise _too_big(limit)
        if not d.eof:
            if not d.needs_input:
                raise _too_big(limit)
            raise CorruptMessageError("truncated lz4 frame")
        rest = d.unused_data or b""
    return bytes(out)


# ---------------------------------------------------------------------------- zstd


def _zstd_compress(data: Buffer) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def _zstd_decompress(data: Buffer, limit: int) -> bytes:
    """Frame by frame. A frame that declares its content size is checked against the limit
    up front; one that does not (Java's streaming writer) is fed in small input steps so
    the output can overshoot the limit by a bounded amount only before we stop."""
    out = bytearray()
    rest = bytes(data)
    try:
        while rest:
            declared = zstandard.frame_content_size(rest)
            if declared > limit - len(out):
                raise _too_big(limit)
            step = len(rest) if declared >= 0 else 1024
            dobj = zstandard.ZstdDecompressor().decompressobj()
            pos = 0
            while not dobj.eof and pos < len(rest):
                out += dobj.decompress(rest[pos : pos + step])
                pos += step
                if len(out) > limit:
                    raise _too_big(limit)
            if not dobj.eof:
                raise CorruptMessageError("truncated zstd frame")
            rest = dobj.unused_data + rest[pos:]
    except zstandard.ZstdError as exc:
        raise CorruptMessageError(f"bad zstd data: {exc}") from None
    return bytes(out)


# ---------------------------------------------------------------------------- dispatch


def compress(codec: int, data: Buffer) -> bytes:
    """`data` compressed with `codec` in the wire format Kafka uses for it (table above)."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return _gzip_compress(data)
    if codec == CODEC_SNAPPY:
        return _snappy_compress(data)
    if codec == CODEC_LZ4:
        return _lz4_compress(data)
    if codec == CODEC_ZSTD:
        return _zstd_compress(data)
    raise UnsupportedCompressionTypeError(f"compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """`data` decompressed; at most `max_size` bytes of output, else CorruptMessageError."""
    if codec == CODEC_NONE:
        if len(data) > max_size:
            raise _too_big(max_size)
        return bytes(data)
    if codec == CODEC_GZIP:
        return _gzip_decompress(data, max_size)
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(data, max_size)
    if codec == CODEC_LZ4:
        return _lz4_decompress(data, max_size)
    if codec == CODEC_ZSTD:
        return _zstd_decompress(data, max_size)
    raise UnsupportedCompressionTypeError(f"compression codec {codec}")
