"""Old clients and the legacy message formats: kafka-python pinned to api_version (0, 9)
(Produce v1 / Fetch v1, magic 0) and (0, 10, 1) (Produce v2 / Fetch v3, magic 1) produces
with every codec it has for that version and consumes in a group; what they wrote is stored
as v2 batches, compressed with their codec. The older kafka-python (2.0.2) does the same in
the client x version matrix (test_client_matrix.py), which also has Debian's kcat
(librdkafka 2.0) compress with every codec."""
from __future__ import annotations

import time
import uuid

import pytest

from tests.support.segments import CODEC_IDS, stored_batches

kafka = pytest.importorskip("kafka")

N = 300


def create_topic(bootstrap: str, topic: str, configs: dict | None = None) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs or {})])
    finally:
        admin.close()


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)], ids=["0.9", "0.10.1"])
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
def test_old_kafka_python_produces_and_consumes(broker, api_version, codec):
    topic = f"legacy-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                                   compression_type=codec, linger_ms=5, batch_size=4096)
    t0 = int(time.time() * 1000) - 60_000
    futures = [producer.send(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=0, timestamp_ms=t0 + i)
               for i in range(N)]
    producer.flush(30)
    offsets = [f.get(10).offset for f in futures]
    producer.close()
    assert offsets == list(range(N))

    batches = stored_batches(broker.data_dir, topic)
    assert all(h.magic == 2 for h, _ in batches)
    assert {h.compression for h, _ in batches} == {CODEC_IDS[codec]}
    assert len(batches) > 1  # several produce requests' worth of wrappers / batches
    stored = [r for _, rs in batches for r in rs]
    assert [(r.offset, r.key, r.value) for r in stored] == [(i, b"k%d" % i, b"value-%d" % i) for i in range(N)]
    if api_version >= (0, 10):  # magic 1 carries the producer's timestamps; magic 0 has none
        assert [r.timestamp for r in stored] == [t0 + i for i in range(N)]
    else:
        assert {r.timestamp for r in stored} == {-1}

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, api_version=api_version,
                                   group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                   max_partition_fetch_bytes=8192, consumer_timeout_ms=15000)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == N:
            break
    consumer.commit()
    consumer.close()
    assert [(m.offset, m.key, m.value) for m in got] == [(i, b"k%d" % i, b"value-%d" % i) for i in range(N)]
    if api_version >= (0, 10):
        assert [m.timestamp for m in got] == [t0 + i for i in range(N)]
    check = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition(topic, 0)
        assert check.committed(tp) == N
    finally:
        check.close()


def test_downconversion_disabled_refuses_old_fetch(broker):
    topic = f"nodown-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, {"message.downconversion.enable": "false"})
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, b"v", partition=0).get(10)
    producer.close()
    from kafka.errors import UnsupportedVersionError

    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1),
                                   auto_offset_reset="earliest", consumer_timeout_ms=3000)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    with pytest.raises(UnsupportedVersionError):
        for _ in consumer:
            break
        consumer.poll(timeout_ms=3000)
        raise AssertionError("no error")
    consumer.close()
    new = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                              consumer_timeout_ms=10000)
    new.assign([kafka.TopicPartition(topic, 0)])
    assert next(new).value == b"v"  # v4+ fetches are not concerned (StopIteration: nothing within 10 s)
    new.close()


def test_message_format_version_is_accepted_and_described(broker):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def described(topic):
        (fut,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
        return {name: e.value for name, e in fut.result(10).items()}

    admin.create_topics([NewTopic("fmt-a", 1, 1, config={"message.format.version": "0.10.2-IV0"})])["fmt-a"].result(10)
    admin.create_topics([NewTopic("fmt-b", 1, 1, config={"log.message.format.version": "2.8"})])["fmt-b"].result(10)
    assert described("fmt-a")["message.format.version"] == "0.10.2-IV0"
    assert described("fmt-b")["message.format.version"] == "2.8"
    bad = admin.create_topics([NewTopic("fmt-c", 1, 1, config={"message.format.version": "banana"})])["fmt-c"]
    with pytest.raises(Exception, match="not a valid version"):
        bad.result(10)
    plain = admin.create_topics([NewTopic("fmt-d", 1, 1)])["fmt-d"]
    plain.result(10)
    assert described("fmt-d")["message.format.version"] == "3.0-IV1"


def test_old_clients_with_a_multi_worker_broker(broker_factory):
    """Legacy produce reaches partitions owned by other workers (up-converted before it is
    forwarded) and down-converted fetches read them from any worker."""
    broker = broker_factory(workers=2)
    topic = "legacy-mw"
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 4, 1)])
    admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1),
                                   compression_type="gzip", linger_ms=5)
    for i in range(400):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 4)
    producer.flush(30)
    producer.close()
    for p in range(4):
        stored = [r.value for _, rs in stored_batches(broker.data_dir, topic, p) for r in rs]
        assert stored == [b"v%d" % i for i in range(p, 400, 4)]
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, api_version=(0, 9),
                                   group_id="mw", auto_offset_reset="earliest", consumer_timeout_ms=15000)
    got = set()
    for msg in consumer:
        got.add(msg.value)
        if len(got) == 400:
            break
    consumer.close()
    assert got == {b"v%d" % i for i in range(400)}
