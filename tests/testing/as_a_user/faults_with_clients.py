"""Each fault of kafkafast.testing observed by a real client the way it would be from Kafka.

Run by tests/testing/test_plugin_as_user.py in a directory of its own (copied there as a
test_*.py file), with the plugin loaded only through its pytest11 entry point.
"""
import threading
import time

import pytest


def poll_until(consumer, condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        consumer.poll(0.2)
    return condition()


def test_not_leader_makes_the_client_refresh_metadata_and_retry(kafka_broker):
    from confluent_kafka import Producer

    kafka_broker.create_topic("t", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "retry.backoff.ms": 20})
    producer.produce("t", value=b"warm-up", partition=0)
    assert producer.flush(15) == 0
    # A zero delay on many Metadata requests counts the ones the client sends from now on.
    metadata_counter = kafka_broker.faults.delay("Metadata", 0, count=1000)
    kafka_broker.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=3, topic="t", partition=1)
    delivered = []
    producer.produce("t", value=b"p1", partition=1, on_delivery=lambda err, msg: delivered.append(err))
    producer.produce("t", value=b"p0", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None, None]
    [counter] = kafka_broker.faults.active()  # all three errors were answered
    assert counter["id"] == metadata_counter and counter["count"] < 1000  # metadata was refreshed
    # Exactly one copy of each: the refused attempts appended nothing.
    assert [(r.partition, r.value) for r in kafka_broker.records("t")] == [(0, b"warm-up"), (0, b"p0"), (1, b"p1")]


def test_error_codes_reach_the_application_when_retries_are_off(kafka_broker):
    from kafka import KafkaProducer
    from kafka.errors import NotEnoughReplicasError, RequestTimedOutError

    kafka_broker.create_topic("t")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, retries=0,
                             enable_idempotence=False)
    kafka_broker.faults.error("Produce", "NOT_ENOUGH_REPLICAS")
    with pytest.raises(NotEnoughReplicasError):
        producer.send("t", b"a").get(15)
    kafka_broker.faults.error("Produce", "REQUEST_TIMED_OUT")
    with pytest.raises(RequestTimedOutError):
        producer.send("t", b"b").get(15)
    producer.send("t", b"c").get(15)
    producer.close()
    assert [r.value for r in kafka_broker.records("t")] == [b"c"]


def test_coordinator_not_available_then_the_group_still_forms(kafka_broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    kafka_broker.create_topic("t")
    kafka_broker.faults.error("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
        await producer.start()
        await producer.send_and_wait("t", b"hello")
        await producer.stop()
        consumer = AIOKafkaConsumer("t", bootstrap_servers=kafka_broker.bootstrap_servers, group_id="g",
                                    auto_offset_reset="earliest", retry_backoff_ms=20)
        await consumer.start()
        msg = await asyncio.wait_for(consumer.getone(), 30)
        await consumer.commit()
        committed = await consumer.committed(__import__("aiokafka").TopicPartition("t", 0))
        await consumer.stop()
        return msg.value, committed

    assert asyncio.run(main()) == (b"hello", 1)
    assert kafka_broker.faults.active() == []


def test_delayed_answers_arrive_late(kafka_broker):
    from kafka import KafkaProducer

    kafka_broker.create_topic("t")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("t", b"warm-up").get(15)
    kafka_broker.faults.delay("Produce", 400)
    t0 = time.monotonic()
    producer.send("t", b"slow").get(15)
    assert time.monotonic() - t0 >= 0.4
    producer.close()
    assert [r.value for r in kafka_broker.records("t")] == [b"warm-up", b"slow"]


@pytest.mark.parametrize("idempotent", [False, True])
def test_dropped_answer_duplicates_only_without_idempotence(kafka_broker, idempotent):
    from confluent_kafka import Producer

    kafka_broker.create_topic("t")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "enable.idempotence": idempotent,
                         "retry.backoff.ms": 20, "socket.timeout.ms": 10000, "message.timeout.ms": 30000})
    producer.produce("t", value=b"warm-up")
    assert producer.flush(15) == 0
    # The broker appends the batch, then closes the connection instead of answering.
    kafka_broker.faults.drop_response("Produce")
    producer.produce("t", value=b"once")
    assert producer.flush(30) == 0
    # Without idempotence the retry appends the batch a second time; with it, the broker
    # recognises the producer id and sequence and answers with the first append's offset.
    expected = [b"warm-up", b"once"] if idempotent else [b"warm-up", b"once", b"once"]
    assert [r.value for r in kafka_broker.records("t")] == expected


def test_paused_partition_holds_appends_until_resumed(kafka_broker):
    from kafka import KafkaProducer

    kafka_broker.create_topic("t", partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("t", b"before", partition=0).get(15)
    kafka_broker.faults.pause("t", 0)
    future = producer.send("t", b"held", partition=0)
    time.sleep(0.5)
    assert not future.is_done
    assert [r.value for r in kafka_broker.records("t", 0)] == [b"before"]
    kafka_broker.faults.resume("t", 0)
    assert future.get(15).offset == 1
    producer.close()
    assert [r.value for r in kafka_broker.records("t", 0)] == [b"before", b"held"]


def test_failed_disk_write_is_a_storage_error_and_leaves_nothing(kafka_broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    kafka_broker.create_topic("t")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, retries=0,
                             enable_idempotence=False)
    producer.send("t", b"ok-1").get(15)
    kafka_broker.faults.disk_error("t", 0)
    with pytest.raises(KafkaStorageError):
        producer.send("t", b"lost").get(15)
    assert producer.send("t", b"ok-2").get(15).offset == 1
    producer.close()
    assert [(r.offset, r.value) for r in kafka_broker.records("t")] == [(0, b"ok-1"), (1, b"ok-2")]


def test_forced_rebalance_reassigns_the_consumer(kafka_broker):
    from confluent_kafka import Consumer

    kafka_broker.create_topic("t", partitions=2)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "rb",
                         "heartbeat.interval.ms": "100"})
    assignments = []
    consumer.subscribe(["t"], on_assign=lambda c, parts: assignments.append(sorted(p.partition for p in parts)))
    assert poll_until(consumer, lambda: len(assignments) == 1)
    member = consumer.memberid()
    kafka_broker.faults.force_rebalance("rb")
    assert poll_until(consumer, lambda: len(assignments) == 2)
    assert assignments == [[0, 1], [0, 1]]
    assert consumer.memberid() == member  # same member, next generation
    consumer.close()


def test_expired_member_rejoins_with_a_new_id(kafka_broker):
    from confluent_kafka import Consumer

    kafka_broker.create_topic("t")
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "ex",
                         "heartbeat.interval.ms": "100"})
    members = []
    consumer.subscribe(["t"], on_assign=lambda c, parts: members.append(c.memberid()))
    assert poll_until(consumer, lambda: len(members) == 1)
    kafka_broker.faults.expire_member("ex", members[0])
    assert poll_until(consumer, lambda: len(members) == 2)
    assert members[1] != members[0]
    consumer.close()


@pytest.mark.kafka_broker(workers=2)
def test_killed_worker_is_replaced_and_no_acknowledged_record_is_lost(kafka_broker):
    from confluent_kafka import Producer

    kafka_broker.create_topic("t", partitions=4)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "retry.backoff.ms": 50,
                         "message.timeout.ms": 60000})
    for i in range(8):
        producer.produce("t", value=b"a%d" % i, partition=i % 4)
    assert producer.flush(30) == 0
    old = set(kafka_broker.worker_pids())
    kafka_broker.kill_worker(0)
    assert len(set(kafka_broker.worker_pids()) - old) == 1  # one new process
    for i in range(8):
        producer.produce("t", value=b"b%d" % i, partition=i % 4)
    assert producer.flush(60) == 0
    values = sorted(r.value for r in kafka_broker.records("t"))
    assert values == sorted([b"a%d" % i for i in range(8)] + [b"b%d" % i for i in range(8)])
