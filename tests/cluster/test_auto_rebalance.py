"""auto.leader.rebalance.enable: the controller gives leadership back to the preferred
replicas on its own, every leader.imbalance.check.interval.seconds, once a broker's share of
partitions led by another replica exceeds leader.imbalance.per.broker.percentage."""
from __future__ import annotations

import json

import pytest

from tests.support.cluster import KafkaCluster


@pytest.fixture(scope="module")
def rebalancing_cluster(tmp_path_factory):
    c = KafkaCluster(tmp_path_factory.mktemp("rebalance"), settings={
        "auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "2",
        "leader.imbalance.per.broker.percentage": "10"})
    try:
        yield c.start()
    finally:
        c.close()


def test_leadership_returns_to_a_restarted_broker_without_an_election_request(rebalancing_cluster):
    c = rebalancing_cluster
    c.create_topic("balanced", 6, 3)
    assignment = {int(p): r for p, r in json.loads(c._zk().get("/brokers/topics/balanced")[0])["partitions"].items()}
    preferred = {p: r[0] for p, r in assignment.items()}
    assert all(c.leader("balanced", p) == preferred[p] for p in range(6))
    target = preferred[0]
    assert c.brokers[target].stop(timeout=30) == 0
    led = [p for p in range(6) if preferred[p] == target]
    assert all(c.leader("balanced", p) != target for p in led)  # moved by the controlled shutdown
    c.brokers[target].start(timeout=60)
    c.wait_for(lambda: all(len(c.partition_state("balanced", p)["isr"]) == 3 for p in range(6)), 60,
               "the full ISR again")
    c.wait_for(lambda: all(c.leader("balanced", p) == preferred[p] for p in range(6)), 30,
               "every partition led by its preferred replica again")
