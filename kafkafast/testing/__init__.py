"""kafkafast.testing: a real Kafka broker for Python tests, with faults on demand.

    from kafkafast.testing import broker

    with broker() as b:                       # a fresh broker on a free 127.0.0.1 port
        b.create_topic("events", partitions=3)
        ...  # any Kafka client, bootstrap_servers=b.bootstrap_servers
        assert [r.value for r in b.records("events")] == [b"hello"]
        b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)

    async with async_broker() as b: ...       # the same from asyncio code

    with cluster(brokers=3) as c:             # brokers in ZooKeeper cluster mode + ZooKeeper
        c.create_topic("orders", replication_factor=3)
        c.kill(c.leader("orders", 0))

Installed as a pytest plugin (entry point `pytest11`: `kafkafast`): the fixtures
`kafka_broker` (one broker per test), `kafka_broker_session` (one per session) and
`kafka_cluster` (n brokers and Debian's ZooKeeper, per test) need no conftest. The guide
is docs/TESTING.md.
"""
from __future__ import annotations

import contextlib
import tempfile
from typing import Any, AsyncIterator, Iterator

from kafkafast.testing.broker_process import KafkaTestBroker
from kafkafast.testing.cluster import KafkaTestCluster, ZooKeeperUnavailable
from kafkafast.testing.scripting import Faults, ManualClock

__all__ = ["KafkaTestBroker", "KafkaTestCluster", "ZooKeeperUnavailable", "Faults", "ManualClock", "broker",
           "async_broker", "cluster"]


@contextlib.contextmanager
def broker(directory: str | None = None, **options: Any) -> Iterator[KafkaTestBroker]:
    """A started broker, stopped (and its temporary directory removed) on exit. Options:
    workers, as_kafka ("2.4"), manual_clock, settings (broker properties), port."""
    with contextlib.ExitStack() as stack:
        root = directory or stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkafast-test-"))
        b = KafkaTestBroker(root, **options)
        stack.callback(b.stop)
        yield b.start()


@contextlib.contextmanager
def cluster(directory: str | None = None, **options: Any) -> Iterator[KafkaTestCluster]:
    """Started brokers and ZooKeeper, all stopped (and the temporary directory removed) on
    exit. Options: brokers (3), settings (broker properties for every broker).
    Raises ZooKeeperUnavailable when ZooKeeper or java is not installed."""
    with contextlib.ExitStack() as stack:
        root = directory or stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkafast-cluster-"))
        c = KafkaTestCluster(root, **options)
        stack.callback(c.stop)
        yield c.start()


@contextlib.asynccontextmanager
async def async_broker(directory: str | None = None, **options: Any) -> AsyncIterator[KafkaTestBroker]:
    """`broker()` for asyncio code: start and stop run in a thread, the loop keeps running."""
    import asyncio  # deferred: kafkafast.testing starts light

    with contextlib.ExitStack() as stack:
        root = directory or stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkafast-test-"))
        b = KafkaTestBroker(root, **options)
        await asyncio.to_thread(b.start)
        try:
            yield b
        finally:
            await asyncio.to_thread(b.stop)
