"""A topic's compression.type (or the broker's `compression.type`) as Kafka applies it, on a
single node and on a 3-broker cluster (the `kafka` fixture): a codec name stores every batch
with that codec, rebuilding a producer's batch compressed otherwise (same records, headers
and timestamps; same producer id, epoch, base sequence and transactional flag, so
idempotent retries still deduplicate); `uncompressed` stores batches uncompressed;
`producer`, the default, keeps what the producer sent. A rebuilt batch larger than
max.message.bytes is MESSAGE_TOO_LARGE."""
from __future__ import annotations

import time

import pytest

from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import encode_batch
from kafkafast.records.batch import iter_record_batches
from kafkafast.records.model import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from tests.integration.test_bad_input import create_topic, latest_offset, produce

N = 300
IDS = {"none": CODEC_NONE, "uncompressed": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY,
       "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}


def stored(dirs) -> list[list]:
    """Each replica's (header, records) of its v2 batches."""
    return [[hr for seg in sorted(d.glob("*.log")) for hr in iter_record_batches(seg.read_bytes())] for d in dirs]


def produce_with_confluent(bootstrap: str, topic: str, codec: str, t0: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": True,
                  "linger.ms": 20, "batch.num.messages": 100})
    for i in range(N):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d-" % i * 20, partition=i % 2, timestamp=t0 + i,
                  headers=[("h", b"%d" % i), ("empty", None)])
    assert p.flush(30) == 0


def consumed(bootstrap: str, topic: str) -> list[tuple]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(2)])
    out: list = []
    deadline = time.monotonic() + 30
    while len(out) < N and time.monotonic() < deadline:
        for m in c.consume(100, 1.0):
            assert m.error() is None, m.error()
            out.append((m.key(), m.value(), m.timestamp()[1], [(k, v) for k, v in (m.headers() or [])]))
    c.close()
    return sorted(out, key=lambda r: int(r[0][1:]))


@pytest.mark.parametrize("topic_codec,producer_codec", [("zstd", "none"), ("uncompressed", "lz4"), ("gzip", "snappy"),
                                                        ("lz4", "lz4"), ("producer", "gzip")])
def test_a_topics_compression_type_decides_how_its_batches_are_stored(kafka, topic_codec, producer_codec):
    topic = f"codec-{topic_codec}-{producer_codec}"
    kafka.create_topic(topic, 2, {"compression.type": topic_codec})
    t0 = int(time.time() * 1000) - 60_000
    produce_with_confluent(kafka.bootstrap, topic, producer_codec, t0)

    want = IDS[producer_codec] if topic_codec == "producer" else IDS[topic_codec]
    for p in range(2):
        replicas = kafka.replica_dirs(topic, p)
        kafka.wait_for(lambda: all(sum(len(rs) for _, rs in reps) == N // 2 for reps in stored(replicas)), 30,
                       f"{topic}-{p} on every replica")
        for batches in stored(replicas):
            assert {h.compression for h, _ in batches} == {want}
            assert all(h.producer_id >= 0 and h.base_sequence >= 0 for h, _ in batches)  # idempotent, kept
            records = [r for _, rs in batches for r in rs]
            assert [(r.offset, r.key, r.timestamp) for r in records] == [
                (o, b"k%d" % i, t0 + i) for o, i in enumerate(range(p, N, 2))]
            sequences = [(h.base_sequence, h.records_count) for h, _ in batches]
            assert [s for s, _ in sequences] == [sum(n for _, n in sequences[:j]) for j in range(len(sequences))]
    assert consumed(kafka.bootstrap, topic) == [
        (b"k%d" % i, b"value-%d-" % i * 20, t0 + i, [("h", b"%d" % i), ("empty", None)]) for i in range(N)]


def test_a_rebuilt_batch_keeps_its_producer_fields_and_a_retry_is_still_a_duplicate(kafka):
    kafka.create_topic("codec-idempotent", 1, {"compression.type": "zstd"})
    port = kafka.leader_port("codec-idempotent", 0)
    batch = encode_batch([(1_700_000_000_000 + i, b"k%d" % i, b"v" * 100, [("h", b"x")]) for i in range(5)],
                         CODEC_GZIP, producer_id=4242, producer_epoch=3, base_sequence=0)
    first = produce(port, "codec-idempotent", batch, acks=-1)  # a new producer id's sequence 0: taken
    assert (first.error_code, first.base_offset) == (0, 0)
    again = produce(port, "codec-idempotent", batch, acks=-1)  # the retry: answered with the original offset
    assert (again.error_code, again.base_offset) == (0, first.base_offset)
    (header, records), = stored(kafka.replica_dirs("codec-idempotent", 0)[:1])[0]
    assert (header.compression, header.producer_id, header.producer_epoch, header.base_sequence) == (
        CODEC_ZSTD, 4242, 3, 0)
    assert [(r.key, r.headers) for r in records] == [(b"k%d" % i, [("h", b"x")]) for i in range(5)]
    assert latest_offset(port, "codec-idempotent").offset == 5


def test_an_uncompressed_rebuild_past_max_message_bytes_is_message_too_large(kafka):
    kafka.create_topic("codec-too-large", 1, {"compression.type": "uncompressed", "max.message.bytes": "4000"})
    port = kafka.leader_port("codec-too-large", 0)
    small_compressed = encode_batch([(0, None, b"z" * 3000, []), (1, None, b"z" * 3000, [])], CODEC_GZIP)
    assert len(small_compressed) < 4000
    res = produce(port, "codec-too-large", small_compressed, acks=-1)
    assert (res.error_code, res.base_offset) == (ErrorCode.MESSAGE_TOO_LARGE, -1)
    assert latest_offset(port, "codec-too-large").offset == 0


def test_the_brokers_compression_type_applies_to_topics_without_their_own(broker_factory):
    b = broker_factory(settings={"compression.type": "lz4"})
    assert create_topic(b.port, "codec-broker").error_code == 0
    assert create_topic(b.port, "codec-own", configs={"compression.type": "producer"}).error_code == 0
    batch = encode_batch([(0, b"k", b"v" * 50, [])], CODEC_SNAPPY)
    for topic in ("codec-broker", "codec-own"):
        assert produce(b.port, topic, batch).error_code == 0
    assert [h.compression for h, _ in stored([b.data_dir / "codec-broker-0"])[0]] == [CODEC_LZ4]
    assert [h.compression for h, _ in stored([b.data_dir / "codec-own-0"])[0]] == [CODEC_SNAPPY]
