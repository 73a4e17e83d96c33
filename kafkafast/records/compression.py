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

Decompression streams: `iter_decompressed` hands out the output in pieces of at most
`DECOMPRESS_CHUNK` bytes as they are pulled, so a caller that counts them (the produce
validator, `validate_record_stream` in the twins) stops a compression bomb after the bound
while holding one piece. `decompress` collects the pieces up to `max_size`
(`MAX_DECOMPRESSED_SIZE`, 256 MiB, by default), else DecompressedSizeError. Bad or
truncated data raises CorruptMessageError; unknown codecs UnsupportedCompressionTypeError.
"""
from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard

from kafkafast.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError
from kafkafast.records.model import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

Buffer = bytes | bytearray | memoryview

MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
# Decompressed bytes handed out per piece by iter_decompressed, and compressed bytes fed
# to a decoder per call.
DECOMPRESS_CHUNK = 128 * 1024
_INPUT_SLICE = 64 * 1024
# A raw snappy block cannot expand more than this (a 3-byte copy tag yields 64 bytes).
SNAPPY_MAX_EXPANSION = 22
# Largest zstd window a frame may ask for (the decoder allocates it). zstd's levels up to
# 19 use at most 8 MiB; only levels 20-22 on large inputs ask for more.
ZSTD_MAX_WINDOW = 16 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")

# A zstd decompressor is not thread-safe (the log cleaner's thread decodes too) and keeps
# its buffers between uses: one per thread.
_zstd_local = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_zstd_local, "decompressor", None)
    if d is None:
        d = _zstd_local.decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    return d


CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}


class DecompressedSizeError(CorruptMessageError):  # type: ignore[misc,valid-type]
    """The records of a batch decompress to more than the bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"decompressed records exceed {limit} bytes")
        self.limit = limit


# ---------------------------------------------------------------------------- gzip


def _gzip_compress(data: Buffer) -> bytes:
    c = zlib.compressobj(wbits=31)  # 31 = gzip container
    return c.compress(data) + c.flush()


def _gzip_chunks(data: memoryview, chunk: int) -> Iterator[bytes]:
    """gzip members (or zlib streams) one after another. The input is fed in small slices
    so that `unconsumed_tail` (a copy) stays small; output comes in pieces of <= chunk."""
    pos = 0
    n = len(data)
    while pos < n:
        d = zlib.decompressobj(wbits=47)  # 47 = gzip or zlib, auto-detected
        while not d.eof:
            if pos >= n and not d.unconsumed_tail:
                raise CorruptMessageError("truncated gzip data")
            piece = d.unconsumed_tail or data[pos : pos + _INPUT_SLICE]
            if not d.unconsumed_tail:
                pos += len(piece)
            try:
                out = d.decompress(piece, chunk)
            except zlib.error as exc:
                raise CorruptMessageError(f"bad gzip data: {exc}") from None
            if out:
                yield out
        pos -= len(d.unused_data)  # the next member starts there


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
    """One raw snappy block. Not streamable (copies may reach back to its start), so its
    output is allocated whole: at most the limit, and at most what `len(block)` bytes can
    expand to (a 5-byte copy yields 64 bytes), so the size a client claims never decides it."""
    length = _snappy_raw_length(block)
    if length > SNAPPY_MAX_EXPANSION * len(block):
        raise CorruptMessageError(f"snappy block of {len(block)} bytes claims {length} bytes")
    if length > limit:
        raise DecompressedSizeError(limit)
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


def _snappy_chunks(data: memoryview, chunk: int, limit: int) -> Iterator[bytes]:
    if len(data) < XERIAL_HEADER.size or bytes(data[:8]) != XERIAL_MAGIC:
        yield from _pieces(_snappy_raw_decompress(data, limit), chunk)
        return
    pos = XERIAL_HEADER.size
    total = 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptMessageError("truncated xerial snappy block length")
        length = _I32.unpack_from(data, pos)[0]
        pos += 4
        if length < 0 or length > len(data) - pos:
            raise CorruptMessageError(f"xerial snappy block length {length} exceeds the data")
        block = _snappy_raw_decompress(data[pos : pos + length], limit - total)
        total += len(block)
        pos += length
        yield from _pieces(block, chunk)


def _pieces(data: bytes, chunk: int) -> Iterator[bytes]:
    if len(data) <= chunk:
        if data:
            yield data
        return
    mv = memoryview(data)
    for start in range(0, len(mv), chunk):
        yield bytes(mv[start : start + chunk])


# ---------------------------------------------------------------------------- lz4


def _lz4_compress(data: Buffer) -> bytes:
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_chunks(data: memoryview, chunk: int) -> Iterator[bytes]:
    """LZ4 frames one after another; the decompressor buffers at most one block (the frame
    header declares its maximum, 4 MiB at most) and hands out <= chunk per call."""
    pos = 0
    n = len(data)
    while pos < n:
        d = lz4.frame.LZ4FrameDecompressor()
        while not d.eof:
            if d.needs_input:
                if pos >= n:
                    raise CorruptMessageError("truncated lz4 frame")
                piece = bytes(data[pos : pos + _INPUT_SLICE])
                pos += len(piece)
            else:
                piece = b""
            try:
                out = d.decompress(piece, max_length=chunk)
            except RuntimeError as exc:
                raise CorruptMessageError(f"bad lz4 data: {exc}") from None
            if out:
                yield out
        pos -= len(d.unused_data or b"")


# ---------------------------------------------------------------------------- zstd


def _zstd_compress(data: Buffer) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


_ZSTD_MAGIC = 0xFD2FB528
_U32LE = struct.Struct("<I")


def _zstd_frames_complete(data: memoryview) -> None:
    """Walks the frame and block headers (RFC 8878) without decompressing: every frame must
    be complete, with nothing after the last. The streaming decoder below reports garbage
    but stops silently at a truncated frame, hence this walk."""
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < 4:
            raise CorruptMessageError("truncated zstd frame magic")
        magic = _U32LE.unpack_from(data, pos)[0]
        pos += 4
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: size, then opaque bytes
            if n - pos < 4:
                raise CorruptMessageError("truncated zstd skippable frame")
            pos += 4 + _U32LE.unpack_from(data, pos)[0]
            if pos > n:
                raise CorruptMessageError("truncated zstd skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptMessageError("bad zstd data: unknown frame magic")
        if pos >= n:
            raise CorruptMessageError("truncated zstd frame header")
        fhd = data[pos]
        if fhd & 0x08:
            raise CorruptMessageError("bad zstd data: reserved frame header bit set")
        single_segment = fhd & 0x20
        fcs_size = (0, 2, 4, 8)[fhd >> 6] or (1 if single_segment else 0)
        pos += 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3] + fcs_size
        while True:
            if n - pos < 3:
                raise CorruptMessageError("truncated zstd block")
            bh = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            kind = (bh >> 1) & 3
            if kind == 3:
                raise CorruptMessageError("bad zstd data: reserved block type")
            pos += 3 + (1 if kind == 1 else bh >> 3)
            if bh & 1:
                break
        if fhd & 0x04:
            pos += 4  # content checksum
        if pos > n:
            raise CorruptMessageError("truncated zstd frame")


def _zstd_chunks(data: memoryview, chunk: int) -> Iterator[bytes]:
    """zstd frames one after another, <= chunk bytes per read. A content size the frame
    declares is never used to size anything; the window a frame asks for is capped
    (ZSTD_MAX_WINDOW), since the decoder allocates it."""
    _zstd_frames_complete(data)
    reader = _zstd_decompressor().stream_reader(data, read_size=_INPUT_SLICE, read_across_frames=True)
    try:
        while True:
            out = reader.read(chunk)
            if not out:
                return
            yield out
    except zstandard.ZstdError as exc:
        raise CorruptMessageError(f"bad zstd data: {exc}") from None
    finally:  # also when the caller stops pulling: the thread's decompressor is free again
        reader.close()


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


def iter_decompressed(codec: int, data: Buffer, limit: int = MAX_DECOMPRESSED_SIZE,
                      chunk: int = DECOMPRESS_CHUNK) -> Iterator[bytes]:
    """The decompressed bytes of `data` in pieces of at most `chunk` bytes, decoded as they
    are asked for: a caller that stops pulling has decompressed no further, so it holds at
    most one piece (snappy: one block, see `_snappy_raw_decompress`). Bad or truncated data
    raises CorruptMessageError; counting the total against `limit` is the caller's job (the
    limit is only used where a codec must allocate a block whole: DecompressedSizeError)."""
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    if codec == CODEC_NONE:
        return iter((bytes(mv[i : i + chunk]) for i in range(0, len(mv), chunk)))
    if codec == CODEC_GZIP:
        return _gzip_chunks(mv, chunk)
    if codec == CODEC_SNAPPY:
        return _snappy_chunks(mv, chunk, limit)
    if codec == CODEC_LZ4:
        return _lz4_chunks(mv, chunk)
    if codec == CODEC_ZSTD:
        return _zstd_chunks(mv, chunk)
    raise UnsupportedCompressionTypeError(f"compression codec {codec}")


class DecompressBuffer:
    """One output buffer for decompressing batch after batch (a reader's whole fetch loop):
    `decompress` writes the records of a compressed batch into it and returns a view of
    them, valid until the next call. The buffer grows by doubling and is kept, so a reader
    of similar batches allocates it once; it never grows past `max_size` (a hostile broker
    cannot make the reader allocate more: DecompressedSizeError). zstd decompresses
    straight into it; the other codecs' pieces (`iter_decompressed`) are copied in."""

    __slots__ = ("max_size", "_buf")

    def __init__(self, max_size: int = MAX_DECOMPRESSED_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray()

    @property
    def capacity(self) -> int:
        return len(self._buf)

    def _room(self, need: int, keep: int) -> bytearray:
        """The buffer with room for `need` bytes, its first `keep` bytes kept. A grown buffer
        is a new bytearray (views of the old one may still be alive; it is never resized)."""
        buf = self._buf
        if need <= len(buf):
            return buf
        if need > self.max_size:
            raise DecompressedSizeError(self.max_size)
        size = max(len(buf) * 2, need, 64 * 1024)
        grown = bytearray(min(size, self.max_size))
        grown[:keep] = memoryview(buf)[:keep]
        self._buf = grown
        return grown

    def decompress(self, codec: int, data: Buffer) -> memoryview:
        """The decompressed bytes of `data`, in this buffer."""
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if codec == CODEC_ZSTD:
            n = self._zstd_into(mv)
        else:
            n = 0
            for piece in iter_decompressed(codec, mv, self.max_size):
                end = n + len(piece)
                self._room(end, n)[n:end] = piece
                n = end
        return memoryview(self._buf)[:n]

    def _zstd_into(self, data: memoryview) -> int:
        _zstd_frames_complete(data)  # as _zstd_chunks: the stream reader stops silently at a truncated frame
        reader = _zstd_decompressor().stream_reader(data, read_size=_INPUT_SLICE, read_across_frames=True)
        n = 0
        try:
            while True:
                buf = self._buf
                if n == len(buf):
                    if n >= self.max_size:
                        if reader.read(1):
                            raise DecompressedSizeError(self.max_size)
                        return n
                    buf = self._room(n + 1, n)
                got = reader.readinto(memoryview(buf)[n:])
                if not got:
                    return n
                n += got
        except zstandard.ZstdError as exc:
            raise CorruptMessageError(f"bad zstd data: {exc}") from None
        finally:
            reader.close()


def decompress(codec: int, data: Buffer, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """`data` decompressed; at most `max_size` bytes of output, else DecompressedSizeError
    (a CorruptMessageError)."""
    out = bytearray()
    for piece in iter_decompressed(codec, data, max_size):
        if len(piece) > max_size - len(out):
            raise DecompressedSizeError(max_size)
        out += piece
    return bytes(out)
