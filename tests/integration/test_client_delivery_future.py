"""DeliveryFuture.result(timeout) behaves as concurrent.futures.Future.result for callers of
the blocking producer, and as an asyncio future's result() on the producer's own loop."""
from __future__ import annotations

import asyncio

import pytest

from kafkafast.client.producer import AIOProducer
from kafkafast.client.sync import KafkaProducer


def test_result_with_timeout_waits_then_returns_metadata(bootstrap: str) -> None:
    with KafkaProducer(bootstrap, linger_ms=1500) as p:  # the batch waits 1.5 s before it is sent
        first = p.send("future-result", b"a", key=b"k")
        with pytest.raises(TimeoutError):
            first.result(timeout=0.05)
        second = p.send("future-result", b"b", key=b"k")
        meta = second.result(30)
        assert (meta.topic, meta.offset) == ("future-result", 1)
        assert first.result(timeout=0).offset == 0
        assert p.send("future-result", b"c", key=b"k").result().offset == 2  # no timeout: waits


def test_result_on_the_producers_loop_never_blocks(bootstrap: str) -> None:
    async def main() -> int:
        async with AIOProducer(bootstrap, linger_ms=1500) as p:
            fut = await p.send("future-loop", b"a")
            with pytest.raises(asyncio.InvalidStateError):
                fut.result(timeout=10)
            await fut
            return fut.result().offset

    assert asyncio.run(main()) == 0
