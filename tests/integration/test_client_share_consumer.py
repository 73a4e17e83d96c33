"""kafkafast's own ShareConsumer against a real broker: three consumers share one topic's
records, each accepted exactly once (implicit mode); explicit mode releases, rejects and
accepts, and a released record comes back with delivery count 2; commit_sync reports each
partition's result; explicit mode's acquire answers offset ranges that acknowledge_range
accepts or releases."""
from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from kafkafast.client.cluster import TopicPartition
from kafkafast.client.share_consumer import ACCEPT, REJECT, RELEASE, IllegalStateError, ShareConsumer
from kafkafast.protocol import errors as E

SETTINGS = {
    "group.share.record.lock.duration.ms": "2000", "group.share.min.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000",
    "offsets.topic.num.partitions": "4",
}


@pytest.fixture(params=[0, 2], ids=["one-process", "2-workers"])
def sbroker(request, broker_factory):
    return broker_factory(workers=request.param, settings=SETTINGS)


def prepare(bs: str, topic: str, partitions: int, n: int) -> tuple[str, set[bytes]]:
    admin = AdminClient({"bootstrap.servers": bs, "log_level": 0})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)
    group = f"kg-{uuid.uuid4().hex[:8]}"
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": bs, "log_level": 0})
    values = set()
    for i in range(n):
        v = f"r-{i}".encode()
        values.add(v)
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(20) == 0
    return group, values


def test_three_consumers_share_a_topic_and_accept_each_record_once(sbroker):
    bs = sbroker.bootstrap
    group, values = prepare(bs, "kq", 2, 300)
    consumers = [ShareConsumer("kq", bootstrap_servers=bs, group_id=group, max_records=20) for _ in range(3)]
    seen: Counter = Counter()
    try:
        deadline = time.monotonic() + 40
        while set(seen) != values and time.monotonic() < deadline:
            for c in consumers:
                seen.update(r.value for r in c.poll(timeout_ms=100))
        for c in consumers:
            assert all(err is None for err in c.commit_sync().values())
    finally:
        for c in consumers:
            c.close()
    assert set(seen) == values
    assert max(seen.values()) == 1


def test_explicit_mode_release_reject_accept(sbroker):
    bs = sbroker.bootstrap
    group, values = prepare(bs, "ke", 1, 9)
    c = ShareConsumer("ke", bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit")
    counts: dict[bytes, list[int]] = {}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(counts) < 9:
            records = c.poll(timeout_ms=200)
            for r in records:
                counts.setdefault(r.value, []).append(r.delivery_count)
                n = int(r.value.split(b"-")[1])
                c.acknowledge(r, RELEASE if n % 3 == 0 and r.delivery_count == 1 else REJECT if n % 3 == 1 else ACCEPT)
            if records:
                results = c.commit_sync()
                assert results and all(err is None for err in results.values())
        with pytest.raises(IllegalStateError):
            c.acknowledge(type("R", (), {"topic": "ke", "partition": 0, "offset": 999})(), ACCEPT)
        end = time.monotonic() + 5
        while time.monotonic() < end and any(len(counts[v]) < 2 for v in values if int(v.split(b"-")[1]) % 3 == 0):
            for r in c.poll(timeout_ms=200):
                counts.setdefault(r.value, []).append(r.delivery_count)
                c.acknowledge(r, ACCEPT)
            c.commit_sync()
    finally:
        c.close()
    assert set(counts) == values
    for v, deliveries in counts.items():
        n = int(v.split(b"-")[1])
        assert deliveries == ([1, 2] if n % 3 == 0 else [1]), (v, deliveries)


def acquire_offsets(c: ShareConsumer, wanted: int) -> dict[int, dict[int, int]]:
    """partition -> offset -> delivery count of what `acquire` answers, until `wanted` offsets."""
    got: dict[int, dict[int, int]] = {}
    deadline = time.monotonic() + 20
    while sum(len(v) for v in got.values()) < wanted and time.monotonic() < deadline:
        for r in c.acquire(timeout_ms=300):
            got.setdefault(r.partition, {}).update(
                {o: r.delivery_count for o in range(r.first_offset, r.last_offset + 1)})
    return got


def test_acquire_answers_offset_ranges_that_acknowledge_range_accepts_or_releases(broker_factory):
    """Explicit mode's acquire/acknowledge_range (the Spark source's share-group reads): the
    ranges cover every record once; a released range comes back with delivery count 2, the
    accepted ones never; offsets the member does not hold are refused (INVALID_RECORD_STATE)."""
    bs = broker_factory(workers=0, settings=SETTINGS).bootstrap
    group, _ = prepare(bs, "ka", 2, 40)
    with pytest.raises(IllegalStateError):
        with ShareConsumer("ka", bootstrap_servers=bs, group_id=group) as implicit:
            implicit.acquire(timeout_ms=100)
    c = ShareConsumer("ka", bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit")
    try:
        got = acquire_offsets(c, 40)
        assert {p: sorted(offs) for p, offs in got.items()} == {0: list(range(20)), 1: list(range(20))}
        assert set(got[0].values()) == set(got[1].values()) == {1}
        c.acknowledge_range("ka", 0, 0, 19, ACCEPT)
        c.acknowledge_range("ka", 1, 0, 9, RELEASE)
        c.acknowledge_range("ka", 1, 10, 19, ACCEPT)
        assert list(c.commit_sync().values()) == [None, None]
        again = acquire_offsets(c, 10)
        assert again == {1: {o: 2 for o in range(10)}}
        c.acknowledge_range("ka", 0, 0, 4, ACCEPT)  # accepted already: not held by anyone
        c.acknowledge_range("ka", 1, 0, 9, ACCEPT)
        results = c.commit_sync()
        assert results[TopicPartition("ka", 1)] is None
        assert isinstance(results[TopicPartition("ka", 0)], E.for_code(121))  # INVALID_RECORD_STATE
    finally:
        c.close()
