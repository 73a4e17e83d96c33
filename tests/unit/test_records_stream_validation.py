"""Validation of the records inside compressed batches (`validate_record_stream`, both
twins, and `validate_compressed_records`): what a producer's batch must hold once
decompressed, checked in pieces with bounded memory."""
from __future__ import annotations

import os
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafast import native
from kafkafast.protocol.errors import CorruptMessageError, MessageTooLargeError
from kafkafast.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    compress,
    encode_batch,
    iter_decompressed,
    validate_compressed_records,
)
from tests.support import hostile_batches as hb
from tests.unit.test_records import codec as twin  # noqa: F401  (the twins, as a fixture)

CODECS = [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]


def _records(n: int, value: bytes = b"v" * 100, headers=(("h", b"x"), ("empty", None))) -> bytes:
    encode = native.load_pure("records").encode_record
    return b"".join(encode(i, i * 7, b"key-%d" % i if i % 3 else None, value if i % 4 else None, headers)
                    for i in range(n))


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 128 * 1024])
def test_records_split_anywhere_across_pieces_validate(twin: ModuleType, chunk: int) -> None:
    raw = _records(40, b"x" * 300)
    for codec in [CODEC_NONE, *CODECS]:
        pieces = iter_decompressed(codec, compress(codec, raw), chunk=chunk)
        assert twin.validate_record_stream(pieces, 40, 1 << 20) == len(raw)


@pytest.mark.parametrize("raw,count,message", [
    (_records(3), 4, "3 records, recordsCount says 4"),
    (_records(4), 3, "more records than recordsCount 3"),
    (hb.records([0, 2, 1]), 3, "record 1: offset delta 2"),
    (hb.records([5]), 1, "record 0: offset delta 5"),
    (_records(2)[:-1], 2, "record 1: truncated"),
    (b"\x04" + _records(1)[1:], 1, "record 0: length 2"),
    (b"", 1, "0 records, recordsCount says 1"),
    (b"\xff\xff\xff\xff\xff\x01", 1, "record 0: varint too long"),
    (b"\x20\x00" + b"\xff" * 10 + b"\x01\x00\x01\x01\x00", 1, "record 0: varint too long"),  # 11-byte timestamp
    (b"\x1e\x00" + b"\xff" * 9 + b"\x01\x00\x01\x01\x00", 2, "1 records, recordsCount says 2"),  # 10 bytes: fine
])
def test_malformed_record_streams_are_corrupt(twin: ModuleType, raw: bytes, count: int, message: str) -> None:
    for chunk in (1, 5, 1 << 17):
        with pytest.raises(CorruptMessageError, match=message):
            twin.validate_record_stream(iter_decompressed(CODEC_NONE, raw, chunk=chunk), count, 1 << 20)


def test_field_lengths_must_stay_inside_their_record(twin: ModuleType) -> None:
    good = hb.records([0], b"abc")  # length, attributes, ts, delta, key "k0", value "abc", 0 headers
    longer_value = bytearray(good)
    longer_value[good.index(b"abc") - 1] = 2 * 9  # value length 9 > what is left of the record
    with pytest.raises(CorruptMessageError, match="overrun"):
        twin.validate_record_stream([bytes(longer_value)], 1, 1 << 20)
    bigger_record = bytearray(good)
    bigger_record[0] += 2  # record length says one more byte than its fields take
    with pytest.raises(CorruptMessageError):
        twin.validate_record_stream([bytes(bigger_record) + b"\x00"], 1, 1 << 20)
    null_header_key = native.load_pure("records").encode_record(0, 0, b"k", b"v", [("h", b"x")])
    nk = bytearray(null_header_key)
    nk[nk.index(b"h") - 1] = 1  # header key length -1
    with pytest.raises(CorruptMessageError, match="field length -1"):
        twin.validate_record_stream([bytes(nk)], 1, 1 << 20)


def test_bound_stops_the_stream_after_one_piece_past_it(twin: ModuleType) -> None:
    pulled = []

    def pieces():  # one record whose value is 1 GiB of zeros
        yield hb._bomb_record_head(1 << 30)
        for _ in range(1000):
            pulled.append(1)
            yield b"\x00" * 1024

    with pytest.raises(MessageTooLargeError):
        twin.validate_record_stream(pieces(), 1, 10 * 1024)
    assert len(pulled) == 10


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_validate_and_bad_ones_raise(codec: int) -> None:
    good = encode_batch([(1, b"k%d" % i, b"v" * 1000, [("h", b"x")]) for i in range(50)], codec)
    size = len(b"".join(iter_decompressed(codec, good[61:])))
    assert validate_compressed_records(good, 1 << 20) == size > 50_000
    assert validate_compressed_records(good + good, 1 << 20) == 2 * size
    with pytest.raises(MessageTooLargeError, match="batch at 0: records decompress to more than 10000 bytes"):
        validate_compressed_records(good, 10_000)
    for bad in (hb.garbage(codec), hb.truncated(codec)):
        with pytest.raises(CorruptMessageError, match=f"batch at {len(good)}:"):
            validate_compressed_records(good + bad, 1 << 20)


def test_uncompressed_and_unreadable_sets_are_left_to_validate_batches() -> None:
    plain = encode_batch([(1, b"k", b"v", [])])
    assert validate_compressed_records(plain, 1 << 20) == 0
    oversized = hb.garbage(CODEC_ZSTD)  # over max.message.bytes: MESSAGE_TOO_LARGE, never decompressed
    assert validate_compressed_records(oversized, 1 << 20, max_batch_size=len(oversized) - 1) == 0
    with pytest.raises(CorruptMessageError):
        validate_compressed_records(oversized, 1 << 20, max_batch_size=len(oversized))
    assert validate_compressed_records(b"\x00" * 30, 1 << 20) == 0  # too short for a header
    legacy = bytearray(hb.garbage(CODEC_GZIP))
    legacy[16] = 1  # magic 1: validate_batches answers UNSUPPORTED_VERSION-style errors
    assert validate_compressed_records(bytes(legacy), 1 << 20) == 0


def test_zstd_window_and_declared_content_size_are_not_trusted() -> None:
    import zstandard

    params = zstandard.ZstdCompressionParameters(window_log=27, write_content_size=False)
    big_window = zstandard.ZstdCompressor(compression_params=params).compressobj()
    raw = _records(5)
    payload = big_window.compress(raw) + big_window.flush()
    with pytest.raises(CorruptMessageError):  # a 128 MiB window is not allocated for it
        list(iter_decompressed(CODEC_ZSTD, payload))
    lying = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(raw))
    lying[5] = 1  # frame content size field (1 byte, single segment) now says 1 byte
    with pytest.raises(CorruptMessageError):
        list(iter_decompressed(CODEC_ZSTD, bytes(lying)))


_BASES = [encode_batch([(1_700_000_000_000 + i, b"k%d" % i, b"value-%d" % i * 20, [("h", b"x")]) for i in range(6)], c)
          for c in CODECS]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(_BASES) - 1), chunk=st.sampled_from([1, 3, 17, 1 << 17]),
       edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 40))
def test_twins_agree_on_mutated_compressed_batches(which: int, chunk: int, edits, cut: int) -> None:
    compiled = native.load_compiled("records")
    pure = native.load_pure("records")
    base = _BASES[which]
    codec = base[22] & 7
    payload = bytearray(base[61:])
    raw = bytearray(b"".join(iter_decompressed(codec, bytes(payload))))
    for pos, value in edits:  # mutate the decompressed records, then the compressed bytes
        raw[pos % len(raw)] = value
    if cut:
        raw = raw[: len(raw) - cut]
    mutated = [bytes(raw), compress(codec, bytes(raw))]
    flipped = bytearray(payload)
    flipped[edits[0][0] % len(flipped)] ^= 1 << (edits[0][1] % 8)
    mutated.append(bytes(flipped))

    def outcome(twin: ModuleType, data: bytes, decompress: bool):
        try:
            pieces = iter_decompressed(codec, data, chunk=chunk) if decompress else [data]
            return ("ok", twin.validate_record_stream(pieces, 6, 1 << 20))
        except (CorruptMessageError, MessageTooLargeError) as exc:
            message = str(exc)
            if message.startswith("bad ") and " data: " in message:
                # the decompressor's own words, not the twins': zstd names the same corrupt frame
                # "Data corruption detected" or "Destination buffer is too small" depending on
                # what its thread's context decoded before (seen once in ~40,000 examples)
                message = message.split(": ", 1)[0]
            return (type(exc).__name__, message)

    assert outcome(compiled, mutated[0], False) == outcome(pure, mutated[0], False)
    for data in mutated[1:]:
        assert outcome(compiled, data, True) == outcome(pure, data, True)


def _extreme_records() -> bytes:
    """Records whose varints take their longest legal forms (a 10-byte timestamp delta, 5-byte
    lengths), empty and null fields, and several headers."""
    encode = native.load_pure("records").encode_record
    return b"".join([encode(0, -(1 << 63), b"k", b"v", [("h", b"x")]),
                     encode(1, (1 << 63) - 1, None, None, []),
                     encode(2, 0, b"", b"", [("", b""), ("h2", None), ("h3", b"y" * 200)]),
                     encode(3, -1, b"k" * 300, b"v" * 70_000, [])])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=0, max_size=3),
       cut=st.integers(0, 3), count=st.integers(3, 5), chunk=st.sampled_from([1, 2, 9, 1 << 20]))
def test_twins_agree_on_uncompressed_record_streams_whole_or_in_pieces(edits, cut: int, count: int,
                                                                         chunk: int) -> None:
    """The compiled twin reads a record lying wholly in its piece in one go (an uncompressed
    batch is one piece) and walks the others byte by byte: both ways, and the pure twin, give
    the same answer and the same error for records mutated anywhere."""
    compiled = native.load_compiled("records")
    pure = native.load_pure("records")
    raw = bytearray(_extreme_records())
    head = len(raw) - 70_000 - 300 - 12  # edits land before the long value mostly
    for pos, value in edits:
        raw[pos % head] = value
    data = bytes(raw[: len(raw) - cut])

    def outcome(twin: ModuleType, size: int):
        try:
            return ("ok", twin.validate_record_stream(iter_decompressed(CODEC_NONE, data, chunk=size), count, 1 << 20))
        except (CorruptMessageError, MessageTooLargeError) as exc:
            return (type(exc).__name__, str(exc))

    whole = outcome(compiled, len(data) + 1)
    assert whole == outcome(compiled, chunk) == outcome(pure, len(data) + 1)
    if not edits and not cut:
        assert (whole[0] == "ok") == (count == 4)


def test_zstd_batches_validate_concurrently_in_several_threads() -> None:
    """The log cleaner's thread and the event loop both decompress (each thread has its own
    zstd decompressor)."""
    import threading

    batches = [encode_batch([(1, b"k%d" % i, os.urandom(50) * (20 + t), []) for i in range(30)], CODEC_ZSTD)
               for t in range(4)]
    expected = [validate_compressed_records(b, 1 << 20) for b in batches]
    results: dict[int, list[int]] = {}

    def run(t: int) -> None:
        results[t] = [validate_compressed_records(batches[t], 1 << 20) for _ in range(100)]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(results[t] == [expected[t]] * 100 for t in range(4))


@pytest.mark.parametrize("chunk", [1, 3, 128 * 1024])
def test_the_walk_reports_the_smallest_and_largest_timestamp_delta(twin: ModuleType, chunk: int) -> None:
    encode = native.load_pure("records").encode_record
    deltas = [0, 5, -3, 2**40, -(2**41), 7, 2**62, -(2**63)]  # varlongs of 1 to 10 bytes, either sign
    for n in range(1, len(deltas) + 1):
        raw = b"".join(encode(i, d, b"k", b"v" * (i * 50), [("h", b"x")]) for i, d in enumerate(deltas[:n]))
        for codec in [CODEC_NONE, CODEC_ZSTD]:
            pieces = iter_decompressed(codec, compress(codec, raw), chunk=chunk)
            size, lowest, highest = twin.validate_record_stream(pieces, n, 1 << 20, True)
            assert (size, lowest, highest) == (len(raw), min(deltas[:n]), max(deltas[:n]))


def test_validate_compressed_records_reports_each_batchs_record_timestamps() -> None:
    first = encode_batch([(1_000 + d, b"k", b"v", []) for d in (7, 3, 9)], CODEC_GZIP)
    second = encode_batch([(50_000, None, b"w", [])], CODEC_NONE)
    found: list = []
    validate_compressed_records(first + second, 1 << 20, 1 << 20, found)
    assert [(pos, lowest, highest) for pos, _, lowest, highest in found] == [(0, 1_003, 1_009),
                                                                              (len(first), 50_000, 50_000)]
    assert [h.records_count for _, h, _, _ in found] == [3, 1]
