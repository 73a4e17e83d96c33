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
