"""kafkafast.testing: a real Kafka broker for Python tests, with faults on demand.

    from kafkafast.testing import broker

    with broker() as b:                       # a fresh broker on a free 127.0.0.1 port
        b.create_topic("events", partitions=3)
        ...  # any Kafka client, bootstrap_servers=b.bootstrap_servers
        assert [r.value for r in b.records("events")] == [b"hello"]
        b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)

    async with async_broker() as b: ...       # the same from asyncio code

Installed as a pytest plugin (entry point `pytest11`: `kafkafast`): the fixtures
`kafka_broker` (one broker per test) and `kafka_broker_session` (one per session) need
no conftest. The guide is docs/TESTING.md.

`kafka_cluster` (several brokers and ZooKeeper) is not here yet: it needs the
multi-broker cluster mode, which the broker does not have; see docs/TESTING.md.
"""
from __future__ import annotations

import contextlib
import tempfile
from typing import Any, AsyncIterator, Iterator

from kafkafast.testing.broker_process import KafkaTestBroker
from kafkafast.testing.scripting import Faults, ManualClock

__all__ = ["KafkaTestBroker", "Faults", "ManualClock", "broker", "async_broker"]


@contextlib.contextmanager
def broker(directory: str | None = None, **options: Any) -> Iterator[KafkaTestBroker]:
    """A started broker, stopped (and its temporary directory removed) on exit. Options:
    workers, as_kafka ("2.4"), manual_clock, settings (broker properties), port."""
    with contextlib.ExitStack() as stack:
        root = directory or stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkafast-test-"))
        b = KafkaTestBroker(root, **options)
        stack.callback(b.stop)
        yield b.start()


@contextlib.asynccontextmanager
async def async_broker(directory: str | None = None, **options: Any) -> AsyncIterator[KafkaTestBroker]:
    """`broker()` for asyncio code: start and stop run in a thread, the loop keeps running."""
    import asyncio

    with contextlib.ExitStack() as stack:
        root = directory or stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkafast-test-"))
        b = KafkaTestBroker(root, **options)
        await asyncio.to_thread(b.start)
        try:
            yield b
        finally:
            await asyncio.to_thread(b.stop)
