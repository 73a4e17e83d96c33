"""Record timestamps as Kafka's log validator treats them, on a single node and on a
3-broker cluster's leader (the `kafka` fixture):

- In a CreateTime topic a batch's maxTimestamp is set from its records' timestamps, and its
  timestamp type to CreateTime, before it is stored: a client that leaves maxTimestamp at -1
  (Sarama before 1.26 did) still gets a time index, ListOffsets by timestamp and the offset
  of the largest timestamp; the rewritten batch keeps a valid CRC and reaches the followers
  as stored.
- message.timestamp.before.max.ms / after.max.ms (each falling back to the deprecated
  message.timestamp.difference.max.ms while unset, and set broker-wide by their `log.`
  synonyms) refuse a record set holding a record whose timestamp lies outside
  [now - before, now + after]: INVALID_TIMESTAMP with a record error for each such record,
  nothing written. Records without a timestamp (-1) and LogAppendTime topics are not held to
  the bounds. In a compacted topic a keyless record's error comes first."""
from __future__ import annotations

import struct
import time

import pytest

from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import encode_batch
from kafkafast.records.batch import crc32c, iter_record_batches
from kafkafast.records.model import CODEC_GZIP, CODEC_NONE, CODEC_ZSTD, TIMESTAMP_CREATE, TIMESTAMP_LOG_APPEND
from tests.integration.test_bad_input import latest_offset, produce
from tests.support.raw_client import RawClient

HOUR = 3_600_000
MAX_TIMESTAMP = -3  # ListOffsets v7+: the offset of the record with the largest timestamp (KIP-734)


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(timestamps, codec=CODEC_NONE, keys=None) -> bytes:
    keys = keys or [b"k%d" % i for i in range(len(timestamps))]
    return encode_batch([(ts, k, b"v%d" % i, []) for i, (ts, k) in enumerate(zip(timestamps, keys))], codec)


def with_header(raw: bytes, max_timestamp: int, log_append_time: bool = False) -> bytes:
    """The batch with its header's maxTimestamp (and LogAppendTime bit) as a careless client
    sets them, its CRC made right for them."""
    b = bytearray(raw)
    struct.pack_into(">q", b, 35, max_timestamp)
    if log_append_time:
        struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | 0x08)
    struct.pack_into(">I", b, 17, crc32c(b[21:]))
    return bytes(b)


def offset_for(port: int, topic: str, timestamp: int, partition: int = 0):
    with RawClient(port) as c:
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition,
                                                                            timestamp=timestamp)])])
        p = c.request(req, 7).topics[0].partitions[0]
    return p.error_code, p.offset, p.timestamp


def stored(kafka, topic: str, partition: int = 0) -> list:
    """The v2 batch headers of every replica's segments (the leader's first)."""
    out = []
    for d in kafka.replica_dirs(topic, partition):
        out.append([h for seg in sorted(d.glob("*.log")) for h, _ in iter_record_batches(seg.read_bytes())])
    return out


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_ZSTD])
@pytest.mark.parametrize("header", ["unset", "log-append-time"])
def test_a_batchs_max_timestamp_is_set_from_its_records(kafka, codec, header):
    topic = f"ts-max-{codec}-{header}"
    kafka.create_topic(topic, 1)
    port = kafka.leader_port(topic, 0)
    t0 = now_ms() - HOUR
    times = [t0 + 40, t0 + 10, t0 + 90, t0 + 30]  # the largest is not the last
    raw = with_header(batch(times, codec), -1) if header == "unset" \
        else with_header(batch(times, codec), t0, log_append_time=True)
    res = produce(port, topic, raw, acks=-1)
    assert (res.error_code, res.base_offset, res.log_append_time_ms) == (0, 0, -1)
    assert produce(port, topic, batch([t0 + 200, t0 + 150], codec), acks=-1).error_code == 0  # a correct one

    kafka.wait_for(lambda: all(len(hs) == 2 for hs in stored(kafka, topic)), 30, "the batches on every replica")
    replicas = stored(kafka, topic)
    first, second = replicas[0]
    assert (first.max_timestamp, first.timestamp_type, first.first_timestamp) == (t0 + 90, TIMESTAMP_CREATE, t0 + 40)
    assert (second.max_timestamp, second.timestamp_type) == (t0 + 200, TIMESTAMP_CREATE)
    assert all(hs == replicas[0] for hs in replicas)  # the followers hold what the leader stored (CRCs too)
    assert (first.crc, second.crc) != (0, 0)

    assert offset_for(port, topic, t0 + 50) == (0, 2, t0 + 90)  # the first record at or after: offset 2
    assert offset_for(port, topic, t0 + 91) == (0, 4, t0 + 200)
    assert offset_for(port, topic, t0 + 201)[1] == -1
    assert offset_for(port, topic, MAX_TIMESTAMP)[2] == t0 + 200
    assert latest_offset(port, topic).offset == 6


def test_record_timestamps_outside_the_topics_bounds_are_refused(kafka):
    kafka.create_topic("ts-bounds", 2, {"message.timestamp.before.max.ms": str(HOUR),
                                        "message.timestamp.after.max.ms": "60000"})
    port = kafka.leader_port("ts-bounds", 0)
    now = now_ms()
    for codec in (CODEC_NONE, CODEC_ZSTD):
        res = produce(port, "ts-bounds", batch([now, now + 2 * HOUR, now - 2 * HOUR, -1, now - HOUR // 2], codec))
        assert res.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in res.record_errors] == [1, 2]
        assert str(now + 2 * HOUR) in res.record_errors[0].batch_index_error_message
        assert res.error_message.startswith("2 record(s) rejected (invalid timestamp)")
        assert res.base_offset == -1
        assert latest_offset(port, "ts-bounds").offset == 0  # nothing written

    ok = produce(port, "ts-bounds", batch([now - HOUR // 2, now + 30_000, -1]), acks=-1)
    assert (ok.error_code, ok.base_offset, ok.record_errors) == (0, 0, [])
    assert latest_offset(port, "ts-bounds").offset == 3


def test_the_deprecated_difference_bounds_what_before_and_after_leave_unset(kafka):
    kafka.create_topic("ts-difference", 1, {"message.timestamp.difference.max.ms": "60000",
                                            "message.timestamp.after.max.ms": str(HOUR)})
    port = kafka.leader_port("ts-difference", 0)
    now = now_ms()
    res = produce(port, "ts-difference", batch([now - 2 * 60_000]))  # before: the difference, one minute
    assert (res.error_code, [e.batch_index for e in res.record_errors]) == (ErrorCode.INVALID_TIMESTAMP, [0])
    ok = produce(port, "ts-difference", batch([now + 30 * 60_000]))  # after: its own hour
    assert (ok.error_code, ok.base_offset) == (0, 0)


def test_a_log_append_time_topic_takes_any_producer_timestamp(kafka):
    kafka.create_topic("ts-append-time", 1, {"message.timestamp.type": "LogAppendTime",
                                             "message.timestamp.after.max.ms": "1000"})
    port = kafka.leader_port("ts-append-time", 0)
    before = now_ms()
    res = produce(port, "ts-append-time", with_header(batch([before + 10 * HOUR]), -1), acks=-1)
    assert res.error_code == 0 and res.log_append_time_ms >= before
    kafka.wait_for(lambda: all(len(hs) == 1 for hs in stored(kafka, "ts-append-time")), 30, "the batch everywhere")
    (header,) = stored(kafka, "ts-append-time")[0]
    assert (header.timestamp_type, header.max_timestamp) == (TIMESTAMP_LOG_APPEND, res.log_append_time_ms)


def test_in_a_compacted_topic_a_keyless_records_error_comes_first(kafka):
    kafka.create_topic("ts-compacted", 1, {"cleanup.policy": "compact", "message.timestamp.after.max.ms": "60000"})
    port = kafka.leader_port("ts-compacted", 0)
    far = now_ms() + HOUR
    res = produce(port, "ts-compacted", batch([far, far, 1], keys=[None, b"a", None]))
    assert res.error_code == ErrorCode.INVALID_TIMESTAMP  # one of the errors is a timestamp's
    assert [e.batch_index for e in res.record_errors] == [0, 1, 2]
    assert ["without a key" in e.batch_index_error_message for e in res.record_errors] == [True, False, True]
    keyless = produce(port, "ts-compacted", batch([1, 2], keys=[None, b"b"]))
    assert (keyless.error_code, [e.batch_index for e in keyless.record_errors]) == (ErrorCode.INVALID_RECORD, [0])
    assert latest_offset(port, "ts-compacted").offset == 0


def test_confluent_kafka_gets_invalid_timestamp_for_a_record_from_the_future(kafka):
    from confluent_kafka import Producer

    kafka.create_topic("ts-ck", 1, {"message.timestamp.after.max.ms": "60000"})
    reports: list = []
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "retries": 0})

    def report(err, msg):
        reports.append((msg.value(), err.name() if err else None, msg.offset()))

    p.produce("ts-ck", value=b"future", timestamp=now_ms() + HOUR, on_delivery=report)
    p.flush(30)
    p.produce("ts-ck", value=b"now", on_delivery=report)
    assert p.flush(30) == 0
    assert reports == [(b"future", "INVALID_TIMESTAMP", None), (b"now", None, 0)]


def test_the_broker_wide_bounds_apply_to_topics_without_their_own(broker_factory):
    b = broker_factory(settings={"log.message.timestamp.after.max.ms": "60000"})
    from tests.integration.test_bad_input import create_topic

    assert create_topic(b.port, "ts-broker-wide").error_code == 0
    assert create_topic(b.port, "ts-own", configs={"message.timestamp.after.max.ms": str(2 * HOUR)}).error_code == 0
    far = now_ms() + HOUR
    assert produce(b.port, "ts-broker-wide", batch([far])).error_code == ErrorCode.INVALID_TIMESTAMP
    assert produce(b.port, "ts-own", batch([far])).error_code == 0
