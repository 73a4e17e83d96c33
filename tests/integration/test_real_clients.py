"""Real Kafka clients, each with its default configuration (idempotence included where the
client turns it on), create a topic, produce records with keys, values and headers (once per
compression codec), read them back with assign() and compare every record, list offsets, and
delete the topic: on a single node with every codec, and on a 3-broker cluster (replication
factor 3) with none and lz4 (the codecs are the storage's business, the same code in both modes).
confluent-kafka (librdkafka) sends 100,000 records: several fetches per partition. The
pure-Python clients send 20,000 (still dozens of batches per partition): encoding and decoding
in the client was most of their tests' time, and the volume takes the broker path the
confluent-kafka test covers. kafkafast's own client does the same with lz4 in both modes (its
every-codec round trips are tests/integration/test_client_consumer.py's); kcat and
KafkaJS go through both modes in tests/integration/test_client_matrix.py."""
from __future__ import annotations

import asyncio
import time

import pytest

N = 100_000  # confluent-kafka
N_PURE_PYTHON = 20_000  # kafka-python, aiokafka
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000


def record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    key = b"key-%d" % (i % 5000)
    value = (b"value-%d-" % i) * (1 + i % 7)
    headers = [("seq", str(i).encode()), ("kind", b"even" if i % 2 == 0 else b"odd")]
    return key, value, headers, T0 + i


def check(produced: dict[tuple[int, int], int], consumed: dict[tuple[int, int], tuple], n: int) -> None:
    """produced maps (partition, offset) -> record index; consumed maps (partition, offset) -> (key, value, headers, ts)."""
    assert len(produced) == n
    assert set(consumed) == set(produced)
    for where, i in produced.items():
        key, value, headers, ts = record(i)
        got = consumed[where]
        assert got[0] == key and got[1] == value and got[3] == ts, (where, i)
        assert [(k, bytes(v)) for k, v in got[2]] == headers, (where, i)
    for p in range(PARTITIONS):  # offsets are dense from 0 in every partition
        offs = sorted(o for (pp, o) in produced if pp == p)
        assert offs == list(range(len(offs)))


# ---------------------------------------------------------------------------- confluent-kafka
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.in_cluster_only(codec=["none", "lz4"])
def test_confluent_kafka_round_trip(kafka, codec):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"ck-{codec}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, kafka.replication_factor)])[topic].result(15)
    kafka.wait_for_leaders(topic, PARTITIONS)
    produced: dict[tuple[int, int], int] = {}
    errors = []

    def report(err, msg, i):
        if err is not None:
            errors.append(err)
        else:
            produced[(msg.partition(), msg.offset())] = i

    p = Producer({"bootstrap.servers": kafka.bootstrap, "compression.type": codec, "linger.ms": 5})
    for i in range(N):
        key, value, headers, ts = record(i)
        while True:
            try:
                p.produce(topic, value=value, key=key, headers=headers, timestamp=ts, on_delivery=lambda err, msg, i=i: report(err, msg, i))
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(PARTITIONS)])
    consumed = {}
    deadline = time.monotonic() + 120
    while len(consumed) < N and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            assert m.error() is None, m.error()
            consumed[(m.partition(), m.offset())] = (m.key(), m.value(), m.headers() or [], m.timestamp()[1])
    check(produced, consumed, N)

    counts = {p_: sum(1 for (pp, _) in produced if pp == p_) for p_ in range(PARTITIONS)}
    for part in range(PARTITIONS):
        assert c.get_watermark_offsets(TopicPartition(topic, part), timeout=10) == (0, counts[part])
    # by timestamp: the record with index i has timestamp T0+i
    target = T0 + N // 2
    found = c.offsets_for_times([TopicPartition(topic, part, target) for part in range(PARTITIONS)], timeout=10)
    for tp in found:
        expect = min((o for (pp, o), i in produced.items() if pp == tp.partition and T0 + i >= target), default=-1)
        assert tp.offset == expect
    c.close()
    admin.delete_topics([topic])[topic].result(15)
    assert topic not in admin.list_topics(timeout=10).topics


def test_confluent_kafka_idempotent_acks_all_with_five_requests_in_flight_keeps_order(kafka):
    """librdkafka's idempotent producer (acks=all, max.in.flight 5) on one partition, in
    batches of 100 records: the broker appends each request while the one before it waits for
    replication (runtime/connection.py); every record comes back once, in the order sent."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, n = "ck-in-flight", N_PURE_PYTHON
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, 1, kafka.replication_factor)])[topic].result(15)
    kafka.wait_for_leaders(topic, 1)
    errors = []
    p = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "enable.idempotence": True,
                  "max.in.flight.requests.per.connection": 5, "linger.ms": 1, "batch.num.messages": 100})
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"%d" % i, on_delivery=lambda err, _msg: err is None or errors.append(err))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            assert m.error() is None, m.error()
            got.append((m.offset(), int(m.value())))
    c.close()
    assert got == [(i, i) for i in range(n)]


# ---------------------------------------------------------------------------- kafka-python
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.in_cluster_only(codec=["none", "lz4"])
def test_kafka_python_round_trip(kafka, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"kp-{codec}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, kafka.replication_factor)])
    kafka.wait_for_leaders(topic, PARTITIONS)
    p = KafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=None if codec == "none" else codec,
                      linger_ms=5)
    futures = []
    for i in range(N_PURE_PYTHON):
        key, value, headers, ts = record(i)
        futures.append((i, p.send(topic, key=key, value=value, headers=headers, timestamp_ms=ts)))
    p.flush(120)
    produced = {}
    for i, f in futures:
        md = f.get(30)
        produced[(md.partition, md.offset)] = i
    p.close()

    tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
    c = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False, group_id=None)
    c.assign(tps)
    c.seek_to_beginning()
    consumed = {}
    deadline = time.monotonic() + 180
    while len(consumed) < N_PURE_PYTHON and time.monotonic() < deadline:
        for tp, msgs in c.poll(1000, max_records=20000).items():
            for m in msgs:
                consumed[(m.partition, m.offset)] = (m.key, m.value, m.headers, m.timestamp)
    check(produced, consumed, N_PURE_PYTHON)
    counts = {p_: sum(1 for (pp, _) in produced if pp == p_) for p_ in range(PARTITIONS)}
    assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
    assert c.end_offsets(tps) == {tp: counts[tp.partition] for tp in tps}
    target = T0 + N_PURE_PYTHON // 3
    found = c.offsets_for_times({tp: target for tp in tps})
    for tp, ot in found.items():
        expect = min(o for (pp, o), i in produced.items() if pp == tp.partition and T0 + i >= target)
        assert ot.offset == expect and ot.timestamp >= target
    c.close()
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()
    admin.close()


# ---------------------------------------------------------------------------- aiokafka
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.in_cluster_only(codec=["none", "lz4"])
def test_aiokafka_round_trip(kafka, codec):
    asyncio.run(_aiokafka_round_trip(kafka, codec))


async def _aiokafka_round_trip(kafka, codec: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = f"aio-{codec}"
    bootstrap = kafka.bootstrap
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, PARTITIONS, kafka.replication_factor)])
    await asyncio.to_thread(kafka.wait_for_leaders, topic, PARTITIONS)
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                         linger_ms=5)
    await p.start()
    produced = {}
    pending = []
    for i in range(N_PURE_PYTHON):
        key, value, headers, ts = record(i)
        pending.append((i, await p.send(topic, key=key, value=value, headers=headers, timestamp_ms=ts)))
        if len(pending) >= 5000:
            for j, fut in pending:
                md = await fut
                produced[(md.partition, md.offset)] = j
            pending = []
    for j, fut in pending:
        md = await fut
        produced[(md.partition, md.offset)] = j
    await p.stop()

    tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await c.start()
    c.assign(tps)
    await c.seek_to_beginning()
    consumed = {}
    deadline = time.monotonic() + 180
    while len(consumed) < N_PURE_PYTHON and time.monotonic() < deadline:
        batch = await c.getmany(timeout_ms=1000, max_records=20000)
        for tp, msgs in batch.items():
            for m in msgs:
                consumed[(m.partition, m.offset)] = (m.key, m.value, list(m.headers), m.timestamp)
    check(produced, consumed, N_PURE_PYTHON)
    counts = {p_: sum(1 for (pp, _) in produced if pp == p_) for p_ in range(PARTITIONS)}
    assert await c.end_offsets(tps) == {tp: counts[tp.partition] for tp in tps}
    assert await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
    target = T0 + (2 * N_PURE_PYTHON) // 3
    found = await c.offsets_for_times({tp: target for tp in tps})
    for tp, ot in found.items():
        expect = min(o for (pp, o), i in produced.items() if pp == tp.partition and T0 + i >= target)
        assert ot.offset == expect
    await c.stop()
    await admin.delete_topics([topic])
    assert topic not in await admin.list_topics()
    await admin.close()


# ---------------------------------------------------------------------------- kafkafast's own client
def test_kafkafast_client_round_trip(kafka):
    """lz4 only: the client's every-codec round trips are test_client_consumer.py's."""
    from kafkafast.client import KafkaConsumer, KafkaProducer, TopicPartition
    from kafkafast.client.admin import create_topics_sync, delete_topics_sync
    from kafkafast.client.lowlevel import topics_sync

    topic, codec = "kf-lz4", "lz4"
    create_topics_sync(kafka.bootstrap, [(topic, PARTITIONS)], replication_factor=kafka.replication_factor)
    kafka.wait_for_leaders(topic, PARTITIONS)
    with KafkaProducer(kafka.bootstrap, compression_type=codec, linger_ms=5) as p:
        futures = []
        for i in range(N_PURE_PYTHON):
            key, value, headers, ts = record(i)
            futures.append((i, p.send(topic, value, key, headers=headers, timestamp_ms=ts)))
        p.flush(60)
        produced = {}
        for i, f in futures:
            md = f.get(30)
            produced[(md.partition, md.offset)] = i

    tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
    with KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        consumed = {}
        deadline = time.monotonic() + 120
        while len(consumed) < N_PURE_PYTHON and time.monotonic() < deadline:
            for tp, msgs in c.poll(1000).items():
                for m in msgs:
                    consumed[(tp.partition, m.offset)] = (m.key, m.value, m.headers, m.timestamp)
        check(produced, consumed, N_PURE_PYTHON)
        counts = {p_: sum(1 for (pp, _) in produced if pp == p_) for p_ in range(PARTITIONS)}
        assert c.end_offsets(tps) == {tp: counts[tp.partition] for tp in tps}
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        target = T0 + N_PURE_PYTHON // 2
        found = c.offsets_for_times({tp: target for tp in tps})
        for tp, (offset, _ts) in found.items():
            expect = min(o for (pp, o), i in produced.items() if pp == tp.partition and T0 + i >= target)
            assert offset == expect
    delete_topics_sync(kafka.bootstrap, [topic])
    assert topic not in topics_sync(kafka.bootstrap)
