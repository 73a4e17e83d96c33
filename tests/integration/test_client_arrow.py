"""`lowlevel.read_arrow` / `fetch_arrow` against a real broker: records produced by
confluent-kafka (every codec, null keys and values, headers) come back as Arrow batches of
at most max_records rows, exactly the records of the range, the same as `fetch_range`."""
from __future__ import annotations

import asyncio
import time

import pytest

from kafkafast.client import admin, lowlevel

pa = pytest.importorskip("pyarrow")

from kafkafast.client.arrow import RECORD_SCHEMA, RECORD_SCHEMA_NO_HEADERS  # noqa: E402


def _produce(bootstrap: str, topic: str, n: int, codec: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": codec})
    for i in range(n):
        p.produce(topic, partition=0, key=None if i % 5 == 0 else b"k%d" % i,
                  value=None if i % 7 == 0 else b"v" * (i % 50), timestamp=1_700_000_000_000 + i, headers=[("h", b"%d" % i), ("n", None)] if i % 3 else None)
        if i % 100 == 99:
            p.flush(10)  # several batches
    assert p.flush(30) == 0


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_read_arrow_returns_the_range_as_arrow_batches(bootstrap: str, codec: str) -> None:
    topic = f"arrow-{codec}-{time.monotonic_ns()}"
    admin.create_topics_sync(bootstrap, [(topic, 1)])
    _produce(bootstrap, topic, 500, codec)

    batches = list(lowlevel.read_arrow(bootstrap, topic, 0, 37, 461, max_records=64))
    assert batches and all(0 < b.num_rows <= 64 and b.schema == RECORD_SCHEMA for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(37, 461))
    for r in rows:
        i = r["offset"]
        assert r["key"] == (None if i % 5 == 0 else b"k%d" % i)
        assert r["value"] == (None if i % 7 == 0 else b"v" * (i % 50))
        assert round(r["timestamp"].timestamp() * 1000) == 1_700_000_000_000 + i and r["timestampType"] == 0
        assert r["headers"] == ([{"key": "h", "value": b"%d" % i}, {"key": "n", "value": None}] if i % 3 else [])

    records = [rec for chunk in lowlevel.fetch_range_sync(bootstrap, topic, 0, 37, 461) for rec in chunk]
    assert [(rec.offset, rec.key, rec.value) for rec in records] == [(r["offset"], r["key"], r["value"]) for r in rows]


def test_fetch_arrow_without_headers(bootstrap: str) -> None:
    topic = f"arrow-nohdr-{time.monotonic_ns()}"
    admin.create_topics_sync(bootstrap, [(topic, 1)])
    _produce(bootstrap, topic, 120, "lz4")

    async def read() -> list:
        return [b async for b in lowlevel.fetch_arrow(bootstrap, topic, 0, 0, 120, include_headers=False)]
    batches = asyncio.run(read())
    assert all(b.schema == RECORD_SCHEMA_NO_HEADERS for b in batches)
    assert pa.Table.from_batches(batches).column("offset").to_pylist() == list(range(120))
