"""The consumer group protocol (KIP-848) on the three-broker cluster: the group lives with
the leader of its __consumer_offsets partition (the others answer NOT_COORDINATOR), and
librdkafka consumers with group.protocol=consumer get complete assignments and keep
consuming after the coordinator's broker is killed (the new leader loads the group, its
members rejoin) with their commits intact. Both tests are cluster only: the coordinator moves
to another broker. The protocol's behaviour the same in both modes (joins, leaves, complete
and disjoint assignments, commit and resume beside a classic group) runs on a single node and a
cluster from the `kafka` fixture in tests/integration/test_consumer_group_protocol.py."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.support.cluster import KafkaCluster, group_coordinator
from tests.support.raw_client import RawClient

HB = ConsumerGroupHeartbeatRequest
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
    """Brokers other than the coordinator answer NOT_COORDINATOR; after the coordinator's broker
    is SIGKILLed, the members go on consuming through the new one."""
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


def test_assignments_answered_survive_a_coordinator_failover(kip848_cluster):
    """Every heartbeat answer waits for the ISR: right after member b is handed its partitions
    the coordinator dies, and the new one knows b's epoch and partitions (no fencing)."""
    cluster = kip848_cluster
    cluster.create_topic("k848fo", 4, 3, {"min.insync.replicas": "2"})
    group = "k848-failover"
    coordinator = cluster.wait_for(lambda: max(group_coordinator(cluster, group), 0), 20, "the coordinator")

    def leaders_known() -> bool:  # the coordinator assigns what its metadata has (UpdateMetadata can lag ZooKeeper)
        with RawClient(cluster.brokers[coordinator].port) as rc:
            md = rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="k848fo")],
                                            allow_auto_topic_creation=False), 9)
        return md.topics[0].error_code == 0 and sorted(p.partition_index for p in md.topics[0].partitions
                                                       if p.leader_id >= 0) == [0, 1, 2, 3]

    cluster.wait_for(leaders_known, 30, "the coordinator's metadata of k848fo")

    def hb(rc, member, epoch, held, **kw):
        tps = None if held is None else [HB.TopicPartitions(topic_id=t, partitions=sorted(p)) for t, p in held.items()]
        r = rc.request(HB(group_id=group, member_id=member, member_epoch=epoch, topic_partitions=tps, **kw), 1)
        got = None if r.assignment is None else {bytes(t.topic_id): set(t.partitions) for t in r.assignment.topic_partitions}
        return r, got

    join = {"rebalance_timeout_ms": 10000, "subscribed_topic_names": ["k848fo"]}
    with RawClient(cluster.brokers[coordinator].port) as rc:
        ra, held_a = hb(rc, "a", 0, {}, **join)
        assert ra.error_code == 0 and sum(len(p) for p in held_a.values()) == 4
        rb, held_b = hb(rc, "b", 0, {}, **join)
        assert rb.error_code == 0
        r, keep = hb(rc, "a", ra.member_epoch, held_a)  # a revokes two ...
        r, _ = hb(rc, "a", r.member_epoch, keep)  # ... acknowledges, moves on
        held_a, epoch_a = keep, r.member_epoch
        r, held_b = hb(rc, "b", rb.member_epoch, held_b or {})  # b gets the two freed partitions
        assert r.error_code == 0 and sum(len(p) for p in held_b.values()) == 2
        epoch_b = r.member_epoch
    victim = cluster.brokers[coordinator]
    victim.kill()  # at once: only what the ISR holds survives
    try:
        new = cluster.wait_for(lambda: group_coordinator(cluster, group) not in (-1, coordinator) and
                               group_coordinator(cluster, group), 30, "a new coordinator")
        deadline = time.monotonic() + 30
        with RawClient(cluster.brokers[new].port) as rc:
            while True:
                r, got = hb(rc, "b", epoch_b, held_b)
                if r.error_code not in (EC.COORDINATOR_LOAD_IN_PROGRESS, EC.NOT_COORDINATOR,
                                        EC.COORDINATOR_NOT_AVAILABLE) or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert r.error_code == 0 and r.member_epoch >= epoch_b and got in (None, held_b)
            r, got = hb(rc, "a", epoch_a, held_a)
            assert r.error_code == 0 and got in (None, held_a)
    finally:
        victim.start(timeout=60)
