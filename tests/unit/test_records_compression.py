"""Compression codecs: round trips, snappy framing variants, bounded output, unknown codecs."""
from __future__ import annotations

import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest

from kafkafast.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError
from kafkafast.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    compress,
    decode_batch,
    decompress,
    encode_batch,
)
from kafkafast.records.compression import XERIAL_MAGIC

ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
PAYLOADS = [b"", b"x", os.urandom(1000), b"abc" * 50_000 + os.urandom(100)]


@pytest.mark.parametrize("codec_id", ALL_CODECS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=["empty", "one", "random", "large"])
def test_every_codec_round_trips(codec_id: int, payload: bytes) -> None:
    assert decompress(codec_id, compress(codec_id, payload)) == payload
    assert decompress(codec_id, memoryview(compress(codec_id, payload))) == payload


@pytest.mark.parametrize("codec_id", ALL_CODECS)
def test_every_codec_round_trips_through_a_batch(codec_id: int) -> None:
    records = [(1000 + i, b"key%d" % i, b"value" * i, [("h", b"%d" % i)]) for i in range(50)]
    header, decoded = decode_batch(encode_batch(records, codec_id))
    assert header.compression == codec_id
    assert [(r.timestamp, r.key, r.value, r.headers) for r in decoded] == [(t, k, v, h) for t, k, v, h in records]


def test_gzip_writes_a_gzip_container_and_reads_zlib_too() -> None:
    data = b"hello gzip" * 100
    assert compress(CODEC_GZIP, data)[:2] == b"\x1f\x8b"
    assert gzip.decompress(compress(CODEC_GZIP, data)) == data
    import zlib

    assert decompress(CODEC_GZIP, zlib.compress(data)) == data
    assert decompress(CODEC_GZIP, gzip.compress(data[:10]) + gzip.compress(data[10:])) == data


def test_snappy_writes_xerial_framing_with_32k_blocks() -> None:
    data = os.urandom(70_000)
    framed = compress(CODEC_SNAPPY, data)
    assert framed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    first_block = struct.unpack_from(">i", framed, 16)[0]
    assert bytes(cramjam.snappy.decompress_raw(framed[20 : 20 + first_block])) == data[:32768]


def test_snappy_reads_raw_blocks_as_librdkafka_writes() -> None:
    data = b"raw snappy block " * 1000
    assert decompress(CODEC_SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_xerial_interoperates_with_kafka_python() -> None:
    codec = pytest.importorskip("kafka.codec")
    if not codec.has_snappy():
        pytest.skip("kafka-python has no snappy backend")
    data = os.urandom(100) * 1000
    assert codec.snappy_decode(compress(CODEC_SNAPPY, data)) == data
    assert decompress(CODEC_SNAPPY, codec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(CODEC_SNAPPY, codec.snappy_encode(data, xerial_compatible=False)) == data


def test_lz4_writes_independent_blocks_without_content_size() -> None:
    data = os.urandom(200_000)
    framed = compress(CODEC_LZ4, data)
    flg = framed[4]
    assert flg & 0x20 and not flg & 0x08 and not flg & 0x04  # block independent, no size, no checksum
    assert lz4.frame.decompress(framed) == data


@pytest.mark.parametrize("codec_id", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_decompression_is_bounded(codec_id: int) -> None:
    bomb = compress(codec_id, b"\x00" * 1_000_000)
    assert len(bomb) < 100_000
    assert decompress(codec_id, bomb, max_size=1_000_000) == b"\x00" * 1_000_000
    with pytest.raises(CorruptMessageError, match="exceed"):
        decompress(codec_id, bomb, max_size=999_999)


@pytest.mark.parametrize("codec_id", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_garbage_and_truncated_input_raise_corrupt_message(codec_id: int) -> None:
    good = compress(codec_id, os.urandom(5000))
    for bad in (good[: len(good) // 2], b"\xff" * 64, good[:3]):
        with pytest.raises(CorruptMessageError):
            decompress(codec_id, bad)


@pytest.mark.parametrize("codec_id", [5, 6, 7, -1])
def test_unknown_codec_is_unsupported(codec_id: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec_id, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec_id, b"x")
