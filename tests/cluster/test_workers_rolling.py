"""A rolling restart of cluster brokers of two worker processes each: SIGTERM's controlled
shutdown (run by worker 0) moves the leaderships of every worker's partitions, and the other
worker keeps serving until it is done, so an idempotent acks=all producer loses and
duplicates nothing and sees no error."""
from __future__ import annotations

import time
import pytest
from kafkafast.runtime.shm import owner_for
from tests.cluster.test_rolling import check_every_ack_stored_once
from tests.support.acked_producer import AckedProducer
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
        prod = AckedProducer(c.bootstrap, TOPIC, PARTITIONS, burst=20, limit=200_000).start()
        try:
            for b in sorted(c.brokers):
                time.sleep(1)  # thousands of records between two restarts
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
            unacked = prod.stop()
        assert unacked == 0
        check_every_ack_stored_once(c.bootstrap, prod, 1000)
    finally:
        c.close()
