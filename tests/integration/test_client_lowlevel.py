"""Low-level client API against a real broker: topics, partitions, offsets by time, ranges."""
from __future__ import annotations

import asyncio
import time

import pytest

from kafkafast.client import admin, lowlevel
from kafkafast.protocol.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError


def _produce(bootstrap: str, topic: str, n: int, partitions: int, t0: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % partitions,
                  timestamp=t0 + i, headers=[("h", b"%d" % i)])
    assert p.flush(30) == 0


def test_topics_partitions_offsets_and_range(bootstrap: str) -> None:
    topic = f"ll-{time.monotonic_ns()}"
    admin.create_topics_sync(bootstrap, [(topic, 3)])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics_sync(bootstrap, [(topic, 3)])
    assert topic in lowlevel.topics_sync(bootstrap)
    assert lowlevel.partitions_for_sync(bootstrap, topic) == [0, 1, 2]

    t0 = 1_700_000_000_000
    _produce(bootstrap, topic, 300, 3, t0)
    tps = [(topic, 0), (topic, 1), (topic, 2)]
    earliest = lowlevel.list_offsets_sync(bootstrap, tps, lowlevel.EARLIEST)
    latest = lowlevel.list_offsets_sync(bootstrap, tps, lowlevel.LATEST)
    assert {tp: off for tp, (off, _) in earliest.items()} == {tp: 0 for tp in tps}
    assert {tp: off for tp, (off, _) in latest.items()} == {tp: 100 for tp in tps}
    # Partition 1 holds records i = 1, 4, 7, ... with timestamps t0 + i at offsets i // 3.
    by_time = lowlevel.list_offsets_sync(bootstrap, [(topic, 1)], t0 + 32)
    assert by_time[(topic, 1)] == (11, t0 + 34)

    got = [r for chunk in lowlevel.fetch_range_sync(bootstrap, topic, 1, 10, 60) for r in chunk]
    assert [r.offset for r in got] == list(range(10, 60))
    first = got[0]
    assert (first.topic, first.partition, first.key, first.value, first.headers, first.timestamp) == (
        topic, 1, b"k31", b"v31", [("h", b"31")], t0 + 31)
    assert first.timestamp_type == 0


def test_fetch_range_async_yields_lists_and_stops_at_end(bootstrap: str) -> None:
    topic = f"ll-{time.monotonic_ns()}"

    async def run() -> list[int]:
        await admin.create_topics(bootstrap, [(topic, 1, {"cleanup.policy": "delete"})])
        _produce(bootstrap, topic, 50, 1, 1_700_000_000_000)
        offsets: list[int] = []
        async for chunk in lowlevel.fetch_range(bootstrap, topic, 0, 0, 50, max_bytes=512):
            assert isinstance(chunk, list) and chunk
            offsets += [r.offset for r in chunk]
        return offsets

    assert asyncio.run(run()) == list(range(50))


def test_partitions_for_unknown_topic_raises_typed_error(bootstrap: str) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        lowlevel.partitions_for_sync(bootstrap, f"missing-{time.monotonic_ns()}")
