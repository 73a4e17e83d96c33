"""Rolling operations on three brokers: controlled shutdown (SIGTERM) during a rolling restart
under an idempotent acks=all producer and a consumer group, preferred and unclean leader
election (ElectLeaders, `kafkafast cluster leader-election`)."""
from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.cli import kafkafast
from tests.support.cluster import KafkaCluster

TOPIC = "rolling"
PARTITIONS = 6


@pytest.fixture(scope="module")
def rolling_cluster(tmp_path_factory):
    """Three brokers; auto.leader.rebalance.enable=false so elections here are the tests' own."""
    c = KafkaCluster(tmp_path_factory.mktemp("rolling"), settings={"auto.leader.rebalance.enable": "false"})
    try:
        yield c.start()
    finally:
        c.close()


def _assignment(c: KafkaCluster, topic: str) -> dict[int, list[int]]:
    data, _ = c._zk().get(f"/brokers/topics/{topic}")
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


def _read_log(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 90
        while any((out[p][-1][0] + 1 if out[p] else 0) < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, "reading back took too long"
            m = c.poll(1.0)
            if m is not None and not m.error():
                out[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()
    for p, recs in out.items():
        assert [o for o, _ in recs] == list(range(len(recs))), f"gap in partition {p}"
    return {p: [v for _, v in recs] for p, recs in out.items()}


def test_rolling_restart_with_controlled_shutdown_loses_and_duplicates_nothing(rolling_cluster):
    c = rolling_cluster
    c.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    acked: list[bytes] = []
    delivery_errors: list = []
    fatal: list = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                         "topic.metadata.refresh.interval.ms": 2000,
                         "error_cb": lambda e: fatal.append(e) if e.fatal() else None})

    def on_delivery(err, msg):
        (delivery_errors.append(err) if err is not None else acked.append(msg.value()))

    def produce():
        seq = 0
        while not stop.is_set() and seq < 400_000:
            for _ in range(50):
                producer.produce(TOPIC, value=b"%08d" % seq, partition=seq % PARTITIONS, on_delivery=on_delivery)
                seq += 1
            producer.poll(0.02)

    consumed: set[bytes] = set()
    consumer_done = threading.Event()

    def consume():
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "rolling-group", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 10000, "fetch.wait.max.ms": 100})
        cons.subscribe([TOPIC])
        try:
            while not consumer_done.is_set():
                m = cons.poll(0.5)
                if m is not None and not m.error():
                    consumed.add(m.value())
        finally:
            cons.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        for b in sorted(c.brokers):
            time.sleep(2)
            assert c.brokers[b].stop(timeout=30) == 0
            # the leaderships moved before the session closed: nothing waits for an election
            leaders = {p: c.leader(TOPIC, p) for p in range(PARTITIONS)}
            assert b not in leaders.values(), (b, leaders)
            c.brokers[b].start(timeout=60)
            c.wait_for(lambda: all(len(c.partition_state(TOPIC, p)["isr"]) == 3 for p in range(PARTITIONS)),
                       60, f"the full ISR after broker {b} returned")
        time.sleep(2)
    finally:
        stop.set()
        threads[0].join(30)
    assert producer.flush(120) == 0
    assert delivery_errors == [] and fatal == []
    assert len(acked) >= 3000, len(acked)
    stored = _read_log(c.bootstrap, TOPIC, PARTITIONS)
    all_stored = [v for vs in stored.values() for v in vs]
    assert len(all_stored) == len(set(all_stored)), "a record was written twice"
    assert set(acked) <= set(all_stored), "an acknowledged record was lost"
    c.wait_for(lambda: set(acked) <= consumed, 60, "the consumer group to read every acknowledged record")
    consumer_done.set()
    threads[1].join(30)

    # leadership: the last broker restarted leads nothing until a preferred election
    assignment = _assignment(c, TOPIC)
    out = kafkafast("cluster", "leader-election", "--bootstrap-server", c.bootstrap, "--election-type",
                    "PREFERRED", "--all-topic-partitions").stdout
    assert "Successfully completed leader election (PREFERRED)" in out
    c.wait_for(lambda: all(c.leader(TOPIC, p) == assignment[p][0] for p in range(PARTITIONS)), 20,
               "every partition led by its preferred replica")
    counts = {b: sum(1 for p in range(PARTITIONS) if c.leader(TOPIC, p) == b) for b in c.brokers}
    assert sorted(counts.values()) == [2, 2, 2], counts
    again = kafkafast("cluster", "leader-election", "--bootstrap-server", c.bootstrap, "--preferred",
                      "--topic", TOPIC, "--partition", "0").stdout
    assert f"Valid replica already elected for partitions {TOPIC}-0" in again


def test_unclean_election_from_the_cli_brings_an_offline_partition_back(rolling_cluster):
    c = rolling_cluster
    ctrl = c.controller_id()
    first, second = [b for b in sorted(c.brokers) if b != ctrl]
    c.create_topic("offline", 1, 2, assignment=[[first, second]])
    assert c.brokers[second].stop(timeout=30) == 0
    c.wait_for(lambda: c.partition_state("offline", 0)["isr"] == [first], 20, "ISR of the leader alone")
    assert c.brokers[first].stop(timeout=30) == 0
    c.wait_for(lambda: c.leader("offline", 0) == -1, 20, "the partition offline")
    c.brokers[second].start(timeout=60)
    preferred = kafkafast("cluster", "leader-election", "--bootstrap-server", c.brokers[ctrl].bootstrap,
                          "--preferred", "--topic", "offline", "--partition", "0", check=False)
    assert preferred.returncode == 1 and "PREFERRED_LEADER_NOT_AVAILABLE" in preferred.stdout
    assert c.leader("offline", 0) == -1
    out = kafkafast("cluster", "leader-election", "--bootstrap-server", c.brokers[ctrl].bootstrap,
                    "--election-type", "unclean", "--topic", "offline", "--partition", "0").stdout
    assert "Successfully completed leader election (UNCLEAN) for partitions offline-0" in out
    c.wait_for(lambda: c.leader("offline", 0) == second, 20, "the out-of-sync replica leading")
    assert c.partition_state("offline", 0)["isr"] == [second]
    c.brokers[first].start(timeout=60)
    c.wait_for(lambda: sorted(c.partition_state("offline", 0)["isr"]) == sorted([first, second]), 30,
               "the old leader back in the ISR")
