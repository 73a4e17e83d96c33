"""Bad input gets a Kafka error code or a closed connection; the broker keeps serving,
nothing half-written lands in the log, and no allocation follows a length the client
has not sent."""
from __future__ import annotations

import struct
import time

import psutil
import pytest

from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.create_topics import CreateTopicsRequest
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import encode_batch
from tests.support.broker_process import api_versions_ok
from tests.support.raw_client import RawClient


def create_topic(port, name, partitions=1, configs=None):
    with RawClient(port) as c:
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])],
            timeout_ms=5000)
        return c.request(req, 7).topics[0]


def produce(port, topic, records: bytes, acks=1, partition=0, version=9):
    with RawClient(port) as c:
        req = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])
        return c.request(req, version).responses[0].partition_responses[0]


def latest_offset(port, topic, partition=0):
    with RawClient(port) as c:
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
        return c.request(req, 7).topics[0].partitions[0]


def a_batch(n=3, **kw):
    return encode_batch([(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(n)], **kw)


def test_frame_larger_than_socket_request_max_bytes_closes_connection(broker_factory):
    b = broker_factory(settings={"socket.request.max.bytes": "1024"})
    with RawClient(b.port) as c:
        c.send_raw(struct.pack(">i", 2048) + b"\x00" * 64)
        assert c.is_closed_by_peer()
    assert api_versions_ok(b.port)


@pytest.mark.parametrize("size", [-1, -2147483648, 0, 7])
def test_negative_or_tiny_frame_sizes_close_connection(broker, size):
    with RawClient(broker.port) as c:
        c.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert c.is_closed_by_peer()
    assert api_versions_ok(broker.port)


def test_unknown_api_key_closes_connection(broker):
    with RawClient(broker.port) as c:
        body = struct.pack(">hhih", 999, 0, 1, -1)
        c.send_raw(struct.pack(">i", len(body)) + body)
        assert c.is_closed_by_peer()
    assert api_versions_ok(broker.port)


def test_unsupported_api_versions_version_gets_error_and_v0_body(broker):
    with RawClient(broker.port) as c:
        # ApiVersions v9 with a v2 header: key, version, correlation id, client id, no tags
        body = struct.pack(">hhih", 18, 9, 5, 1) + b"x" + b"\x00"
        c.send_raw(struct.pack(">i", len(body)) + body)
        frame = c.recv_frame()
    assert frame is not None
    corr, err, n = struct.unpack(">ihi", frame[:10])
    assert corr == 5 and err == ErrorCode.UNSUPPORTED_VERSION
    keys = {struct.unpack(">hhh", frame[10 + 6 * i:16 + 6 * i])[0] for i in range(n)}
    assert {0, 1, 2, 3, 18, 19, 20}.issubset(keys)


def test_unsupported_version_of_another_api_closes_connection(broker):
    with RawClient(broker.port) as c:
        body = struct.pack(">hhih", 0, 99, 1, -1) + b"\x00" * 10  # Produce v99 is not served
        c.send_raw(struct.pack(">i", len(body)) + body)
        assert c.is_closed_by_peer()


def test_garbage_after_a_valid_header_closes_connection(broker):
    with RawClient(broker.port) as c:
        body = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 1000000) + b"\xff" * 20
        c.send_raw(struct.pack(">i", len(body)) + body)
        assert c.is_closed_by_peer()
    with RawClient(broker.port) as c:  # bytes after a complete body are ignored, as Kafka does
        body = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", -1) + b"junk"
        c.send_raw(struct.pack(">i", len(body)) + body)
        frame = c.recv_frame()
        assert frame is not None and struct.unpack(">i", frame[:4])[0] == 7
    assert api_versions_ok(broker.port)


def test_truncated_frame_then_disconnect_leaves_broker_serving(broker):
    for _ in range(5):
        with RawClient(broker.port) as c:
            c.send_raw(struct.pack(">i", 5000) + b"\x00\x03\x00\x01")
    assert api_versions_ok(broker.port)


def test_claimed_frame_sizes_do_not_allocate_memory(broker_factory):
    b = broker_factory(settings={"socket.request.max.bytes": str(100 * 1024 * 1024)})
    proc = psutil.Process(b.proc.pid)
    before = sum(p.memory_info().rss for p in [proc] + proc.children(recursive=True))
    clients = [RawClient(b.port) for _ in range(30)]
    for c in clients:
        c.send_raw(struct.pack(">i", 100 * 1024 * 1024 - 1) + b"\x00\x12\x00\x00")  # claims ~100 MB each
    time.sleep(1.0)
    after = sum(p.memory_info().rss for p in [proc] + proc.children(recursive=True))
    for c in clients:
        c.close()
    assert after - before < 32 * 1024 * 1024, f"RSS grew by {(after - before) >> 20} MiB"
    assert api_versions_ok(b.port)


def test_corrupt_crc_is_rejected_and_nothing_is_written(broker):
    assert create_topic(broker.port, "crc").error_code == 0
    assert produce(broker.port, "crc", a_batch()).error_code == 0
    bad = bytearray(a_batch())
    bad[-1] ^= 0xFF  # flip a byte in the last record: CRC no longer matches
    r = produce(broker.port, "crc", bytes(bad))
    assert r.error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(broker.port, "crc").offset == 3


def test_lying_lengths_and_counts_are_rejected_and_nothing_is_written(broker):
    from kafkafast.records import crc32c

    create_topic(broker.port, "lies")
    good = a_batch(4)
    # records_count says 9 while the batch holds 4 (CRC recomputed so only the count lies)
    lie = bytearray(good)
    lie[57:61] = struct.pack(">i", 9)
    lie[17:21] = struct.pack(">I", crc32c(bytes(lie[21:])))
    assert produce(broker.port, "lies", bytes(lie)).error_code in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE)
    # batch length larger than the bytes sent
    longer = bytearray(good)
    longer[8:12] = struct.pack(">i", len(good) + 100)
    assert produce(broker.port, "lies", bytes(longer)).error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    # a valid batch followed by half a batch
    half = good + good[: len(good) // 2]
    assert produce(broker.port, "lies", half).error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    assert latest_offset(broker.port, "lies").offset == 0
    assert produce(broker.port, "lies", good).error_code == 0
    assert latest_offset(broker.port, "lies").offset == 4


def test_legacy_message_format_in_produce_v3_plus_is_rejected_with_unsupported_version(broker):
    create_topic(broker.port, "legacy")
    # one v1 message: offset, size, crc, magic=1, attributes, timestamp, key=null, value="x"
    msg = struct.pack(">bbqi", 1, 0, 0, -1) + struct.pack(">i", 1) + b"x"
    import zlib
    body = struct.pack(">I", zlib.crc32(msg)) + msg
    legacy = struct.pack(">qi", 0, len(body)) + body
    assert produce(broker.port, "legacy", legacy).error_code == ErrorCode.UNSUPPORTED_VERSION
    assert latest_offset(broker.port, "legacy").offset == 0
    assert produce(broker.port, "legacy", legacy, version=2).error_code == 0  # v0-2 up-convert it
    assert latest_offset(broker.port, "legacy").offset == 1


def test_bad_legacy_message_sets_in_produce_v2(broker_factory):
    from kafkafast.records.convert import encode_message, legacy_compress

    broker = broker_factory(settings={"message.max.decompressed.bytes": str(1 << 20)})
    create_topic(broker.port, "old")
    good = encode_message(1, 0, 5, b"k", b"v")
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    assert produce(broker.port, "old", bytes(bad_crc), version=2).error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(broker.port, "old", good[:-3], version=2).error_code == ErrorCode.CORRUPT_MESSAGE
    inner = b"".join(encode_message(1, i, 5, None, b"\0" * 60_000) for i in range(20))  # 1.2 MB inside
    bomb = encode_message(1, 19, 5, None, legacy_compress(1, 1, inner), 1)
    assert len(bomb) < 10_000
    assert produce(broker.port, "old", bomb, version=2).error_code == ErrorCode.MESSAGE_TOO_LARGE
    not_compressed = encode_message(1, 0, 5, None, b"not gzip at all", 1)
    assert produce(broker.port, "old", not_compressed, version=1).error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(broker.port, "old").offset == 0
    assert produce(broker.port, "old", good + good, version=0).error_code == 0
    assert latest_offset(broker.port, "old").offset == 2


def test_error_codes_for_common_mistakes(broker_factory):
    b = broker_factory(settings={"message.max.bytes": "2000", "auto.create.topics.enable": "false"})
    assert create_topic(b.port, "ok-topic").error_code == 0
    assert create_topic(b.port, "ok-topic").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create_topic(b.port, "bad name!").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(b.port, "x" * 250).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(b.port, "cfg", configs={"retention.ms": "soon"}).error_code == ErrorCode.INVALID_CONFIG
    assert produce(b.port, "ok-topic", a_batch(), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert produce(b.port, "nope", a_batch()).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(b.port, "ok-topic", a_batch(), partition=5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    big = encode_batch([(0, None, b"z" * 5000, [])])
    assert produce(b.port, "ok-topic", big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    no_sequence = produce(b.port, "ok-topic", a_batch(producer_id=7, producer_epoch=0, base_sequence=-1))
    assert (no_sequence.error_code, no_sequence.base_offset) == (ErrorCode.INVALID_RECORD, -1)
    assert "no base sequence" in no_sequence.error_message
    assert latest_offset(b.port, "ok-topic").offset == 0
    with RawClient(b.port) as c:
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic="ok-topic", partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=50, partition_max_bytes=1 << 20, current_leader_epoch=-1)])])
        part = c.request(req, 12).responses[0].partitions[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    with RawClient(b.port) as c:
        assert c.request(ApiVersionsRequest(), 3).error_code == 0


# ---------------------------------------------------------------------------- compressed batches
# Correct CRC32C, bad insides (tests/support/hostile_batches.py): Kafka's LogValidator
# decompresses every compressed batch on produce, and so must we.


def _consume_all(port: int, topic: str, expected: int, partition: int = 0) -> list[bytes]:
    """Every record of the partition, read from the start by a real client (librdkafka)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bad-input-check",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        c.close()
    return values


def _produce_with_real_client(port: int, topic: str, codec: str, n: int, partition: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "compression.type": codec, "linger.ms": 5})
    failures: list = []
    for i in range(n):
        p.produce(topic, value=b"after-%d" % i, key=b"k", partition=partition,
                  on_delivery=lambda err, msg: err and failures.append(err))
    assert p.flush(30) == 0 and not failures, failures


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_or_truncated_compressed_payload_is_corrupt_message_and_not_stored(module_broker, codec):
    from tests.support import hostile_batches as hb

    port = module_broker.port
    topic = f"undecodable-{codec}"
    assert create_topic(port, topic).error_code == 0
    assert produce(port, topic, a_batch(3, compression=hb.CODECS[codec])).error_code == 0  # an existing partition
    for version in (9, 3):
        for bad in (hb.garbage(hb.CODECS[codec]), hb.truncated(hb.CODECS[codec])):
            r = produce(port, topic, bad, version=version)
            assert r.error_code == ErrorCode.CORRUPT_MESSAGE, (version, r)
            assert latest_offset(port, topic).offset == 3
    # a good batch first and a bad one after it in the same set: the whole set is refused
    assert produce(port, topic, a_batch(2) + hb.garbage(hb.CODECS[codec])).error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(port, topic).offset == 3
    _produce_with_real_client(port, topic, codec, 5)
    values = _consume_all(port, topic, 8)
    assert values == [b"v0", b"v1", b"v2"] + [b"after-%d" % i for i in range(5)]


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_record_count_and_offset_delta_lies_inside_compressed_batches_are_corrupt_message(module_broker, codec):
    from tests.support import hostile_batches as hb

    port = module_broker.port
    topic = f"lying-{codec}"
    c = hb.CODECS[codec]
    assert create_topic(port, topic).error_code == 0
    cases = {
        "fewer records than recordsCount": hb.compressed(c, hb.records([0, 1, 2]), 4),
        "more records than recordsCount": hb.compressed(c, hb.records([0, 1, 2, 3]), 3),
        "offset deltas out of order": hb.compressed(c, hb.records([0, 2, 1]), 3),
        "offset deltas not from zero": hb.compressed(c, hb.records([1, 2, 3]), 3),
        "a record length past its fields": hb.compressed(c, b"\x40" + hb.records([0])[1:], 1),
        "half a record at the end": hb.compressed(c, hb.records([0, 1])[:-3], 2),
    }
    for what, bad in cases.items():
        assert produce(port, topic, bad).error_code == ErrorCode.CORRUPT_MESSAGE, what
    assert latest_offset(port, topic).offset == 0
    good = hb.compressed(c, hb.records([0, 1, 2]), 3)
    assert produce(port, topic, good).error_code == 0
    assert latest_offset(port, topic).offset == 3


def test_undecodable_batches_forwarded_between_workers_are_refused(broker_factory):
    from tests.support import hostile_batches as hb

    b = broker_factory(workers=2)
    assert create_topic(b.port, "fwd", partitions=4).error_code == 0
    for partition in range(4):  # two of them are owned by the worker that did not get the request
        r = produce(b.port, "fwd", hb.garbage(hb.CODEC_ZSTD), partition=partition)
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE
        assert produce(b.port, "fwd", a_batch(2, compression=hb.CODEC_LZ4), partition=partition).error_code == 0
        assert latest_offset(b.port, "fwd", partition).offset == 2


def _rss_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_decompression_bombs_are_refused_with_bounded_broker_memory(broker_factory, tmp_path_factory):
    from tests.support import hostile_batches as hb

    cache = tmp_path_factory.getbasetemp() / "bombs"
    cache.mkdir(exist_ok=True)
    bombs = {codec: hb.bomb(codec, cache) for codec in hb.BOMB_SIZES}  # made before the broker's baseline
    b = broker_factory()
    assert create_topic(b.port, "bombs").error_code == 0
    assert produce(b.port, "bombs", a_batch(1)).error_code == 0  # warm up the produce path
    before = _rss_kib(b.proc.pid, "VmRSS")
    for codec, batch in bombs.items():
        r = produce(b.port, "bombs", batch)
        assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE, (codec, r)
        assert "decompress" in (r.error_message or "")
    peak = _rss_kib(b.proc.pid, "VmHWM")
    assert (peak - before) < 64 * 1024, f"broker peak RSS grew by {(peak - before) >> 10} MiB"
    assert latest_offset(b.port, "bombs").offset == 1
    _produce_with_real_client(b.port, "bombs", "zstd", 3)
    assert _consume_all(b.port, "bombs", 4) == [b"v0"] + [b"after-%d" % i for i in range(3)]


def test_decompressed_size_bound_is_a_setting(broker_factory):
    from tests.support import hostile_batches as hb

    b = broker_factory(settings={"message.max.decompressed.bytes": "100000"})
    create_topic(b.port, "bounded")
    fits = hb.compressed(hb.CODEC_ZSTD, hb.records(list(range(90)), b"x" * 1000), 90)  # ~91 KB
    too_big = hb.compressed(hb.CODEC_ZSTD, hb.records(list(range(110)), b"x" * 1000), 110)  # ~111 KB
    assert produce(b.port, "bounded", fits).error_code == 0
    assert produce(b.port, "bounded", too_big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert latest_offset(b.port, "bounded").offset == 90


def test_uncompressed_batch_with_broken_records_under_a_good_crc_is_refused(broker):
    from kafkafast.records import crc32c

    create_topic(broker.port, "rec-lies")
    batch = bytearray(a_batch(3))
    batch[61 + 4] = 0x7E  # the first record's key length varint (63): far past its record
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert produce(broker.port, "rec-lies", bytes(batch)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(broker.port, "rec-lies").offset == 0
    assert produce(broker.port, "rec-lies", a_batch(3)).error_code == 0
