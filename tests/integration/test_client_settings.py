"""kafkafast client settings that only show against a broker that is slow, stopped or
changing: buffer.memory back-pressure, max.block.ms, request/delivery timeouts, metadata
refresh (interval and UNKNOWN_TOPIC_OR_PARTITION), partitioners over a real topic,
auto-commit and commit_async, fetch.min.bytes/fetch.max.wait.ms, max.partition.fetch.bytes.

A broker is made unresponsive with SIGSTOP (its sockets stay open, as with a hung or
overloaded broker) and always resumed with SIGCONT.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kafkafast.client import AIOConsumer, AIOProducer, KafkaProducer, TopicPartition, admin, lowlevel
from kafkafast.protocol.errors import MessageTooLargeError, RequestTimedOutError, UnknownTopicOrPartitionError


@contextmanager
def stopped(broker) -> Iterator[None]:
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)


def _end(bootstrap: str, topic: str, partition: int) -> int:
    return lowlevel.list_offsets_sync(bootstrap, [(topic, partition)], lowlevel.LATEST)[(topic, partition)][0]


def test_buffer_memory_blocks_send_until_the_broker_answers(broker) -> None:
    topic = f"bufmem-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    value = b"v" * 10000  # one record per 16 KiB batch: each send reserves a batch

    async def run() -> tuple[int, bool, list[int]]:
        async with AIOProducer(broker.bootstrap, acks=1, linger_ms=0, batch_size=16384,
                               buffer_memory=4 * 16384) as p:
            assert (await (await p.send(topic, value, partition=0))).offset == 0
            futs = []

            async def pump() -> None:
                for _ in range(12):
                    futs.append(await p.send(topic, value, partition=0))

            with stopped(broker):
                task = asyncio.get_running_loop().create_task(pump())
                await asyncio.sleep(1.5)
                sent_while_stopped, blocked = len(futs), not task.done()
            await asyncio.wait_for(task, 30)
            return sent_while_stopped, blocked, [(await f).offset for f in futs]

    sent, blocked, offsets = asyncio.run(run())
    assert blocked and sent == 4  # buffer.memory holds 4 batches; the 5th send waits for memory
    assert offsets == list(range(1, 13))


def test_sync_send_raises_after_max_block_ms_when_buffer_memory_stays_full(broker) -> None:
    topic = f"maxblock-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    p = KafkaProducer(broker.bootstrap, acks=1, linger_ms=0, batch_size=16384, buffer_memory=2 * 16384,
                      max_block_ms=700)
    try:
        assert p.send(topic, b"first", partition=0).get(10).offset == 0
        with stopped(broker):
            p.send(topic, b"v" * 10000, partition=0)
            p.send(topic, b"v" * 10000, partition=0)
            t0 = time.monotonic()
            with pytest.raises(RequestTimedOutError):
                p.send(topic, b"v" * 10000, partition=0)
            waited = time.monotonic() - t0
        assert 0.6 <= waited < 10
        p.flush(30)
    finally:
        p.close()
    assert _end(broker.bootstrap, topic, 0) == 3


def test_delivery_timeout_fails_records_the_broker_never_answers(broker) -> None:
    topic = f"delivery-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])

    async def run() -> tuple[BaseException | None, float, int]:
        async with AIOProducer(broker.bootstrap, acks=1, linger_ms=0, request_timeout_ms=800,
                               delivery_timeout_ms=2500, retry_backoff_ms=50) as p:
            assert (await (await p.send(topic, b"ok", partition=0))).offset == 0
            with stopped(broker):
                t0 = time.monotonic()
                fut = await p.send(topic, b"lost", partition=0)
                try:
                    await asyncio.wait_for(fut, 20)
                    err = None
                except RequestTimedOutError as exc:
                    err = exc
                elapsed = time.monotonic() - t0
            # the producer recovers once the broker answers again
            after = (await asyncio.wait_for(await p.send(topic, b"after", partition=0), 30)).offset
            return err, elapsed, after

    err, elapsed, after = asyncio.run(run())
    assert isinstance(err, RequestTimedOutError)
    assert 2.4 <= elapsed < 15  # not before delivery.timeout.ms (request.timeout.ms alone is 0.8 s)
    # As with Kafka clients, a timed-out record may still have reached the log: the request
    # sat in the stopped broker's socket buffer and was written when it resumed.
    assert after in (1, 2)
    values = [r.value for chunk in lowlevel.fetch_range_sync(broker.bootstrap, topic, 0, 0, after + 1) for r in chunk]
    assert values[0] == b"ok" and values[-1] == b"after" and set(values[1:-1]) <= {b"lost"}


def test_metadata_refresh_on_interval_brings_in_added_partitions(broker) -> None:
    topic = f"grow-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    with KafkaProducer(broker.bootstrap, metadata_max_age_ms=300) as p:
        assert p.send(topic, b"a", partition=0).get(10).partition == 0
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send(topic, b"b", partition=2)

        async def grow() -> None:
            async with admin.AdminClient(broker.bootstrap) as a:
                await a.create_partitions(topic, 3)
        asyncio.run(grow())
        deadline = time.monotonic() + 10
        while True:  # no explicit refresh: metadata.max.age.ms brings the new partitions in
            try:
                meta = p.send(topic, b"c", partition=2).get(10)
                break
            except UnknownTopicOrPartitionError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert (meta.partition, meta.offset) == (2, 0)
        # keyed records now hash over all three partitions
        parts = Counter(p.send(topic, b"x", key=b"key-%d" % i).get(10).partition for i in range(60))
    assert set(parts) == {0, 1, 2}


def test_unknown_topic_error_refreshes_metadata_and_the_retry_delivers(broker) -> None:
    topic = f"reborn-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])

    async def run() -> tuple[int, int]:
        async with AIOProducer(broker.bootstrap, acks=1, linger_ms=0, retry_backoff_ms=50,
                               allow_auto_create_topics=False) as p:
            assert (await (await p.send(topic, b"old", partition=0))).offset == 0
            await admin.delete_topics(broker.bootstrap, [topic])
            fut = await p.send(topic, b"new", partition=0)  # answered UNKNOWN_TOPIC_OR_PARTITION
            await asyncio.sleep(0.5)
            assert not fut.done()
            await admin.create_topics(broker.bootstrap, [(topic, 2)])
            first = (await asyncio.wait_for(fut, 30)).offset
            deadline = time.monotonic() + 10
            while p._num_partitions.get(topic) != 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            second = (await (await p.send(topic, b"p1", partition=1))).offset
            return first, second

    assert asyncio.run(run()) == (0, 0)  # written to the new topic, whose second partition is known too
    assert [r.value for chunk in lowlevel.fetch_range_sync(broker.bootstrap, topic, 0, 0, 1) for r in chunk] == [b"new"]


@pytest.mark.parametrize("partitioner", ["random", "round_robin", "callable"])
def test_partitioners_place_keyless_records_over_a_real_topic(broker, partitioner: str) -> None:
    topic = f"part-{partitioner}-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 4)])
    chosen = (lambda key, n: int(key) % n) if partitioner == "callable" else partitioner
    with KafkaProducer(broker.bootstrap, partitioner=chosen, linger_ms=1) as p:
        keys = [b"%d" % (i * 7) for i in range(400)]
        futs = [p.send(topic, b"v", key=k if partitioner == "callable" else None) for k in keys]
        metas = [f.get(10) for f in futs]
    placed = [m.partition for m in metas]
    if partitioner == "round_robin":
        assert placed == [i % 4 for i in range(400)]
    elif partitioner == "callable":
        assert placed == [int(k) % 4 for k in keys]
    else:
        counts = Counter(placed)
        assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 40
    for part in range(4):  # the broker holds exactly what the futures reported
        assert _end(broker.bootstrap, topic, part) == placed.count(part)


def test_auto_commit_on_its_interval_and_commit_async(broker) -> None:
    topic = f"autocommit-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    with KafkaProducer(broker.bootstrap) as p:
        for i in range(50):
            p.send(topic, b"%d" % i, partition=0)
        p.flush()
    tp = TopicPartition(topic, 0)

    async def run() -> tuple[int | None, int | None, int | None]:
        async with AIOConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"auto-{topic}",
                               auto_offset_reset="earliest", auto_commit_interval_ms=200) as c:
            got = 0
            while got < 50:
                got += sum(len(v) for v in (await c.getmany(timeout_ms=2000)).values())
            deadline = time.monotonic() + 10
            auto = await c.committed(tp)
            while auto != 50 and time.monotonic() < deadline:  # no commit call: the interval does it
                await asyncio.sleep(0.1)
                auto = await c.committed(tp)
        async with AIOConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"manual-{topic}",
                               auto_offset_reset="earliest", enable_auto_commit=False) as c:
            got = 0
            while got < 20:
                got += sum(len(v) for v in (await c.getmany(timeout_ms=2000, max_records=20 - got)).values())
            before = await c.committed(tp)
            await c.commit_async()
            manual = await c.committed(tp)
        return auto, before, manual

    assert asyncio.run(run()) == (50, None, 20)


@pytest.mark.parametrize("min_bytes,max_wait_ms", [(1 << 20, 1500), (1, 10000)])
def test_fetch_min_bytes_and_max_wait_shape_deliveries(broker, min_bytes: int, max_wait_ms: int) -> None:
    """Records produced every 100 ms for 3 s: with fetch.min.bytes out of reach the broker
    holds each fetch for fetch.max.wait.ms (few, large deliveries); with 1 byte it answers
    as soon as a record arrives (many deliveries, long before max wait)."""
    topic = f"minbytes-{min_bytes}-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    tp = TopicPartition(topic, 0)

    async def run() -> list[int]:
        async with AIOConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                               fetch_min_bytes=min_bytes, fetch_max_wait_ms=max_wait_ms) as c, \
                AIOProducer(broker.bootstrap, acks=1, linger_ms=0) as p:
            c.assign([tp])
            assert await c.position(tp) == 0

            async def produce() -> None:
                for i in range(30):
                    await p.send(topic, b"%d" % i, partition=0)
                    await asyncio.sleep(0.1)
            task = asyncio.get_running_loop().create_task(produce())
            deliveries: list[int] = []
            deadline = time.monotonic() + 30
            while sum(deliveries) < 30 and time.monotonic() < deadline:
                n = len((await c.getmany(timeout_ms=200)).get(tp, []))
                if n:
                    deliveries.append(n)
            await task
            return deliveries

    deliveries = asyncio.run(run())
    assert sum(deliveries) == 30
    if min_bytes > 1:
        assert len(deliveries) <= 5  # about 3 s / 1.5 s
    else:
        assert len(deliveries) >= 10


def test_max_partition_fetch_bytes_below_a_batch_still_makes_progress(broker) -> None:
    """Each fetch returns one whole batch (the first batch is always returned, as in KIP-74)."""
    topic = f"maxpart-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    with KafkaProducer(broker.bootstrap, acks=1) as p:
        for b in range(5):  # five batches of 50 records of 100 B
            for i in range(50):
                p.send(topic, b"%03d" % (b * 50 + i) + b"x" * 97, partition=0)
            p.flush()
    tp = TopicPartition(topic, 0)

    async def run() -> tuple[int, list[int]]:
        async with AIOConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                               max_partition_fetch_bytes=1024, max_poll_records=10000) as c:
            c.assign([tp])
            first = (await c.getmany(timeout_ms=5000)).get(tp, [])
            offsets = [r.offset for r in first]
            deadline = time.monotonic() + 20
            while len(offsets) < 250 and time.monotonic() < deadline:
                offsets += [r.offset for r in (await c.getmany(timeout_ms=1000)).get(tp, [])]
            return len(first), offsets

    first, offsets = asyncio.run(run())
    assert first % 50 == 0 and first < 250  # whole batches, not everything at once
    assert offsets == list(range(250))


def test_a_record_over_max_request_size_fails_alone_and_large_batches_still_go(broker) -> None:
    """MESSAGE_TOO_LARGE for the one record larger than max.request.size (the check is per
    record, so a batch.size above max.request.size does not fail ordinary records)."""
    topic = f"toolarge-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])

    async def run_async() -> tuple[list[int], bool]:
        async with AIOProducer(broker.bootstrap, batch_size=2 << 20, max_request_size=100_000, linger_ms=1) as p:
            small = [await p.send(topic, b"s" * 1000, partition=0) for _ in range(3)]
            big = await p.send(topic, b"b" * 200_000, partition=0)
            with pytest.raises(MessageTooLargeError):
                await big
            return [(await f).offset for f in small], True

    offsets, raised = asyncio.run(run_async())
    assert offsets == [0, 1, 2] and raised
    with KafkaProducer(broker.bootstrap, batch_size=2 << 20, max_request_size=100_000, linger_ms=1) as p:
        big = p.send(topic, b"b" * 200_000, partition=0)
        with pytest.raises(MessageTooLargeError):
            big.get(10)
        assert p.send(topic, b"after", partition=0).get(10).offset == 3
    assert _end(broker.bootstrap, topic, 0) == 4
