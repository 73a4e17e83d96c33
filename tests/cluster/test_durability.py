"""Every acknowledged record survives leader crashes (as Kafka's ReplicationTest checks)."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

TOPIC = "durable"
PARTITIONS = 6
ROUNDS = 3  # leader kills (SIGKILL), then one clean shutdown; each ends with the full ISR again
RATE = 4000  # records/s: many batches in flight at every kill, and CPU left for the brokers
# a killed leader's ZooKeeper session ends after 3 s (the cluster fixture's 6 s, twice per test)
CLUSTER_SETTINGS = {"zookeeper.session.timeout.ms": "3000"}


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 120
        while any((out[p][-1][0] + 1 if out[p] else 0) < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, "reading back took too long"
            for m in c.consume(10_000, 1.0):  # in batches: hundreds of thousands of records
                if not m.error():
                    out[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def test_acked_records_survive_leader_kills_and_a_clean_shutdown(cluster):
    cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    errors: list = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 180000, "retry.backoff.ms": 100,
                         "topic.metadata.refresh.interval.ms": 2000})

    def produce():
        seq = 0
        started = time.monotonic()
        while not stop.is_set():
            for _ in range(100):
                producer.produce(TOPIC, value=b"%08d" % seq, partition=seq % PARTITIONS, on_delivery=on_delivery)
                seq += 1
            producer.poll(0)
            time.sleep(max(0.0, started + seq / RATE - time.monotonic()))

    t = threading.Thread(target=produce)
    t.start()
    try:
        for round_ in range(ROUNDS):
            time.sleep(1)  # a few thousand records between two faults
            leader = cluster.leader(TOPIC, 0)
            b = cluster.brokers[leader]
            if round_ < ROUNDS - 1:
                b.kill()
            else:
                assert b.stop() == 0
            cluster.wait_for(lambda: cluster.leader(TOPIC, 0) not in (-1, leader), 20, "a new leader of partition 0")
            b.start(timeout=60)
            cluster.wait_for(lambda: all(len(cluster.partition_state(TOPIC, p)["isr"]) == 3
                                         for p in range(PARTITIONS)), 60, "the full ISR again")
        time.sleep(1)
    finally:
        stop.set()
        t.join(30)
    assert producer.flush(120) == 0
    assert errors == []
    total = sum(len(v) for v in acked.values())
    assert total >= 15_000, total
    stored = _read_all(cluster.bootstrap, TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        want = sorted(acked[p])
        values = [v for _, v in stored[p]]
        assert len(values) == len(set(values)), f"partition {p}: duplicates"
        assert values == sorted(values), f"partition {p}: out of order"
        assert set(want) <= set(stored[p]), f"partition {p}: {len(set(want) - set(stored[p]))} acked records lost"


@pytest.mark.parametrize("cluster", [2], indirect=True, ids=["workers2"])
def test_acked_records_survive_leader_kills_and_a_clean_shutdown_with_worker_processes(cluster):
    """The same, with brokers of two worker processes (replication over the pre-fork runtime)."""
    test_acked_records_survive_leader_kills_and_a_clean_shutdown(cluster)
