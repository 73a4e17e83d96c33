"""Record batches a hostile or broken producer sends: correct CRC32C, bad insides.

Every batch here is a v2 batch whose header and CRC are right, so only a check of the
decompressed records can tell it apart from a good one: garbage or truncated compressed
payloads, record counts and offset deltas that disagree with the header, and
decompression bombs (a few hundred KB that expand to hundreds of MiB).
"""
from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import lz4.frame
import zstandard

from kafkafast import native
from kafkafast.records import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, compress, crc32c, encode_batch

CODECS = {"gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
TIMESTAMP = 1_700_000_000_000

# codec -> decompressed size of its bomb, as found against the broker (issue 10)
BOMB_SIZES = {CODEC_ZSTD: 1 << 30, CODEC_GZIP: 512 << 20, CODEC_LZ4: 160 << 20}


def with_payload(payload: bytes, count: int, codec: int, *, base_offset: int = 0) -> bytes:
    """A v2 batch of `count` records whose records field is `payload` (taken as compressed
    with `codec`), header and CRC32C consistent with it."""
    head = bytearray(encode_batch([(TIMESTAMP, b"k", b"v", [])], codec, base_offset=base_offset)[:61])
    batch = head + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", batch, 57, count)  # recordsCount
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def records(deltas: list[int], value: bytes = b"value") -> bytes:
    """Uncompressed records with the given offset deltas (keys k0, k1, ...)."""
    encode = native.load("records").encode_record
    return b"".join(encode(d, 0, b"k%d" % i, value, ()) for i, d in enumerate(deltas))


def compressed(codec: int, raw: bytes, count: int) -> bytes:
    return with_payload(compress(codec, raw), count, codec)


def garbage(codec: int, seed: int = 1) -> bytes:
    """A batch of 3 records whose payload is random bytes."""
    return with_payload(_random(seed, 300), 3, codec)


def truncated(codec: int) -> bytes:
    """A batch of 50 records whose compressed payload lost its last third."""
    payload = compress(codec, records(list(range(50)), _random(7, 200)))
    return with_payload(payload[: len(payload) * 2 // 3], 50, codec)


def _random(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _bomb_record_head(size: int) -> bytes:
    """Start of one record whose value is `size` - 16 zero bytes: a well-formed beginning,
    so a validator must decompress far to find out."""
    encode = native.load("records").encode_varint
    value_len = size - 16
    body_head = b"\x00" + encode(0) + encode(0) + encode(-1) + encode(value_len)
    body_len = len(body_head) + value_len + 1  # + header count
    return encode(body_len) + body_head


def bomb_payload(codec: int, cache_dir: Path) -> bytes:
    """The compressed payload of a bomb (BOMB_SIZES), made once per cache directory."""
    size = BOMB_SIZES[codec]
    path = cache_dir / f"bomb-{codec}-{size}"
    if path.exists():
        return path.read_bytes()
    head = _bomb_record_head(size)
    zeros = bytes(1 << 20)
    left = size - len(head)
    parts = []
    if codec == CODEC_ZSTD:
        z = zstandard.ZstdCompressor(level=1).compressobj()
        feed, finish = z.compress, z.flush
    elif codec == CODEC_GZIP:
        g = zlib.compressobj(9, wbits=31)
        feed, finish = g.compress, g.flush
    else:
        f = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
        parts.append(f.begin())
        feed, finish = f.compress, f.flush
    parts.append(feed(head))
    while left:
        step = min(left, len(zeros))
        parts.append(feed(zeros[:step]))
        left -= step
    parts.append(finish())
    payload = b"".join(parts)
    path.write_bytes(payload)
    return payload


def bomb(codec: int, cache_dir: Path) -> bytes:
    """A one-record batch whose payload expands to BOMB_SIZES[codec] bytes."""
    return with_payload(bomb_payload(codec, cache_dir), 1, codec)
