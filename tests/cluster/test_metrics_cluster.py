"""A cluster's /metrics (one endpoint per broker): every query of the Grafana dashboard in
deploy/ is served by each broker; ZooKeeper request latency; ISR shrinks and expansions and
the under/at min ISR counts of a leader while its followers are stopped (brokers with 30 s
ZooKeeper sessions, so ISR changes come from the leader, as in test_isr)."""
from __future__ import annotations

import os
import signal

import confluent_kafka as ck
import pytest

from tests.cluster.test_rolling import MetricsCluster
from tests.integration.test_metrics import NEEDS_SPECIAL_TRAFFIC, quantiles, scrape, unserved_queries, value


@pytest.fixture(scope="module")
def metrics_cluster(tmp_path_factory):
    c = MetricsCluster(tmp_path_factory.mktemp("metrics"),
                       settings={"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "3000"})
    try:
        yield c.start()
    finally:
        c.close()


def test_every_broker_serves_the_dashboard_and_the_leader_counts_isr_changes(metrics_cluster):
    c = metrics_cluster
    ctrl = c.controller_id()  # the controller leads: ISR changes need a running controller
    c.create_topic("mirrored", 1, 3, {"min.insync.replicas": "2"}, [[ctrl] + [b for b in c.brokers if b != ctrl]])
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("mirrored", b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "mirror-readers",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([ck.TopicPartition("mirrored", 0, 0)])
        got = 0
        while got < 20:
            got += sum(1 for m in consumer.consume(20 - got, 10) if m.error() is None)
        consumer.commit(offsets=[ck.TopicPartition("mirrored", 0, 20)], asynchronous=False)
    finally:
        consumer.close()

    served: dict = {}
    for broker_id, port in c.metrics_ports.items():
        m = scrape(port)
        served.update(m)
        assert value(m, "kafkafast_broker_up") == 1
        # each broker serves every query but those of groups, which their coordinator serves
        assert not unserved_queries(m, NEEDS_SPECIAL_TRAFFIC | {"kafka_consumergroup_lag", "kafka_consumergroup_lag_sum"})
        # each broker's ZooKeeper requests (registration, topic and config reads) were timed
        assert value(m, "kafka_server_zookeeperclientmetrics_zookeeperrequestlatencyms_count") > 0
        assert 0 < quantiles(m, "kafka_server_zookeeperclientmetrics_zookeeperrequestlatencyms")["0.50"] < 5000
    assert not unserved_queries(served, NEEDS_SPECIAL_TRAFFIC)  # what Prometheus scrapes of the cluster
    # the group's coordinator alone reports it (Kafka's GroupMetadataManager is per broker)
    lags = [value(scrape(port), "kafka_consumergroup_lag", consumergroup="mirror-readers", topic="mirrored", partition="0")
            for port in c.metrics_ports.values()]
    assert sorted(lags) == [0, 0, 10]
    lead = scrape(c.metrics_ports[ctrl])
    assert value(lead, "kafka_topic_partition_current_offset", topic="mirrored", partition="0") == 30
    assert value(lead, "kafka_server_replicamanager_atminisrpartitioncount") == 0  # ISR 3 > 2
    shrinks = value(lead, "kafka_server_replicamanager_isrshrinks_total")
    expands = value(lead, "kafka_server_replicamanager_isrexpands_total")

    f1, f2 = [b for b in c.brokers if b != ctrl]
    os.killpg(c.brokers[f1].proc.pid, signal.SIGSTOP)
    try:
        p.produce("mirrored", b"moves-on", partition=0)  # a follower in sync stays in the ISR while silent
        p.flush(30)
        c.wait_for(lambda: sorted(c.partition_state("mirrored", 0)["isr"]) == sorted([ctrl, f2]), 30,
                   "the stopped follower out of the ISR")
        m = scrape_when(c, ctrl, "kafka_server_replicamanager_underreplicatedpartitions", 1)
        assert value(m, "kafka_server_replicamanager_isrshrinks_total") == shrinks + 1
        assert value(m, "kafka_server_replicamanager_atminisrpartitioncount") == 1  # ISR 2 == min.insync.replicas
        assert value(m, "kafka_server_replicamanager_underminisrpartitioncount") == 0
        os.killpg(c.brokers[f2].proc.pid, signal.SIGSTOP)
        try:
            p.produce("mirrored", b"moves-on-2", partition=0)
            p.poll(1)
            c.wait_for(lambda: c.partition_state("mirrored", 0)["isr"] == [ctrl], 30, "ISR of the leader alone")
            m = scrape_when(c, ctrl, "kafka_server_replicamanager_underminisrpartitioncount", 1)
            assert value(m, "kafka_server_replicamanager_isrshrinks_total") == shrinks + 2
            assert value(m, "kafka_server_replicamanager_atminisrpartitioncount") == 0
        finally:
            os.killpg(c.brokers[f2].proc.pid, signal.SIGCONT)
    finally:
        os.killpg(c.brokers[f1].proc.pid, signal.SIGCONT)
    c.wait_for(lambda: len(c.partition_state("mirrored", 0)["isr"]) == 3, 30, "both followers back in the ISR")
    p.flush(30)
    m = scrape_when(c, ctrl, "kafka_server_replicamanager_underreplicatedpartitions", 0)
    assert value(m, "kafka_server_replicamanager_isrexpands_total") == expands + 2
    assert value(m, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert value(m, "kafka_server_replicamanager_atminisrpartitioncount") == 0


def scrape_when(c, broker_id: int, name: str, wanted: float) -> dict:
    """A scrape of `broker_id` once `name` is `wanted` (the broker's metadata, which the
    scrape asks, follows ZooKeeper's ISR a moment later)."""
    seen: list[dict] = []

    def done() -> bool:
        seen.append(scrape(c.metrics_ports[broker_id]))
        return value(seen[-1], name) == wanted

    c.wait_for(done, 30, f"{name} = {wanted} on broker {broker_id}")
    return seen[-1]
