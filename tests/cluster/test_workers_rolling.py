"""A rolling restart of cluster brokers of two worker processes each: SIGTERM's controlled
shutdown (run by worker 0) moves the leaderships of every worker's partitions, and the other
worker keeps serving until it is done, so an idempotent acks=all producer loses and
duplicates nothing and sees no error."""
from __future__ import annotations

import threading
import time
import pytest
from confluent_kafka import Producer

from kafkafast.runtime.shm import owner_for
from tests.cluster.test_rolling import _read_log
from tests.support.cluster import KafkaCluster

TOPIC = "rolling-workers"
PARTITIONS = 4
WORKERS = 2

pytestmark = pytest.mark.timeout(300)


def test_rolling_restart_of_multi_worker_brokers_moves_every_workers_leaderships(tmp_path):
    # each broker leads a partition owned by each of its workers
    assignment = [[1, 2], [1, 2], [2, 1], [2, 1]]
    assert {owner_for(TOPIC, p, WORKERS) for p in (0, 1)} == {owner_for(TOPIC, p, WORKERS) for p in (2, 3)} == {0, 1}
    c = KafkaCluster(tmp_path / "cluster", size=2, workers=WORKERS,
                     settings={"auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "500"})
    try:
        c.start()
        c.create_topic(TOPIC, PARTITIONS, 2, assignment=assignment)
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
            while not stop.is_set() and seq < 200_000:
                for _ in range(20):
                    producer.produce(TOPIC, value=b"%08d" % seq, partition=seq % PARTITIONS, on_delivery=on_delivery)
                    seq += 1
                producer.poll(0.02)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            for b in sorted(c.brokers):
                time.sleep(2)
                led = [p for p in range(PARTITIONS) if c.leader(TOPIC, p) == b]
                assert {owner_for(TOPIC, p, WORKERS) for p in led} == {0, 1}, (b, led)
                assert c.brokers[b].stop(timeout=60) == 0
                # every leadership moved before the session closed, those of worker 1 too
                leaders = {p: c.leader(TOPIC, p) for p in range(PARTITIONS)}
                assert b not in leaders.values(), (b, leaders)
                text = c.brokers[b].log_path.read_text()
                assert text.count("controlled shutdown succeeded") == 1, b
                # worker 1 stopped only after the leaderships moved, its own view showing none left
                assert text.count("worker 1: stopping after the controlled shutdown (still leading 0 ") == 1, b
                assert text.index("controlled shutdown succeeded") < text.index("worker 1: stopping after"), b
                c.brokers[b].start(timeout=60)
                c.wait_for(lambda: all(len(c.partition_state(TOPIC, p)["isr"]) == 2 for p in range(PARTITIONS)),
                           60, f"the full ISR after broker {b} returned")
            time.sleep(1)
        finally:
            stop.set()
            thread.join(30)
        assert producer.flush(120) == 0
        assert delivery_errors == [] and fatal == []
        assert len(acked) >= 1000, len(acked)
        stored = _read_log(c.bootstrap, TOPIC, PARTITIONS)
        all_stored = [v for vs in stored.values() for v in vs]
        assert len(all_stored) == len(set(all_stored)), "a record was written twice"
        assert set(acked) <= set(all_stored), "an acknowledged record was lost"
    finally:
        c.close()
