"""Hypothesis round trips: batches (random keys/values/headers, None, every codec) and varints."""
from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafast import native
from kafkafast.records import BatchBuilder, decode_batch, encode_batch

INT64 = st.integers(-(2**63), 2**63 - 1)
TIMESTAMPS = st.integers(0, 2**45)


def _twins() -> list[ModuleType]:
    twins = [native.load_pure("records")]
    try:
        twins.append(native.load_compiled("records"))
    except ImportError:
        pass
    return twins


TWINS = _twins()

nullable_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), nullable_bytes), max_size=4)
records = st.lists(st.tuples(TIMESTAMPS, nullable_bytes, nullable_bytes, headers), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=records, codec_id=st.integers(0, 4), base_offset=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
def test_batch_encode_decode_round_trip(recs: list, codec_id: int, base_offset: int, epoch: int) -> None:  # type: ignore[type-arg]
    batch = encode_batch(recs, codec_id, base_offset=base_offset, partition_leader_epoch=epoch)
    for twin in TWINS:
        (h,) = twin.validate_batches(batch, len(batch))
        assert (h.records_count, h.compression, h.base_offset, h.partition_leader_epoch) == (len(recs), codec_id, base_offset, epoch)
        assert h.first_timestamp == recs[0][0] and h.max_timestamp == max(r[0] for r in recs)
    header, decoded = decode_batch(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(recs)
    ]


@settings(max_examples=100, deadline=None)
@given(recs=records, codec_id=st.integers(0, 4))
def test_both_twins_encode_identical_records_and_decode_them(recs: list, codec_id: int) -> None:  # type: ignore[type-arg]
    first = recs[0][0]
    encodings = {tuple(twin.encode_record(i, ts - first, k, v, h) for i, (ts, k, v, h) in enumerate(recs)) for twin in TWINS}
    assert len(encodings) == 1
    payload = b"".join(next(iter(encodings)))
    for twin in TWINS:
        decoded = twin.decode_records(payload, len(recs), 7, first)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
            (7 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(recs)
        ]


@settings(max_examples=50, deadline=None)
@given(recs=records, split=st.integers(1, 5))
def test_assign_offsets_over_several_batches(recs: list, split: int) -> None:  # type: ignore[type-arg]
    chunks = [recs[i : i + split] for i in range(0, len(recs), split)]
    buf = b"".join(encode_batch(c) for c in chunks)
    for twin in TWINS:
        data = bytearray(buf)
        assert twin.assign_offsets(data, 500, 3) == 500 + len(recs)
        starts = [h.base_offset for h in twin.validate_batches(data, len(data))]
        assert starts == [500 + i * split for i in range(len(chunks))]


@pytest.mark.parametrize("twin", TWINS, ids=lambda m: m.__name__)
@settings(max_examples=300, deadline=None)
@given(n=INT64)
def test_varint_round_trip_full_int64_range(twin: ModuleType, n: int) -> None:
    encoded = twin.encode_varint(n)
    assert twin.decode_varint(encoded, 0) == (n, len(encoded))
    assert 1 <= len(encoded) <= 10


@pytest.mark.parametrize("twin", TWINS, ids=lambda m: m.__name__)
@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 2**64 - 1), prefix=st.binary(max_size=3))
def test_uvarint_round_trip_full_uint64_range(twin: ModuleType, n: int, prefix: bytes) -> None:
    encoded = twin.encode_uvarint(n)
    assert twin.decode_uvarint(prefix + encoded + b"\xff", len(prefix)) == (n, len(prefix) + len(encoded))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=40), pos=st.integers(0, 45))
def test_twins_agree_on_arbitrary_varint_bytes(data: bytes, pos: int) -> None:
    def outcome(fn):  # type: ignore[no-untyped-def]
        try:
            return fn(data, pos)
        except ValueError as exc:
            return type(exc)

    for name in ("decode_varint", "decode_uvarint"):
        assert len({outcome(getattr(t, name)) for t in TWINS}) == 1


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 2000), min_size=1, max_size=20), limit=st.integers(100, 20000))
def test_builder_never_exceeds_max_size_after_first_record(sizes: list[int], limit: int) -> None:
    builder = BatchBuilder(max_size=limit)
    accepted = [s for s in sizes if builder.append(1, None, b"x" * s)]
    batch = builder.build()
    assert len(batch) == builder.estimated_size
    assert len(batch) <= limit or len(accepted) == 1
    assert decode_batch(batch)[0].records_count == len(accepted)


# ---------------------------------------------------------------------------- legacy conversion
legacy_records = st.lists(st.tuples(TIMESTAMPS, nullable_bytes, nullable_bytes), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=legacy_records, codec_id=st.integers(0, 3), magic=st.integers(0, 2), base_offset=st.integers(0, 2**40),
       log_append=st.booleans())
def test_down_and_up_conversion_round_trip(recs: list, codec_id: int, magic: int, base_offset: int,  # type: ignore[type-arg]
                                           log_append: bool) -> None:
    """A v2 batch down-converted to magic 0/1 (Fetch v0-3) reads back as the same records
    with the same codec, and up-converted again (Produce v0-2) gives a v2 batch holding them;
    magic 2 passes through up-conversion unchanged."""
    from kafkafast.records import iter_record_batches
    from kafkafast.records.convert import downconvert, upconvert

    batch = bytearray(encode_batch([(ts, k, v, []) for ts, k, v in recs], codec_id, base_offset=base_offset))
    if log_append:  # the log sets the timestamp type bit and maxTimestamp on append
        batch[22] |= 0x08
    header, _ = decode_batch(batch, check_crc=False)
    ts_of = [header.max_timestamp if log_append else ts for ts, _, _ in recs]
    if magic == 2:
        assert upconvert(batch, 1 << 24) == batch
        return
    legacy = downconvert(batch, magic)
    entries = list(iter_record_batches(legacy))
    assert {h.magic for h, _ in entries} == {magic}
    assert {h.compression for h, _ in entries} == {codec_id}
    if codec_id:
        assert len(entries) == 1 and entries[0][0].offset == base_offset + len(recs) - 1
    got = [r for _, rs in entries for r in rs]
    assert [(r.offset, r.key, r.value) for r in got] == [(base_offset + i, k, v) for i, (_, k, v) in enumerate(recs)]
    assert [r.timestamp for r in got] == (ts_of if magic == 1 else [-1] * len(recs))
    again = upconvert(legacy, 1 << 24)
    (h2, back), = list(iter_record_batches(again))
    assert h2.magic == 2 and h2.compression == codec_id and h2.records_count == len(recs)
    assert [(r.key, r.value) for r in back] == [(k, v) for _, k, v in recs]
    assert [r.timestamp for r in back] == (ts_of if magic == 1 else [-1] * len(recs))


@settings(max_examples=30, deadline=None)
@given(recs=legacy_records)
def test_zstd_is_not_down_converted(recs: list) -> None:  # type: ignore[type-arg]
    from kafkafast.protocol.errors import UnsupportedCompressionTypeError
    from kafkafast.records.convert import downconvert

    batch = encode_batch([(ts, k, v, []) for ts, k, v in recs], 4)
    for magic in (0, 1):
        with pytest.raises(UnsupportedCompressionTypeError):
            downconvert(batch, magic)


def test_magic0_lz4_uses_the_broken_header_checksum() -> None:
    """Magic-0 LZ4 wrappers carry Kafka 0.8/0.9's header checksum (computed over the frame
    magic too), which a strict LZ4 frame decoder refuses; magic 1 uses the correct one."""
    import lz4.frame

    from kafkafast.records.convert import legacy_compress
    from kafkafast.records.lz4_legacy import LZ4_MAGIC, xxh32

    data = b"legacy lz4 " * 50
    old, new = legacy_compress(3, 0, data), legacy_compress(3, 1, data)
    assert old[:4] == new[:4] == LZ4_MAGIC and old[7:] == new[7:]
    assert old[6] == (xxh32(old[:6]) >> 8) & 0xFF and new[6] == (xxh32(new[4:6]) >> 8) & 0xFF
    assert lz4.frame.decompress(new) == data
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(old)
