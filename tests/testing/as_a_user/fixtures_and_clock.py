"""kafkafast.testing used as a user would: fixtures from the installed plugin (no conftest),
the context managers, the manual clock and the version profile, with real clients.

Run by tests/testing/test_plugin_as_user.py in a directory of its own (copied there as a
test_*.py file), with the plugin loaded only through its pytest11 entry point.
"""
import asyncio
import time

import pytest


def wait_until(condition, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_plugin_came_from_the_entry_point(request):
    # Registered under the entry point's name, not as a module given with -p.
    assert request.config.pluginmanager.has_plugin("kafkafast")


def test_kafka_broker_round_trip_with_confluent_kafka(kafka_broker):
    from confluent_kafka import Consumer, Producer

    kafka_broker.create_topic("orders", partitions=3, config={"retention.ms": "600000"})
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(6):
        producer.produce("orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
    assert producer.flush(15) == 0
    on_disk = kafka_broker.records("orders")
    assert sorted((r.partition, r.value) for r in on_disk) == [(i % 3, b"v%d" % i) for i in (0, 3, 1, 4, 2, 5)]
    assert [r.offset for r in kafka_broker.records("orders", 1)] == [0, 1]

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 6 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    assert sorted(got) == [b"v%d" % i for i in range(6)]


def test_restart_keeps_the_log_and_the_port(kafka_broker):
    from kafka import KafkaProducer

    kafka_broker.create_topic("t")
    port = kafka_broker.port
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("t", b"before").get(15)
    producer.close()
    kafka_broker.restart(clean=False)  # SIGKILL, then recovery on start
    assert kafka_broker.port == port
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("t", b"after").get(15)
    producer.close()
    assert [r.value for r in kafka_broker.records("t")] == [b"before", b"after"]
    assert kafka_broker.stop() == 0


@pytest.mark.parametrize("run", [1, 2])
def test_session_broker_is_shared_and_starts_each_test_without_faults(kafka_broker_session, run):
    from kafka import KafkaProducer

    assert kafka_broker_session.faults.active() == []  # run 1's rule is gone in run 2
    kafka_broker_session.faults.delay("Produce", 1, count=-1)
    kafka_broker_session.create_topic(f"session-{run}")
    producer = KafkaProducer(bootstrap_servers=kafka_broker_session.bootstrap_servers)
    producer.send(f"session-{run}", b"x").get(15)
    producer.close()
    assert [r.value for r in kafka_broker_session.records(f"session-{run}")] == [b"x"]
    # One broker for both runs: run 2 sees run 1's topic.
    assert [r.value for r in kafka_broker_session.records("session-1")] == [b"x"]


def test_context_manager_without_pytest_fixtures():
    from kafka import KafkaProducer
    from kafkafast.testing import broker

    with broker() as b:
        b.create_topic("cm")
        producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        producer.send("cm", b"hello").get(15)
        producer.close()
        assert [r.value for r in b.records("cm")] == [b"hello"]
        proc = b.proc
    assert proc.poll() == 0  # stopped gracefully on exit


def test_async_context_manager_with_aiokafka():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafkafast.testing import async_broker

    async def main():
        async with async_broker() as b:
            b.create_topic("aio", partitions=2)
            producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
            await producer.start()
            await producer.send_and_wait("aio", b"one", partition=1)
            await producer.stop()
            consumer = AIOKafkaConsumer("aio", bootstrap_servers=b.bootstrap_servers, auto_offset_reset="earliest")
            await consumer.start()
            msg = await asyncio.wait_for(consumer.getone(), 20)
            await consumer.stop()
            return msg.value, [(r.partition, r.value) for r in b.records("aio")]

    assert asyncio.run(main()) == (b"one", [(1, b"one")])


@pytest.mark.kafka_broker(manual_clock=True)
def test_manual_clock_makes_retention_delete_a_segment_without_waiting(kafka_broker):
    from confluent_kafka import Producer

    kafka_broker.create_topic("logs", config={"segment.ms": "60000", "retention.ms": "3600000"})
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce("logs", value=b"old")
    assert producer.flush(15) == 0
    kafka_broker.clock.advance(minutes=2)  # past segment.ms: the next append rolls
    producer.produce("logs", value=b"new")
    assert producer.flush(15) == 0
    assert len(kafka_broker.segment_files("logs")) == 2
    assert [r.value for r in kafka_broker.records("logs")] == [b"old", b"new"]
    # "old" was written (CreateTime) about now; two hours later it is past retention.ms.
    kafka_broker.clock.advance(hours=2)
    wait_until(lambda: [r.value for r in kafka_broker.records("logs")] == [b"new"], what="retention")
    assert len(kafka_broker.segment_files("logs")) == 1


@pytest.mark.kafka_broker(manual_clock=True)
def test_manual_clock_expires_a_silent_session(kafka_broker):
    from confluent_kafka import Consumer

    kafka_broker.create_topic("s")
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "sessions",
                         "session.timeout.ms": "30000", "heartbeat.interval.ms": "3000"})
    assigned = []
    consumer.subscribe(["s"], on_assign=lambda c, parts: assigned.append(c.memberid()))
    deadline = time.monotonic() + 20
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert assigned, "never joined"
    # The broker's clock jumps past session.timeout.ms between two heartbeats: the member
    # is removed and the group rebalances; the client rejoins with a new member id.
    kafka_broker.clock.advance(seconds=31)
    deadline = time.monotonic() + 30
    while len(assigned) < 2 and time.monotonic() < deadline:
        consumer.poll(0.2)
    consumer.close()
    assert len(assigned) >= 2 and assigned[-1] != assigned[0]


@pytest.mark.kafka_broker(manual_clock=True)
def test_manual_clock_expires_committed_offsets_of_an_empty_group(kafka_broker):
    from confluent_kafka import Consumer, TopicPartition

    kafka_broker.create_topic("o")
    config = {"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "idle", "enable.auto.commit": False}
    consumer = Consumer(config)
    consumer.commit(offsets=[TopicPartition("o", 0, 5)], asynchronous=False)
    assert consumer.committed([TopicPartition("o", 0)], timeout=10)[0].offset == 5
    consumer.close()
    # offsets.retention.minutes defaults to 7 days, checked every 10 minutes.
    kafka_broker.clock.advance(days=7, minutes=11)
    checker = Consumer(config)
    deadline = time.monotonic() + 15
    while checker.committed([TopicPartition("o", 0)], timeout=10)[0].offset == 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checker.committed([TopicPartition("o", 0)], timeout=10)[0].offset < 0  # none committed
    checker.close()


@pytest.mark.parametrize("kafka_broker", [{"as_kafka": "2.4"}], indirect=True)
def test_as_kafka_2_4_advertises_that_release(kafka_broker):
    from kafka import KafkaProducer
    from kafka.net import KafkaNetClient

    # kafka-python infers the broker's release from its ApiVersions answer.
    client = KafkaNetClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    assert client.check_version(timeout_ms=10000)[:2] == (2, 4)
    client.close()
    # The client still works against it, at the versions 2.4 had.
    kafka_broker.create_topic("v")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("v", b"x").get(15)
    producer.close()
    assert [r.value for r in kafka_broker.records("v")] == [b"x"]
