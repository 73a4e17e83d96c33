"""Record batch v2: golden bytes, validation errors, in-place offsets, recovery scan, varints.

Every twin-level test runs against both the compiled twin and the pure twin.
"""
from __future__ import annotations

import os
import random
import struct
import zlib
from types import ModuleType

import pytest
from crc32c import crc32c

from kafkafast import native
from kafkafast.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from kafkafast.protocol.primitives import DecodeError
from kafkafast.records import (
    BATCH_HEADER_SIZE,
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_ZSTD,
    TIMESTAMP_CREATE,
    TIMESTAMP_LOG_APPEND,
    BatchBuilder,
    BatchHeader,
    LegacyHeader,
    Record,
    compress,
    decode_batch,
    encode_batch,
    iter_record_batches,
)


@pytest.fixture(params=["cython", "pure"])
def codec(request: pytest.FixtureRequest) -> ModuleType:
    """The records twin under test: compiled, then pure."""
    if request.param == "pure":
        return native.load_pure("records")
    try:
        return native.load_compiled("records")
    except ImportError:
        pytest.skip("compiled twin not built")


def test_compiled_twins_loaded_when_required() -> None:
    if os.environ.get("KAFKAFAST_REQUIRE_NATIVE") != "1":
        pytest.skip("KAFKAFAST_REQUIRE_NATIVE=1 not set")
    assert not native.FORCE_PURE
    assert native.native_status() == {name: "cython" for name in native.PURE_MODULES}
    assert native.load("records").__name__ == "kafkafast._native.records"
    assert native.load("index_search").__name__ == "kafkafast._native.index_search"


def test_native_status_names_every_twin() -> None:
    status = native.native_status()
    assert set(status) == set(native.PURE_MODULES)
    assert set(status.values()) <= {"cython", "pure"}



@pytest.mark.parametrize(
    "first_import",
    ["import kafkafast.records", "import kafkafast._native.records", "from kafkafast.native import native_status; native_status()"],
)
def test_twins_load_whichever_module_is_imported_first(first_import: str) -> None:
    """The twins import kafkafast.records.model, whose package imports the twins: no cycle may bite."""
    import subprocess
    import sys

    code = f"{first_import}\nfrom kafkafast.records import encode_batch, validate_batches\nvalidate_batches(encode_batch([(1, None, b'v', [])]), 1000)"
    for env_pure in ("0", "1"):
        env = {**os.environ, "KAFKAFAST_PURE": env_pure}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr

# ---------------------------------------------------------------------------- golden bytes

# Captured from kafka-python's DefaultRecordBatchBuilder: producerId 4242, epoch 3,
# baseSequence 17, partitionLeaderEpoch 0, records
#   (ts 1700000000000, key b"key", value b"value", headers [("h1", b"v1")])
#   (ts 1700000000005, key None, value b"second", no headers)
GOLDEN = bytes.fromhex(
    "0000000000000000000000530000000002b8ce98df0000000000010000018bcfe568000000018bcfe5680500"
    "000000000010920003000000110000000228000000066b65790a76616c75650204683104763118000a02010c"
    "7365636f6e6400"
)
GOLDEN_RECORDS = [
    (1700000000000, b"key", b"value", [("h1", b"v1")]),
    (1700000000005, None, b"second", []),
]


def _hand_built_batch() -> bytes:
    """A batch assembled field by field from the grammar in batch.py (no codec code involved)."""
    # record: length 8 | attributes 0 | tsDelta 0 | offsetDelta 0 | key len 1 "k" | value len 1 "v" | 0 headers
    record0 = bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x00])
    # record: length 8 | attributes 0 | tsDelta +2 (zigzag 4) | offsetDelta 1 (zigzag 2) | null key | value "vv" | 0 headers
    record1 = bytes([0x10, 0x00, 0x04, 0x02, 0x01, 0x04]) + b"vv" + bytes([0x00])
    records = record0 + record1
    tail = struct.pack(">hiqqqhii", 0, 1, 1000, 1002, -1, -1, -1, 2)
    head = struct.pack(">qiib", 0, 49 + len(records), -1, 2)
    crc = crc32c(tail + records)
    return head + struct.pack(">I", crc) + tail + records


def test_golden_batch_header_fields(codec: ModuleType) -> None:
    h = codec.read_batch_header(GOLDEN)
    assert h == BatchHeader(
        base_offset=0, batch_length=83, partition_leader_epoch=0, magic=2, crc=0xB8CE98DF,
        attributes=0, last_offset_delta=1, first_timestamp=1700000000000,
        max_timestamp=1700000000005, producer_id=4242, producer_epoch=3, base_sequence=17,
        records_count=2,
    )
    assert h.size == len(GOLDEN) == 95
    assert (h.last_offset, h.next_offset, h.last_sequence) == (1, 2, 18)
    assert (h.compression, h.timestamp_type, h.is_transactional, h.is_control) == (CODEC_NONE, TIMESTAMP_CREATE, False, False)


def test_golden_batch_crc_is_crc32c_from_attributes_on(codec: ModuleType) -> None:
    assert crc32c(GOLDEN[21:]) == 0xB8CE98DF
    assert codec.batch_crc_ok(GOLDEN, 0, len(GOLDEN))
    assert not codec.batch_crc_ok(GOLDEN[:-1] + b"\x01", 0, len(GOLDEN))
    assert not codec.batch_crc_ok(GOLDEN, 0, len(GOLDEN) + 1)
    assert not codec.batch_crc_ok(GOLDEN, 0, 20)


def test_golden_batch_validates_and_decodes(codec: ModuleType) -> None:
    assert codec.validate_batches(GOLDEN, 1 << 20) == [codec.read_batch_header(GOLDEN)]
    records = codec.decode_records(GOLDEN[BATCH_HEADER_SIZE:], 2, 100, 1700000000000)
    assert records == [
        Record(100, 1700000000000, b"key", b"value", [("h1", b"v1")], 0),
        Record(101, 1700000000005, None, b"second", [], 0),
    ]


def test_encode_batch_reproduces_golden_bytes() -> None:
    built = encode_batch(GOLDEN_RECORDS, producer_id=4242, producer_epoch=3, base_sequence=17, partition_leader_epoch=0)
    assert built == GOLDEN


def test_hand_built_batch_matches_builder_and_validates(codec: ModuleType) -> None:
    batch = _hand_built_batch()
    assert encode_batch([(1000, b"k", b"v", []), (1002, None, b"vv", [])]) == batch
    (h,) = codec.validate_batches(batch, 1 << 20)
    assert (h.records_count, h.first_timestamp, h.max_timestamp, h.batch_length) == (2, 1000, 1002, len(batch) - 12)
    assert codec.encode_record(0, 0, b"k", b"v", []) == batch[61:70]


def test_decode_batch_makes_offsets_and_timestamps_absolute() -> None:
    header, records = decode_batch(b"\x00" * 5 + GOLDEN, 5)
    assert header.records_count == 2
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (0, 1700000000000, b"key", b"value", [("h1", b"v1")]),
        (1, 1700000000005, None, b"second", []),
    ]


def test_decode_batch_rejects_bad_crc() -> None:
    bad = bytearray(GOLDEN)
    bad[-2] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        decode_batch(bad)
    decode_batch(bad, check_crc=False)  # the flipped byte is inside a value


# ---------------------------------------------------------------------------- validate_batches


def _batch(n: int = 3, codec_id: int = CODEC_NONE, value_size: int = 10, **kw: object) -> bytes:
    return encode_batch([(1000 + i, b"k%d" % i, b"v" * value_size, [("h", b"x")]) for i in range(n)], codec_id, **kw)


def _recrc(batch: bytearray, pos: int = 0) -> bytearray:
    size = struct.unpack_from(">i", batch, pos + 8)[0] + 12
    struct.pack_into(">I", batch, pos + 17, crc32c(bytes(batch[pos + 21 : pos + size])))
    return batch


def test_validate_accepts_several_batches_of_every_codec(codec: ModuleType) -> None:
    buf = b"".join(_batch(i + 1, c) for i, c in enumerate(range(5)))
    headers = codec.validate_batches(buf, 1 << 20)
    assert [h.compression for h in headers] == [0, 1, 2, 3, 4]
    assert [h.records_count for h in headers] == [1, 2, 3, 4, 5]


def test_validate_accepts_all_buffer_types(codec: ModuleType) -> None:
    batch = _batch()
    for buf in (batch, bytearray(batch), memoryview(batch), memoryview(b"xx" + batch)[2:]):
        assert len(codec.validate_batches(buf, 1 << 20)) == 1


def test_validate_rejects_empty_record_set(codec: ModuleType) -> None:
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(b"", 1 << 20)


def test_validate_rejects_bad_crc(codec: ModuleType) -> None:
    bad = bytearray(_batch())
    bad[-3] ^= 0x01
    with pytest.raises(CorruptMessageError, match="CRC"):
        codec.validate_batches(bad, 1 << 20)


@pytest.mark.parametrize("cut", [1, 10, 40, 60, 61, 70])
def test_validate_rejects_truncated_batch(codec: ModuleType, cut: int) -> None:
    batch = _batch()
    with pytest.raises(CorruptMessageError):
        codec.validate_batches(batch[:cut] if cut < 61 else batch[: len(batch) - (cut - 60)], 1 << 20)


def test_validate_rejects_trailing_partial_batch(codec: ModuleType) -> None:
    with pytest.raises(CorruptMessageError):
        codec.validate_batches(_batch() + _batch()[:30], 1 << 20)


@pytest.mark.parametrize("batch_length", [-1, 0, 48, 0x7FFFFFFF])
def test_validate_rejects_lying_batch_length(codec: ModuleType, batch_length: int) -> None:
    bad = bytearray(_batch())
    struct.pack_into(">i", bad, 8, batch_length)
    with pytest.raises(CorruptMessageError):
        codec.validate_batches(bad, 1 << 40)


def test_validate_rejects_batch_over_max_size(codec: ModuleType) -> None:
    batch = _batch()
    assert codec.validate_batches(batch, len(batch))
    with pytest.raises(MessageTooLargeError):
        codec.validate_batches(batch, len(batch) - 1)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_validate_rejects_unknown_codec(codec: ModuleType, codec_id: int) -> None:
    bad = bytearray(_batch())
    bad[22] = (bad[22] & ~7) | codec_id
    with pytest.raises(UnsupportedCompressionTypeError):
        codec.validate_batches(_recrc(bad), 1 << 20)


@pytest.mark.parametrize("magic", [0, 1])
def test_validate_rejects_legacy_magic(codec: ModuleType, magic: int) -> None:
    bad = bytearray(_batch())
    bad[16] = magic
    with pytest.raises(UnsupportedForMessageFormatError):
        codec.validate_batches(bad, 1 << 20)
    with pytest.raises(UnsupportedForMessageFormatError):
        codec.validate_batches(_legacy_message_set(magic), 1 << 20)


def test_validate_rejects_unknown_magic(codec: ModuleType) -> None:
    bad = bytearray(_batch())
    bad[16] = 3
    with pytest.raises(CorruptMessageError):
        codec.validate_batches(bad, 1 << 20)


@pytest.mark.parametrize(("count", "last_delta"), [(2, 2), (4, 2), (0, -1), (-1, -2), (3, 1)])
def test_validate_rejects_count_mismatch(codec: ModuleType, count: int, last_delta: int) -> None:
    bad = bytearray(_batch(3))
    struct.pack_into(">i", bad, 57, count)
    struct.pack_into(">i", bad, 23, last_delta)
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(_recrc(bad), 1 << 20)


def test_validate_rejects_records_not_filling_batch(codec: ModuleType) -> None:
    # Append a stray byte inside the batch (length and CRC fixed up): the record walk finds it.
    bad = bytearray(_batch(3) + b"\x00")
    struct.pack_into(">i", bad, 8, len(bad) - 12)
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(_recrc(bad), 1 << 20)


def test_validate_rejects_record_length_beyond_batch(codec: ModuleType) -> None:
    bad = bytearray(_batch(1))
    bad[61] = 0x7E  # zigzag 63: longer than what is left
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(_recrc(bad), 1 << 20)


def test_validate_rejects_fewer_records_than_count(codec: ModuleType) -> None:
    two = bytearray(_batch(2))
    struct.pack_into(">i", two, 57, 3)
    struct.pack_into(">i", two, 23, 2)
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(_recrc(two), 1 << 20)


def test_validate_does_not_walk_compressed_records(codec: ModuleType) -> None:
    # A compressed batch is opaque: garbage "compressed" bytes with a valid CRC pass.
    bad = bytearray(_batch(2, CODEC_GZIP))
    bad[61:] = b"\xff" * (len(bad) - 61)
    assert codec.validate_batches(_recrc(bad), 1 << 20)[0].records_count == 2


# ---------------------------------------------------------------------------- assign_offsets


def test_assign_offsets_writes_running_offsets_and_epoch(codec: ModuleType) -> None:
    buf = bytearray(_batch(3) + _batch(2, CODEC_ZSTD) + _batch(1))
    before = bytes(buf)
    assert codec.assign_offsets(buf, 1000, 7) == 1006
    headers = codec.validate_batches(buf, 1 << 20)  # CRCs still valid
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(1000, 7), (1003, 7), (1005, 7)]
    assert [h.timestamp_type for h in headers] == [TIMESTAMP_CREATE] * 3
    assert [h.crc for h in headers] == [h.crc for h in codec.validate_batches(before, 1 << 20)]


def test_assign_offsets_log_append_time_rewrites_max_timestamp_and_crc(codec: ModuleType) -> None:
    original = _batch(3)
    buf = bytearray(original)
    assert codec.assign_offsets(buf, 5, 1, 1_800_000_000_000) == 8
    (h,) = codec.validate_batches(buf, 1 << 20)
    assert h.timestamp_type == TIMESTAMP_LOG_APPEND
    assert h.max_timestamp == 1_800_000_000_000
    assert h.first_timestamp == 1000
    assert h.crc == crc32c(bytes(buf[21:])) != codec.read_batch_header(original).crc
    _, records = decode_batch(buf)
    assert [(r.offset, r.timestamp) for r in records] == [(5, 1_800_000_000_000), (6, 1_800_000_000_000), (7, 1_800_000_000_000)]


def test_assign_offsets_in_memoryview_slice(codec: ModuleType) -> None:
    buf = bytearray(b"prefix" + _batch(2))
    assert codec.assign_offsets(memoryview(buf)[6:], 42, 0) == 44
    assert codec.read_batch_header(buf, 6).base_offset == 42


def test_assign_offsets_needs_writable_buffer(codec: ModuleType) -> None:
    with pytest.raises(TypeError):
        codec.assign_offsets(_batch(), 0, 0)


def test_assign_offsets_rejects_malformed_buffer_without_crashing(codec: ModuleType) -> None:
    with pytest.raises(CorruptMessageError):
        codec.assign_offsets(bytearray(_batch()[:-1]), 0, 0)
    with pytest.raises(CorruptMessageError):
        codec.assign_offsets(bytearray(30), 0, 0)
    assert codec.assign_offsets(bytearray(), 9, 0) == 9


# ---------------------------------------------------------------------------- scan_valid_prefix


def test_scan_valid_prefix_keeps_exactly_the_valid_batches_before_garbage(codec: ModuleType) -> None:
    rng = random.Random(1234)
    batches = [_batch(rng.randint(1, 5), rng.randint(0, 4)) for _ in range(4)]
    valid = b"".join(batches)
    for _ in range(200):
        garbage = rng.randbytes(rng.randint(1, 1024))
        valid_bytes, found = codec.scan_valid_prefix(valid + garbage)
        # Random garbage forming a valid batch with a good CRC is a 2^-32 event.
        assert valid_bytes == len(valid)
        assert [pos for pos, _ in found] == [0, len(batches[0]), len(batches[0]) + len(batches[1]), len(valid) - len(batches[3])]


def test_scan_valid_prefix_stops_at_first_corrupt_batch(codec: ModuleType) -> None:
    a, b, c = _batch(1), _batch(2), _batch(3)
    buf = bytearray(a + b + c)
    buf[len(a) + 70] ^= 0x40
    assert codec.scan_valid_prefix(buf) == (len(a), [(0, codec.read_batch_header(a))])


def test_scan_valid_prefix_stops_at_truncated_batch(codec: ModuleType) -> None:
    a, b = _batch(1), _batch(2)
    for cut in (1, 20, 61, len(b) - 1):
        assert codec.scan_valid_prefix(a + b[:cut])[0] == len(a)


def test_scan_valid_prefix_from_start_pos_and_on_memoryview(codec: ModuleType) -> None:
    a, b = _batch(1), _batch(2)
    buf = a + b + b"\x00" * 10
    valid, found = codec.scan_valid_prefix(buf, len(a))
    assert valid == len(b) and [p for p, _ in found] == [len(a)]
    valid, found = codec.scan_valid_prefix(memoryview(buf)[len(a) :])
    assert valid == len(b) and [p for p, _ in found] == [0]
    assert codec.scan_valid_prefix(buf, len(buf)) == (0, [])
    with pytest.raises(ValueError):
        codec.scan_valid_prefix(buf, len(buf) + 1)


# ---------------------------------------------------------------------------- scan_follower_batches


def _at(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """`batch` at the offsets and leader epoch a leader gives it."""
    b = bytearray(batch)
    native.load_pure("records").assign_offsets(b, base_offset, leader_epoch)
    return bytes(b)


def test_scan_follower_batches_skips_what_the_log_has_and_picks_out_producers_and_epochs(codec: ModuleType) -> None:
    plain = _at(_batch(3), 0, 4)  # offsets 0-2, epoch 4
    idem = _at(_batch(2, producer_id=77, producer_epoch=3, base_sequence=0x7FFFFFFF), 3, 4)  # 3-4, seq wraps
    txn = _at(_batch(1, producer_id=78, producer_epoch=0, base_sequence=5, is_transactional=True), 5, 6)  # 5, epoch 6
    buf = plain + idem + txn + idem[:50]  # a cut-off batch at the end
    start, end, infos, producers, epochs = codec.scan_follower_batches(buf, 3, 4)
    assert (start, end) == (len(plain), len(plain) + len(idem) + len(txn))
    ih, th = codec.read_batch_header(idem), codec.read_batch_header(txn)
    assert infos == [(3, 5, ih.max_timestamp, len(idem)), (5, 6, th.max_timestamp, len(txn))]
    assert producers == [(0, 77, 3, 0x7FFFFFFF, 0, 3, 4, ih.max_timestamp, ih.attributes),
                         (len(idem), 78, 0, 5, 5, 5, 5, th.max_timestamp, th.attributes)]
    assert epochs == [(6, 5)]
    assert codec.scan_follower_batches(buf, 1, -1)[4] == [(4, 0), (6, 5)]  # the straddling batch is kept
    assert codec.scan_follower_batches(buf, 6, 6)[:3] == (len(buf) - 50, len(buf) - 50, [])  # nothing new
    assert codec.scan_follower_batches(b"", 0, -1) == (0, 0, [], [], [])


def test_scan_follower_batches_stops_at_offsets_no_leader_assigns(codec: ModuleType) -> None:
    good = _at(_batch(2), 0, 1)
    for base in (-5, (1 << 63) - 1):
        bad = bytearray(_at(_batch(2), 2, 1))
        struct.pack_into(">q", bad, 0, base)
        start, end, infos, _, _ = codec.scan_follower_batches(good + bytes(bad), 0, -1)
        assert (start, end, [i[0] for i in infos]) == (0, len(good), [0])


def test_read_batch_header_errors(codec: ModuleType) -> None:
    with pytest.raises(CorruptMessageError):
        codec.read_batch_header(GOLDEN[:60])
    with pytest.raises(CorruptMessageError):
        codec.read_batch_header(GOLDEN, len(GOLDEN))
    legacy = bytearray(GOLDEN)
    legacy[16] = 1
    with pytest.raises(UnsupportedForMessageFormatError):
        codec.read_batch_header(legacy)


# ---------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
     (2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01")],
)
def test_varint_zigzag_encodings(codec: ModuleType, value: int, encoded: str) -> None:
    assert codec.encode_varint(value).hex() == encoded
    assert codec.decode_varint(bytes.fromhex("aa" + encoded), 1) == (value, 1 + len(encoded) // 2)


@pytest.mark.parametrize(("value", "encoded"), [(0, "00"), (127, "7f"), (300, "ac02"), (2**64 - 1, "ffffffffffffffffff01")])
def test_uvarint_encodings(codec: ModuleType, value: int, encoded: str) -> None:
    assert codec.encode_uvarint(value).hex() == encoded
    assert codec.decode_uvarint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_varint_decode_errors(codec: ModuleType) -> None:
    for fn in (codec.decode_varint, codec.decode_uvarint):
        with pytest.raises(DecodeError, match="truncated"):
            fn(b"\x80\x80")
        with pytest.raises(DecodeError, match="truncated"):
            fn(b"", 0)
        with pytest.raises(DecodeError, match="too long"):
            fn(b"\xff" * 10 + b"\x01")
        with pytest.raises(DecodeError, match="too long"):
            fn(b"\xff" * 9 + b"\x02")  # 65 bits
    with pytest.raises(ValueError):
        codec.encode_varint(2**63)
    with pytest.raises(ValueError):
        codec.encode_uvarint(-1)


# ---------------------------------------------------------------------------- records


def test_decode_records_rejects_malformed_records(codec: ModuleType) -> None:
    good = codec.encode_record(0, 0, b"k", b"v", [("h", b"x")])
    cases = [
        good[:-1],  # truncated
        b"\x0c" + b"\x00" * 5 + b"\x05",  # header count -3
        bytes([good[0] + 2]) + good[1:] + b"\x00",  # a byte the fields do not use
        codec.encode_record(0, 0, b"k", b"v", [(b"\xff\xfe", b"x")]),  # header key not UTF-8
        bytes([0x0C, 0, 0, 0, 0x05, 0x00, 0x00]),  # key length -3
    ]
    for buf in cases:
        with pytest.raises(CorruptMessageError):
            codec.decode_records(buf, 1, 0, 0)
    with pytest.raises(CorruptMessageError):
        codec.decode_records(good, 2, 0, 0)
    with pytest.raises(CorruptMessageError):
        codec.decode_records(good, -1, 0, 0)
    assert codec.decode_records(b"", 0, 0, 0) == []


def test_encode_record_type_errors(codec: ModuleType) -> None:
    with pytest.raises(TypeError):
        codec.encode_record(0, 0, "text", None, [])
    with pytest.raises(TypeError):
        codec.encode_record(0, 0, None, None, [(None, b"x")])
    with pytest.raises(OverflowError):
        codec.encode_record(2**31, 0, None, None, [])


def test_twins_agree_on_mutated_batches() -> None:
    """Random byte flips: both twins give the same answer or the same exception type."""
    try:
        compiled = native.load_compiled("records")
    except ImportError:
        pytest.skip("compiled twin not built")
    pure = native.load_pure("records")
    rng = random.Random(99)
    base = _batch(4) + _batch(2, CODEC_GZIP)

    def outcome(fn, *args):  # type: ignore[no-untyped-def]
        try:
            return ("ok", fn(*args))
        except Exception as exc:  # noqa: BLE001
            return ("raised", type(exc))

    def consumer_outcome(codec: ModuleType, records: bytes):  # type: ignore[no-untyped-def]
        out: list = []
        try:
            n = codec.decode_consumer_records(records, 4, 0, 0, -1, "t", 0, 1, 3, out)
        except Exception as exc:  # noqa: BLE001
            return ("raised", type(exc))
        return ("ok", n, [_consumer_fields(r) for r in out])

    for i in range(500):
        buf = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        if i % 2:
            _recrc(buf)  # get past the CRC to exercise the deeper checks
        data = bytes(buf)
        assert outcome(compiled.validate_batches, data, 1 << 20) == outcome(pure.validate_batches, data, 1 << 20)
        assert outcome(compiled.scan_valid_prefix, data) == outcome(pure.scan_valid_prefix, data)
        assert outcome(compiled.scan_follower_batches, data, 2, -1) == outcome(pure.scan_follower_batches, data, 2, -1)
        records = data[61:]
        assert outcome(compiled.decode_records, records, 4, 0, 0) == outcome(pure.decode_records, records, 4, 0, 0)
        assert consumer_outcome(compiled, records) == consumer_outcome(pure, records)


# ---------------------------------------------------------------------------- BatchBuilder


class _Batch:
    def __init__(self, builder: object) -> None:
        self.builder = builder
        self.count = 0


def test_append_to_last_fills_the_open_batch_then_hands_over(codec: ModuleType) -> None:
    from collections import deque

    class Fut(tuple):
        __slots__ = ()

    assert codec.append_to_last(None, 1, None, b"v", (), Fut) is None
    assert codec.append_to_last(deque(), 1, None, b"v", (), Fut) is None
    sealed = _Batch(None)
    assert codec.append_to_last(deque([sealed]), 1, None, b"v", (), Fut) is None and sealed.count == 0
    first, last = _Batch(codec.BatchBuilder(max_size=300)), _Batch(codec.BatchBuilder(max_size=300))
    q = deque([first, last])  # appends go to the last batch only
    futs = []
    while (f := codec.append_to_last(q, 1_700_000_000_000 + len(futs), b"k", b"v" * 20, [("h", b"1")], Fut)):
        futs.append(f)
    assert type(futs[0]) is Fut and futs[0] == (last, 0, 1_700_000_000_000)
    assert [f[1] for f in futs] == list(range(len(futs))) and 1 < len(futs) == last.count
    assert last.builder.record_count == len(futs) and first.count == 0  # full: None, nothing appended
    records = codec.decode_records(last.builder.build()[61:], len(futs), 0, 1_700_000_000_000)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (i, 1_700_000_000_000 + i, b"k", b"v" * 20, [("h", b"1")]) for i in range(len(futs))]


def test_builder_respects_max_size_but_takes_first_record(codec: ModuleType) -> None:
    builder = codec.BatchBuilder(max_size=200)
    assert builder.append(1, None, b"x" * 500)
    assert not builder.append(2, None, b"y")
    assert builder.record_count == 1
    builder = codec.BatchBuilder(max_size=200)
    while builder.append(1, b"k", b"v" * 10):
        pass
    assert builder.estimated_size <= 200
    built = builder.build()
    assert len(built) == builder.estimated_size
    assert native.load_pure("records").validate_batches(built, 200)[0].records_count == builder.record_count


def test_builder_header_attributes_and_sequence(codec: ModuleType) -> None:
    builder = codec.BatchBuilder(
        CODEC_GZIP, base_offset=10, producer_id=77, producer_epoch=2, base_sequence=2**31 - 2,
        is_transactional=True, is_control=True, partition_leader_epoch=4,
    )
    for ts in (50, 40, 60):
        builder.append(ts, b"\x00\x00\x00\x01", b"")
    header, records = decode_batch(builder.build())
    assert (header.base_offset, header.producer_id, header.producer_epoch, header.partition_leader_epoch) == (10, 77, 2, 4)
    assert header.is_transactional and header.is_control and header.compression == CODEC_GZIP
    assert (header.first_timestamp, header.max_timestamp) == (50, 60)
    assert header.last_sequence == 0  # 2^31-2 + 2 wraps to 0
    assert [(r.offset, r.timestamp) for r in records] == [(10, 50), (11, 40), (12, 60)]


def test_empty_builder_builds_empty_batch(codec: ModuleType) -> None:
    built = codec.BatchBuilder().build()
    header, records = decode_batch(built)
    assert (header.records_count, header.last_offset_delta, header.first_timestamp, records) == (0, -1, -1, [])


def test_builder_is_the_module_level_builder_of_the_chosen_twin() -> None:
    assert BatchBuilder is native.load("records").BatchBuilder


def test_builder_matches_golden_bytes(codec: ModuleType) -> None:
    builder = codec.BatchBuilder(producer_id=4242, producer_epoch=3, base_sequence=17, partition_leader_epoch=0)
    for ts, key, value, headers in GOLDEN_RECORDS:
        assert builder.append(ts, key, value, headers)
    assert builder.build() == GOLDEN
    assert builder.estimated_size == len(GOLDEN)


def test_builder_twins_build_identical_bytes_for_any_fields() -> None:
    try:
        compiled = native.load_compiled("records")
    except ImportError:
        pytest.skip("compiled twin not built")
    pure = native.load_pure("records")
    rng = random.Random(5)
    for trial in range(50):
        fields = dict(base_offset=rng.randrange(1 << 40), producer_id=rng.randrange(-1, 1 << 40),
                      producer_epoch=rng.randrange(-1, 1 << 15), base_sequence=rng.randrange(-1, 1 << 31),
                      is_transactional=rng.random() < 0.5, partition_leader_epoch=rng.randrange(-1, 100),
                      max_size=rng.choice([None, 300, 5000]))
        builders = [twin.BatchBuilder(CODEC_NONE if trial % 3 else CODEC_GZIP, **fields) for twin in (compiled, pure)]
        for _ in range(rng.randrange(0, 40)):
            ts = rng.randrange(1 << 41)
            key = rng.choice([None, b"", b"k" * rng.randrange(200), bytearray(b"ba"), memoryview(b"mv")])
            value = rng.choice([None, b"", b"v" * rng.randrange(3000)])
            headers = rng.choice([(), [("h", b"1"), ("\u00e9", None)], [(b"raw", bytearray(b"x"))]])
            assert builders[0].append(ts, key, value, headers) == builders[1].append(ts, key, value, headers)
            assert builders[0].record_count == builders[1].record_count
            assert builders[0].estimated_size == builders[1].estimated_size
        assert builders[0].build() == builders[1].build()


def test_builder_never_changes_a_batch_it_handed_out(codec: ModuleType) -> None:
    builder = codec.BatchBuilder(max_size=1000)
    builder.append(1, b"k", b"v")
    first = builder.build()
    assert builder.build() == first
    builder.producer_id = 7
    second = builder.build()
    builder.append(2, None, b"w")
    third = builder.build()
    assert [decode_batch(b)[0].producer_id for b in (first, second, third)] == [-1, 7, 7]
    assert [len(decode_batch(b)[1]) for b in (first, second, third)] == [1, 1, 2]
    assert len(third) == builder.estimated_size


def test_builder_reset_never_touches_a_batch_still_held(codec: ModuleType) -> None:
    builder = codec.BatchBuilder(max_size=10_000, producer_id=9)
    for i in range(9):
        builder.append(i, None, b"a" * 1000)
    held = builder.build()
    snapshot = bytes(held)
    hash(held)
    builder.reset()
    assert builder.record_count == 0
    builder.append(5, None, b"b" * 1000)
    second = builder.build()
    assert held == snapshot and hash(held) == hash(snapshot)
    assert len(decode_batch(second)[1]) == 1 and decode_batch(second)[0].producer_id == 9


def test_builder_reset_reuses_the_buffer_of_a_released_batch(codec: ModuleType) -> None:
    builder = codec.BatchBuilder(max_size=10_000)
    for i in range(9):
        builder.append(i, b"k", b"a" * 1000)
    first = builder.build()
    hash(first)
    del first
    assert builder.reset() is True
    builder.append(7, None, b"c" * 10)
    second = builder.build()
    assert hash(second) == hash(bytes(second))
    header, records = decode_batch(second)
    assert header.records_count == 1 and header.first_timestamp == 7
    assert [r.value for r in records] == [b"c" * 10]
    assert len(second) == builder.estimated_size


def test_builder_rejects_bad_fields(codec: ModuleType) -> None:
    with pytest.raises(ValueError):
        codec.BatchBuilder(8)
    builder = codec.BatchBuilder()
    with pytest.raises(TypeError):
        builder.append(0, "text", None)
    with pytest.raises(TypeError):
        builder.append(0, None, None, [(None, b"x")])
    with pytest.raises(OverflowError):
        builder.append(2**63, None, b"v")
    assert builder.record_count == 0


# ---------------------------------------------------------------------------- records for the client


def _consumer_fields(r: object) -> tuple:
    return tuple(getattr(r, name) for name in
                 ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"))


def test_decode_consumer_records_matches_decode_records(codec: ModuleType) -> None:
    records = GOLDEN[BATCH_HEADER_SIZE:]
    out: list = []
    assert codec.decode_consumer_records(records, 2, 100, 1700000000000, -1, "t", 3, 0, -1, out) == 2
    assert [_consumer_fields(r) for r in out] == [
        ("t", 3, 100, 1700000000000, TIMESTAMP_CREATE, b"key", b"value", [("h1", b"v1")]),
        ("t", 3, 101, 1700000000005, TIMESTAMP_CREATE, None, b"second", []),
    ]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in codec.decode_records(records, 2, 100, 1700000000000)] \
        == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out]


def test_decode_consumer_records_keeps_only_offsets_in_range_and_appends(codec: ModuleType) -> None:
    batch = encode_batch([(1000 + i, None, b"v%d" % i, ()) for i in range(10)], base_offset=50)
    out: list = ["already there"]
    assert codec.decode_consumer_records(batch[BATCH_HEADER_SIZE:], 10, 50, 1000, -1, "t", 0, 53, 57, out) == 4
    assert out[0] == "already there"
    assert [(r.offset, r.timestamp, r.value) for r in out[1:]] == [(53, 1003, b"v3"), (54, 1004, b"v4"),
                                                                  (55, 1005, b"v5"), (56, 1006, b"v6")]


def test_decode_consumer_records_log_append_time_applies_to_every_record(codec: ModuleType) -> None:
    out: list = []
    codec.decode_consumer_records(GOLDEN[BATCH_HEADER_SIZE:], 2, 0, 1700000000000, 1800000000000, "t", 0, 0, -1, out)
    assert [(r.timestamp, r.timestamp_type) for r in out] == [(1800000000000, TIMESTAMP_LOG_APPEND)] * 2


def test_decode_consumer_records_rejects_malformed_records(codec: ModuleType) -> None:
    records = GOLDEN[BATCH_HEADER_SIZE:]
    with pytest.raises(CorruptMessageError):
        codec.decode_consumer_records(records, 3, 0, 0, -1, "t", 0, 0, -1, [])
    with pytest.raises(CorruptMessageError):
        codec.decode_consumer_records(records[:-3], 2, 0, 0, -1, "t", 0, 0, -1, [])
    with pytest.raises(CorruptMessageError):
        codec.decode_consumer_records(records, -1, 0, 0, -1, "t", 0, 0, -1, [])


def test_consumer_record_equality_repr_and_pickle(codec: ModuleType) -> None:
    import pickle

    r = codec.ConsumerRecord("t", 1, 2, 3, 0, b"k", b"v", [("h", None)])
    assert r == codec.ConsumerRecord("t", 1, 2, 3, 0, b"k", b"v", [("h", None)])
    assert r != codec.ConsumerRecord("t", 1, 2, 3, 0, b"k", b"other", [("h", None)])
    assert pickle.loads(pickle.dumps(r)) == r
    assert repr(r) == "ConsumerRecord('t', 1, offset=2, timestamp=3, key=b'k', value=b'v', headers=[('h', None)])"
    r.value = b"changed"
    assert r.value == b"changed"


# ---------------------------------------------------------------------------- fetched record sets


def _legacy_message(offset: int, magic: int, key: bytes | None, value: bytes | None, attributes: int = 0, timestamp: int = 0) -> bytes:
    def field(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += field(key) + field(value)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def _legacy_message_set(magic: int) -> bytes:
    return _legacy_message(0, magic, b"k", b"v", timestamp=5) + _legacy_message(1, magic, None, b"w", timestamp=6)


def test_iter_record_batches_reads_v2_and_legacy_and_ignores_partial_tail() -> None:
    v1_inner = b"".join(_legacy_message(i, 1, None, b"in%d" % i, timestamp=100 + i) for i in range(3))
    v1_wrapper = _legacy_message(52, 1, None, compress(CODEC_GZIP, v1_inner), attributes=CODEC_GZIP | 0x08, timestamp=999)
    v0_inner = b"".join(_legacy_message(30 + i, 0, b"k", b"old%d" % i) for i in range(2))
    v0_wrapper = _legacy_message(31, 0, None, compress(CODEC_GZIP, v0_inner), attributes=CODEC_GZIP)
    fetched = _legacy_message_set(0) + _legacy_message(7, 1, b"k1", b"v1", timestamp=1234) + v0_wrapper + v1_wrapper + GOLDEN
    got = list(iter_record_batches(fetched + GOLDEN[:50]))
    assert [type(h) for h, _ in got] == [LegacyHeader] * 5 + [BatchHeader]
    flat = [(r.offset, r.timestamp, r.key, r.value) for _, rs in got for r in rs]
    assert flat == [
        (0, -1, b"k", b"v"),
        (1, -1, None, b"w"),
        (7, 1234, b"k1", b"v1"),
        (30, -1, b"k", b"old0"),
        (31, -1, b"k", b"old1"),
        (50, 999, None, b"in0"),  # v1: relative inner offsets, LogAppendTime from the wrapper
        (51, 999, None, b"in1"),
        (52, 999, None, b"in2"),
        (0, 1700000000000, b"key", b"value"),
        (1, 1700000000005, None, b"second"),
    ]
    assert got[2][0].timestamp_type == TIMESTAMP_CREATE and got[4][0].timestamp_type == TIMESTAMP_LOG_APPEND


def test_iter_record_batches_rejects_corrupt_legacy_crc() -> None:
    bad = bytearray(_legacy_message(0, 1, b"k", b"v"))
    bad[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        list(iter_record_batches(bad))
