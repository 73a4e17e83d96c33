"""The consumer group protocol (KIP-848) on the three-broker cluster: the group lives with
the leader of its __consumer_offsets partition (the others answer NOT_COORDINATOR), and
librdkafka consumers with group.protocol=consumer get complete assignments and keep
consuming after the coordinator's broker is killed (the new leader loads the group, its
members rejoin) with their commits intact."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.support.cluster import KafkaCluster, group_coordinator
from tests.support.raw_client import RawClient

SETTINGS = {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000",
            "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000"}


@pytest.fixture(scope="module")
def kip848_cluster(tmp_path_factory):
    c = KafkaCluster(tmp_path_factory.mktemp("cluster-kip848"), settings=SETTINGS)
    try:
        yield c.start()
    finally:
        c.close()


def poll_into(consumers, seen: set) -> None:
    for c in consumers:
        m = c.poll(0.1)
        if m is not None and not m.error():
            seen.add(m.value())


def test_consumer_protocol_group_follows_its_coordinator(kip848_cluster):
    cluster = kip848_cluster
    cluster.create_topic("k848", 4, 3, {"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        p.produce("k848", b"%05d" % i, partition=i % 4)
    assert p.flush(30) == 0
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": "k848-group", "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    members = [Consumer(conf), Consumer(conf)]
    for c in members:
        c.subscribe(["k848"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while True:
        poll_into(members, seen)
        parts = [{tp.partition for tp in c.assignment()} for c in members]
        if len(seen) == 200 and all(len(x) == 2 for x in parts) and parts[0] | parts[1] == {0, 1, 2, 3}:
            break
        assert time.monotonic() < deadline, f"{len(seen)} consumed, assignment {parts}"
    coordinator = cluster.wait_for(lambda: max(group_coordinator(cluster, "k848-group"), 0), 20, "the coordinator")
    other = next(i for i in cluster.brokers if i != coordinator)
    with RawClient(cluster.brokers[other].port) as rc:
        resp = rc.request(ConsumerGroupHeartbeatRequest(group_id="k848-group", member_id="m", member_epoch=0,
                                                        rebalance_timeout_ms=1000, subscribed_topic_names=["k848"],
                                                        topic_partitions=[]), 1)
    assert resp.error_code == EC.NOT_COORDINATOR
    for c in members:
        c.commit(asynchronous=False)

    victim = cluster.brokers[coordinator]
    victim.kill()
    try:
        for i in range(200, 400):
            p.produce("k848", b"%05d" % i, partition=i % 4)
        assert p.flush(60) == 0
        deadline = time.monotonic() + 90
        while len(seen) < 400:
            assert time.monotonic() < deadline, f"only {len(seen)} of 400 consumed after the coordinator died"
            poll_into(members, seen)
        assert seen == {b"%05d" % i for i in range(400)}
        new = cluster.wait_for(lambda: group_coordinator(cluster, "k848-group") not in (-1, coordinator), 30,
                               "a new coordinator")
        assert new
        for c in members:
            c.close()
    finally:
        victim.start(timeout=60)
