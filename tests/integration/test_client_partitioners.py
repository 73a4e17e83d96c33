"""kafkafast's client partitions keyed records exactly as librdkafka does under the same
partitioner name: confluent-kafka produces keys (the empty key included) to a 7-partition
topic with each of librdkafka's partitioners, and every key's partition must equal the one
kafkafast's Partitioner of that name picks."""
from __future__ import annotations

import pytest

from kafkafast.client.partitioner import Partitioner

NAMES = ["consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"]
PARTITIONS = 7
KEYS = [b"", b"a", b"\xff\x00\x80", b"user-42", b"x" * 33] + [b"key-%d" % i for i in range(60)]


@pytest.fixture(scope="module")
def topic(module_broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    admin.create_topics([NewTopic("partitioned", PARTITIONS, 1)])["partitioned"].result(15)
    return module_broker.bootstrap, "partitioned"


@pytest.mark.parametrize("name", NAMES)
def test_keyed_partition_matches_librdkafka(topic, name):
    from confluent_kafka import Producer

    bootstrap, t = topic
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": name, "linger.ms": 5})
    chosen: dict[bytes, int] = {}

    def report(err, msg):
        assert err is None, err
        chosen[msg.key()] = msg.partition()

    keys = [k for k in KEYS if k or name != "consistent_random"]  # there b"" is sticky, as no key
    for k in keys:
        p.produce(t, key=k, value=b"v", on_delivery=report)
    assert p.flush(30) == 0
    ours = Partitioner(name)
    assert {k: ours(t, k, PARTITIONS) for k in keys} == {k: chosen.get(k) for k in keys}
    assert len(set(chosen.values())) > 1


@pytest.mark.parametrize("name", NAMES + ["default"])
def test_keyless_records_stick_to_one_partition_per_batch(name):
    p = Partitioner(name)
    first = p("t", None, PARTITIONS)
    assert {p("t", None, PARTITIONS) for _ in range(50)} == {first}
    if name == "consistent_random":
        assert p("t", b"", PARTITIONS) == first
    p.on_new_batch("t", PARTITIONS, first)
    assert p("t", None, PARTITIONS) != first
