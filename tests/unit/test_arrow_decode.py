"""The arrow_decode twins: fetched record sets decoded into Arrow columns.

Both twins (compiled and pure) must make identical RecordBatches from the same bytes, and
those must hold exactly what the record codec's ConsumerRecord decoder finds there:
random keys, values and headers (nulls included), every codec, several records per batch,
offset gaps left by compaction, control batches, LogAppendTime batches, a range cut at
both ends, and batches split by max_records.
"""
from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafast import native
from kafkafast.client import arrow
from kafkafast.client.records import decode_fetched
from kafkafast.protocol.errors import CorruptMessageError
from kafkafast.records import _pure_codec
from kafkafast.records.compression import DecompressBuffer, DecompressedSizeError, compress, decompress
from kafkafast.records.model import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
_HEAD = struct.Struct(">qiib")  # base offset, batch length, leader epoch, magic
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count


def twins():
    out = [pytest.param(native.load_pure("arrow_decode"), id="pure")]
    try:
        out.append(pytest.param(native.load_compiled("arrow_decode"), id="compiled"))
    except ImportError:
        out.append(pytest.param(None, id="compiled", marks=pytest.mark.skip("compiled twin not built")))
    return out


def raw_batch(base_offset: int, records: list[tuple[int, int, bytes | None, bytes | None, list]], *,
              codec: int = CODEC_NONE, control: bool = False, log_append_time: int | None = None,
              first_timestamp: int = 1_700_000_000_000) -> bytes:
    """A v2 batch whose records carry the given (offset_delta, timestamp_delta, key, value,
    headers): offset deltas may leave gaps, as compaction does."""
    payload = b"".join(_pure_codec.encode_record(od, td, k, v, h) for od, td, k, v, h in records)
    payload = compress(codec, payload)
    attributes = codec | (0x08 if log_append_time is not None else 0) | (0x30 if control else 0)
    last_delta = max((r[0] for r in records), default=0)
    max_ts = log_append_time if log_append_time is not None else first_timestamp + max((r[1] for r in records),
                                                                                      default=0)
    tail = _TAIL.pack(attributes, last_delta, first_timestamp, max_ts, 7 if control else -1, 0, -1, len(records))
    body = tail + payload
    crc = crc32c(body)
    return _HEAD.pack(base_offset, 4 + 1 + 4 + len(body), 0, 2) + struct.pack(">I", crc) + body


def decode(twin, buf: bytes, start: int, end: int | None, include_headers: bool = True,
           max_records: int = 10_000, timestamp_unit: str = "ms",
           scratch: DecompressBuffer | None = None) -> tuple[list[pa.RecordBatch], int]:
    columns = twin.ArrowColumns(include_headers, timestamp_unit)
    next_offset = arrow.decode_fetched_arrow(columns, buf, start, end, scratch=scratch)
    batches = list(arrow.record_batches(columns, max_records))
    for b in batches:
        b.validate(full=True)
    return batches, next_offset


def rows(batches: list[pa.RecordBatch]) -> list[dict]:
    return [row for b in batches for row in b.to_pylist()]


def expected_rows(buf: bytes, start: int, end: int | None) -> tuple[list[dict], int]:
    records, next_offset = decode_fetched(buf, "t", 0, start, end)
    return [{"offset": r.offset, "timestamp_ms": r.timestamp, "timestampType": r.timestamp_type, "key": r.key,
             "value": r.value, "headers": [{"key": k, "value": v} for k, v in r.headers]} for r in records], next_offset


def as_plain(row: dict) -> dict:
    row = dict(row)
    ts = row.pop("timestamp")
    row["timestamp_ms"] = round(ts.timestamp() * 1000)
    return row


blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)
record = st.tuples(st.integers(0, 3), st.integers(-5, 5000), blobs, blobs, headers)  # (gap, ts delta, k, v, h)


@st.composite
def record_sets(draw):
    """A fetched record set: batches of records with offset gaps, some compressed, some
    control batches, some with LogAppendTime, optionally a truncated last batch."""
    out = []
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 5))):
        recs, delta = [], 0
        for gap, td, k, v, h in draw(st.lists(record, min_size=1, max_size=8)):
            recs.append((delta, td, k, v, h))
            delta += 1 + gap
        control = draw(st.integers(0, 5)) == 0
        if control:
            recs = [(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])]
        lat = draw(st.one_of(st.none(), st.integers(0, 2**41)))
        out.append(raw_batch(offset, recs, codec=draw(st.sampled_from(CODECS)), control=control, log_append_time=lat))
        offset += recs[-1][0] + 1 + draw(st.integers(0, 3))
    buf = b"".join(out)
    if draw(st.booleans()):
        buf += out[-1][: draw(st.integers(1, len(out[-1]) - 1))]  # a partial batch, as brokers cut them
    return buf


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buf=record_sets(), cut=st.tuples(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 60))),
       include_headers=st.booleans(), max_records=st.integers(1, 12), unit=st.sampled_from(["ms", "us"]),
       reuse=st.booleans())
def test_twins_make_identical_batches_holding_what_the_record_decoder_finds(buf, cut, include_headers, max_records,
                                                                            unit, reuse):
    first = _pure_codec.read_batch_header(buf, 0).base_offset
    start = first + cut[0]
    end = None if cut[1] is None else start + cut[1]
    want, want_next = expected_rows(buf, start, end)
    results = []
    for param in twins():
        twin = param.values[0]
        if twin is None:
            continue
        scratch = DecompressBuffer() if reuse else None
        batches, next_offset = decode(twin, buf, start, end, include_headers, max_records, unit, scratch)
        assert next_offset == want_next
        assert all(0 < b.num_rows <= max_records for b in batches)
        assert all(b.schema == arrow.record_schema(include_headers, unit) for b in batches)
        got = [as_plain(r) for r in rows(batches)]
        if not include_headers:
            got = [dict(r, headers=w["headers"]) for r, w in zip(got, want)]
        assert got == want
        results.append(pa.Table.from_batches(batches, arrow.record_schema(include_headers, unit)))
    if len(results) == 2:
        assert results[0].equals(results[1])


@pytest.mark.parametrize("twin", twins())
def test_control_batches_are_skipped_and_their_offsets_passed(twin):
    data = raw_batch(10, [(0, 0, b"k0", b"v0", []), (1, 1, b"k1", b"v1", [])])
    marker = raw_batch(12, [(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])], control=True)
    batches, next_offset = decode(twin, data + marker, 0, None)
    assert [r["offset"] for r in rows(batches)] == [10, 11]
    assert next_offset == 13


@pytest.mark.parametrize("twin", twins())
def test_skip_batch_hook_drops_whole_batches(twin):
    a = raw_batch(0, [(0, 0, b"a", b"a", [])])
    b = raw_batch(1, [(0, 0, b"b", b"b", [])])
    columns = twin.ArrowColumns(False)
    next_offset = arrow.decode_fetched_arrow(columns, a + b, 0, skip_batch=lambda h: h.base_offset == 0)
    assert next_offset == 2
    assert [r["key"] for r in rows(list(arrow.record_batches(columns)))] == [b"b"]


@pytest.mark.parametrize("twin", twins())
def test_log_append_time_and_nulls(twin):
    buf = raw_batch(5, [(0, 3, None, b"v", [("h", None)]), (2, 9, b"k", None, [])], log_append_time=1234,
                    codec=CODEC_ZSTD)
    (batch,), _ = decode(twin, buf, 0, None)
    assert batch.column("offset").to_pylist() == [5, 7]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1234, 1234]
    assert batch.column("timestampType").to_pylist() == [1, 1]
    assert batch.column("key").to_pylist() == [None, b"k"]
    assert batch.column("value").to_pylist() == [b"v", None]
    assert batch.column("headers").to_pylist() == [[{"key": "h", "value": None}], []]
    assert batch.column("key").null_count == 1 and batch.column("value").null_count == 1


@pytest.mark.parametrize("twin", twins())
def test_bad_records_raise_corrupt_message_with_the_records_before_kept(twin):
    good = _pure_codec.encode_record(0, 0, b"k", b"v", [])
    bad = _pure_codec.encode_record(1, 0, b"k", b"v", [("h", b"x")])
    bad = bad[:-4] + b"\x7f" + bad[-3:]  # header value length past the record
    columns = twin.ArrowColumns(True)
    with pytest.raises(CorruptMessageError):
        columns.add_records(good + bad, 2, 0, 0, -1, 0, -1)
    assert len(columns) == 1
    not_utf8 = _pure_codec.encode_record(0, 0, b"k", b"v", [(b"\xff", b"x")])
    with pytest.raises(CorruptMessageError):
        twin.ArrowColumns(False).add_records(not_utf8, 1, 0, 0, -1, 0, -1)
    # A record count far beyond what the payload holds fails; nothing is sized by it.
    with pytest.raises(CorruptMessageError):
        twin.ArrowColumns(True).add_records(good, 2**31 - 1, 0, 0, -1, 0, -1)


@pytest.mark.parametrize("twin", twins())
def test_crc_mismatch_raises(twin):
    buf = bytearray(raw_batch(0, [(0, 0, b"k", b"v", [])]))
    buf[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        decode(twin, bytes(buf), 0, None)


@pytest.mark.parametrize("twin", twins())
def test_legacy_records_are_added_one_by_one(twin):
    columns = twin.ArrowColumns(True)
    columns.add_record(3, 100, 0, b"k", None, [("a", b"1")])
    columns.add_record(4, 101, 1, None, b"v", [])
    (batch,) = arrow.record_batches(columns)
    assert batch.to_pylist()[0]["headers"] == [{"key": "a", "value": b"1"}]
    assert batch.column("value").to_pylist() == [None, b"v"]
    assert batch.column("timestampType").to_pylist() == [0, 1]


@pytest.mark.parametrize("twin", twins())
def test_columns_start_empty_after_take(twin):
    buf = raw_batch(0, [(i, 0, b"k%d" % i, b"v" * i, [("h", b"%d" % i)]) for i in range(50)])
    columns = twin.ArrowColumns(True)
    arrow.decode_fetched_arrow(columns, buf, 0)
    first = list(arrow.record_batches(columns, 20))
    assert [b.num_rows for b in first] == [20, 20, 10]
    assert len(columns) == 0 and columns.data_bytes == 0
    arrow.decode_fetched_arrow(columns, buf, 25)
    (second,) = arrow.record_batches(columns)
    assert second.column("offset").to_pylist() == list(range(25, 50))
    assert second.to_pylist() == pa.Table.from_batches(first).slice(25).to_pylist()


@pytest.mark.parametrize("twin", twins())
def test_microsecond_timestamps_and_their_overflow(twin):
    buf = raw_batch(0, [(0, 0, b"k", b"v", []), (1, 7, b"k", b"v", [])], first_timestamp=1_700_000_000_123)
    (batch,), _ = decode(twin, buf, 0, None, timestamp_unit="us")
    assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000, 1_700_000_000_130_000]
    too_late = raw_batch(0, [(0, 0, b"k", b"v", [])], first_timestamp=2**62)
    columns = twin.ArrowColumns(False, "us")
    with pytest.raises(OverflowError):
        arrow.decode_fetched_arrow(columns, too_late, 0)
    with pytest.raises(OverflowError):
        columns.add_record(0, -2**62, 0, b"k", b"v", [])
    assert len(columns) == 0
    with pytest.raises(ValueError):
        twin.ArrowColumns(False, "ns")


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompress_buffer_is_reused_and_bounded(codec):
    payloads = [bytes(range(256)) * 300, b"x" * 50_000, b"y" * 70_000]
    scratch = DecompressBuffer(max_size=100_000)
    for data in payloads:
        assert bytes(scratch.decompress(codec, compress(codec, data))) == data
    capacity = scratch.capacity
    assert 76_800 <= capacity <= 100_000
    view = scratch.decompress(codec, compress(codec, payloads[1]))
    assert bytes(view) == payloads[1] and scratch.capacity == capacity  # no new allocation
    with pytest.raises(DecompressedSizeError):  # a bomb stops at the bound
        scratch.decompress(codec, compress(codec, b"z" * 100_001))
    assert scratch.capacity <= 100_000
    assert bytes(DecompressBuffer().decompress(codec, compress(codec, b"a" * 1000))) == decompress(codec, compress(
        codec, b"a" * 1000))
