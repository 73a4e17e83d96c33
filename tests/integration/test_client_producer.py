"""kafkafast producer against a real broker: codecs round trip, idempotence under connection
drops, acks, murmur2 partitioning identical to librdkafka's murmur2_random."""
from __future__ import annotations

import asyncio
import time

import pytest

from kafkafast.client import admin, lowlevel
from kafkafast.client.partitioner import murmur2_partition
from kafkafast.client.producer import AIOProducer


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list]:
    out = {}
    for p in range(partitions):
        end = lowlevel.list_offsets_sync(bootstrap, [(topic, p)], lowlevel.LATEST)[(topic, p)][0]
        out[p] = [r for chunk in lowlevel.fetch_range_sync(bootstrap, topic, p, 0, end) for r in chunk]
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_records_with_headers_round_trip_with_every_codec(bootstrap: str, codec: str) -> None:
    topic = f"codec-{codec}-{time.monotonic_ns()}"
    n = 2000

    async def produce() -> list:
        await admin.create_topics(bootstrap, [(topic, 3)])
        async with AIOProducer(bootstrap, compression_type=codec, linger_ms=2, batch_size=8192) as p:
            futs = [await p.send(topic, b"value-%d-" % i + b"x" * (i % 50), key=b"key-%d" % i,
                                 headers=[("i", b"%d" % i), ("codec", codec.encode())], timestamp_ms=1_700_000_000_000 + i)
                    for i in range(n)]
            return [await f for f in futs]

    metas = asyncio.run(produce())
    got = _read_all(bootstrap, topic, 3)
    assert sum(len(v) for v in got.values()) == n
    for i, m in enumerate(metas):
        assert m.partition == murmur2_partition(b"key-%d" % i, 3)
        r = got[m.partition][m.offset]
        assert (r.offset, r.key, r.value, r.headers, r.timestamp) == (
            m.offset, b"key-%d" % i, b"value-%d-" % i + b"x" * (i % 50),
            [("i", b"%d" % i), ("codec", codec.encode())], 1_700_000_000_000 + i)
    # per partition, the order of sends is the order of offsets
    for p, recs in got.items():
        idx = [int(r.key.split(b"-")[1]) for r in recs]
        assert idx == sorted(idx)


def test_idempotent_producer_survives_connection_drops_without_duplicates(bootstrap: str) -> None:
    topic = f"idem-{time.monotonic_ns()}"
    n = 20000

    async def run() -> tuple[int, bool]:
        await admin.create_topics(bootstrap, [(topic, 1)])
        async with AIOProducer(bootstrap, linger_ms=1, batch_size=2048, max_in_flight_requests_per_connection=5,
                               retry_backoff_ms=20) as p:
            assert p.idempotent
            drops = 0
            futs = []
            for i in range(n):
                futs.append(await p.send(topic, b"%08d" % i, partition=0))
                if i % 4000 == 2000:
                    for _ in range(500):  # let the sender put requests in flight
                        await asyncio.sleep(0.001)
                        if any(c.in_flight for c in p.cluster._conns.values()):
                            break
                    for conn in list(p.cluster._conns.values()):
                        if conn.in_flight and conn._transport is not None:
                            conn._transport.abort()  # drop the socket with requests in flight
                            drops += 1
            metas = [await f for f in futs]
            return drops, [m.offset for m in metas] == list(range(n))

    drops, offsets_in_order = asyncio.run(run())
    assert drops >= 3
    assert offsets_in_order
    values = [r.value for r in _read_all(bootstrap, topic, 1)[0]]
    assert values == [b"%08d" % i for i in range(n)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_every_acks_setting_delivers(bootstrap: str, acks) -> None:
    topic = f"acks-{time.monotonic_ns()}"

    async def run() -> list:
        await admin.create_topics(bootstrap, [(topic, 1)])
        async with AIOProducer(bootstrap, acks=acks) as p:
            futs = [await p.send(topic, b"%d" % i) for i in range(100)]
            return [await f for f in futs]

    metas = asyncio.run(run())
    expected = [-1] * 100 if acks == 0 else list(range(100))
    assert [m.offset for m in metas] == expected
    deadline = time.monotonic() + 10
    while lowlevel.list_offsets_sync(bootstrap, [(topic, 0)], -1)[(topic, 0)][0] < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r.value for r in _read_all(bootstrap, topic, 1)[0]] == [b"%d" % i for i in range(100)]


def test_murmur2_partitions_equal_librdkafka_murmur2_random_for_10000_keys(bootstrap: str) -> None:
    from confluent_kafka import Producer

    topic = f"murmur-{time.monotonic_ns()}"
    partitions = 13
    admin.create_topics_sync(bootstrap, [(topic, partitions)])
    keys = [b"key-%d-%s" % (i, b"z" * (i % 7)) for i in range(10000)]
    theirs: dict[bytes, int] = {}

    def on_delivery(err, msg) -> None:
        assert err is None
        theirs[msg.key()] = msg.partition()

    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in keys:
        p.produce(topic, value=b"", key=k, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(theirs) == 10000
    assert {k: murmur2_partition(k, partitions) for k in keys} == theirs
