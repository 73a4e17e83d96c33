"""Consumer groups and kafkafast's own client over the three-broker cluster, where what a single
node has not happens: the group coordinator's broker killed, a partition leader stopped, offsets
committed for partitions the coordinator's broker does not host. Produce and consume with every
client and groups that join and leave, the same in both modes, run on a single node and a
cluster from the `kafka` fixture (tests/integration/test_real_clients.py, test_client_matrix.py,
test_groups.py)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kafkafast.client.sync import KafkaConsumer, KafkaProducer
from tests.support.cluster import group_coordinator


def _commit_ok(consumer) -> bool:
    try:
        consumer.commit(asynchronous=False)
        return True
    except Exception:
        return False


@pytest.mark.parametrize("cluster", [2], indirect=True, ids=["workers2"])
def test_consumer_group_survives_the_coordinators_broker_being_killed_with_worker_processes(cluster):
    """Cluster only (the coordinator moves to another broker), in brokers of two worker
    processes: the new coordinator loads the group in the worker owning its __consumer_offsets
    partition, the members' commits go on there, and a new member resumes from them. (With
    one process per broker: the three-client failover test below.)"""
    cluster.create_topic("grp", 3, 3, {"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        p.produce("grp", b"%05d" % i, partition=i % 3)
    assert p.flush(30) == 0
    settings = {"bootstrap.servers": cluster.bootstrap, "group.id": "survivors", "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000}
    c = Consumer(settings)
    c.subscribe(["grp"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 300:
        assert time.monotonic() < deadline, f"only {len(seen)} of the first 300 consumed"
        m = c.poll(1.0)
        if m is not None and not m.error():
            seen.add(m.value())
    c.commit(asynchronous=False)
    coordinator = cluster.wait_for(lambda: max(group_coordinator(cluster, "survivors"), 0), 20, "the group's coordinator")
    victim = cluster.brokers[coordinator]
    victim.kill()
    try:
        for i in range(300, 600):
            p.produce("grp", b"%05d" % i, partition=i % 3)
        assert p.flush(60) == 0
        deadline = time.monotonic() + 90
        while len(seen) < 600:
            assert time.monotonic() < deadline, f"only {len(seen)} of 600 consumed after the coordinator died"
            m = c.poll(1.0)
            if m is not None and not m.error():
                seen.add(m.value())
        cluster.wait_for(lambda: group_coordinator(cluster, "survivors") not in (-1, coordinator), 30, "a new coordinator")
        cluster.wait_for(lambda: _commit_ok(c), 30, "a commit through the new coordinator")
        c.close()
        assert seen == {b"%05d" % i for i in range(600)}
        # a new member of the group starts from the committed offsets: it reaches the end of
        # every partition (200 records each) without a record to read
        c2 = Consumer({**settings, "enable.partition.eof": True})
        c2.subscribe(["grp"])
        extra, ends = [], {}
        deadline = time.monotonic() + 30
        while len(ends) < 3 and time.monotonic() < deadline:
            m = c2.poll(0.5)
            if m is None:
                continue
            if m.error() is None:
                extra.append(m.value())
            elif m.error().code() == KafkaError._PARTITION_EOF:
                ends[m.partition()] = m.offset()
        c2.close()
        assert extra == [] and ends == {0: 200, 1: 200, 2: 200}, (extra[:5], ends)
    finally:
        victim.start(timeout=60)


def test_kafkafast_client_follows_a_leader_change(cluster):
    """Cluster only (leader failover): kafkafast's producer (acks=all) goes on with the new leader
    of a partition whose leader stopped; its consumer group reads every record."""
    cluster.create_topic("own", 2, 3, {"min.insync.replicas": "2"})
    producer = KafkaProducer(cluster.bootstrap, acks="all")
    victim = None
    try:
        for i in range(200):
            producer.send("own", b"%04d" % i, partition=i % 2)
        producer.flush(30)
        leader = cluster.leader("own", 0)
        victim = cluster.brokers[leader]
        assert victim.stop() == 0
        cluster.wait_for(lambda: cluster.leader("own", 0) not in (-1, leader), 20, "a new leader")
        for i in range(200, 400):
            producer.send("own", b"%04d" % i, partition=i % 2)
        producer.flush(60)
    finally:
        producer.close()
    # back before the group read: __consumer_offsets (replication factor 3) cannot be created
    # with a broker down, and Kafka answers COORDINATOR_NOT_AVAILABLE until it can
    victim.start(timeout=60)
    victim = None
    consumer = KafkaConsumer("own", bootstrap_servers=cluster.bootstrap, group_id="own-reader",
                             auto_offset_reset="earliest")
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < 400 and time.monotonic() < deadline:
            for records in consumer.poll(1000).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
        if victim is not None:
            victim.start(timeout=60)
    assert sorted(got) == [b"%04d" % i for i in range(400)]


def test_three_client_libraries_share_a_group_through_a_coordinator_failover(cluster):
    """Cluster only (the coordinator moves): confluent-kafka, kafka-python and kafkafast consumers
    in one group keep consuming when the coordinator's broker is SIGKILLed; their auto-commits
    reach the new coordinator (every partition's committed offset is its end)."""
    import threading

    import kafka
    from confluent_kafka import TopicPartition as CTP

    topic, group, n = "mixed", "mixed-group", 600
    cluster.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    seen: dict[str, set[bytes]] = {"confluent": set(), "kafka-python": set(), "kafkafast": set()}
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(name, poll, close):
        try:
            while not stop.is_set():
                seen[name].update(poll())
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            close()

    cc = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                   "auto.commit.interval.ms": 500, "session.timeout.ms": 10000})
    cc.subscribe([topic])
    kp = kafka.KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap.split(","), group_id=group,
                             auto_offset_reset="earliest", auto_commit_interval_ms=500, session_timeout_ms=10000,
                             heartbeat_interval_ms=1000)
    kf = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest",
                       auto_commit_interval_ms=500, session_timeout_ms=10000, heartbeat_interval_ms=1000)
    threads = [
        threading.Thread(target=run, args=("confluent", lambda: {m.value() for m in cc.consume(100, 0.5)
                                                                if not m.error()}, cc.close)),
        threading.Thread(target=run, args=("kafka-python", lambda: {r.value for rs in kp.poll(500).values()
                                                                   for r in rs}, kp.close)),
        threading.Thread(target=run, args=("kafkafast", lambda: {r.value for rs in kf.poll(500).values()
                                                                for r in rs}, kf.close)),
    ]
    for t in threads:
        t.start()
    victim = None
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

        def three_members_assigned() -> bool:  # the group has formed: every client holds partitions
            try:
                d = admin.describe_consumer_groups([group])[group].result(10)
            except Exception:
                return False
            return len(d.members) == 3 and all(m.assignment.topic_partitions for m in d.members)

        cluster.wait_for(three_members_assigned, 90, "three clients in the group, each with partitions")
        for i in range(n // 2):
            p.produce(topic, b"%05d" % i, partition=i % 6)
        assert p.flush(30) == 0
        everyone = lambda: set().union(*seen.values())  # noqa: E731
        cluster.wait_for(lambda: len(everyone()) >= n // 2, 90, "the first half consumed")
        coordinator = cluster.wait_for(lambda: max(group_coordinator(cluster, group), 0), 20, "the coordinator")
        victim = cluster.brokers[coordinator]
        victim.kill()
        for i in range(n // 2, n):
            p.produce(topic, b"%05d" % i, partition=i % 6)
        assert p.flush(60) == 0
        cluster.wait_for(lambda: len(everyone()) >= n, 120, "everything consumed after the coordinator died")
        assert everyone() == {b"%05d" % i for i in range(n)}
        assert sum(1 for s in seen.values() if s) >= 2  # the partitions were shared
        time.sleep(2)  # a last auto-commit
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        if victim is not None:
            victim.start(timeout=60)
    assert errors == []
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        committed = check.committed([CTP(topic, i) for i in range(6)], timeout=30)
        ends = [check.get_watermark_offsets(CTP(topic, i), timeout=30)[1] for i in range(6)]
        assert [c.offset for c in committed] == ends
    finally:
        check.close()


def test_offsets_commit_for_partitions_the_coordinator_does_not_host(cluster):
    """Cluster only (a single node hosts every partition): a group commits offsets for three
    partitions with one replica each, on three brokers, two of which are not the coordinator's."""
    from confluent_kafka import TopicPartition as CTP

    cluster.create_topic("spread", 3, 1)  # one replica each: the coordinator hosts at most one of them
    hosts = {cluster.leader("spread", p) for p in range(3)}
    assert len(hosts) == 3
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "spread-group", "enable.auto.commit": False})
    try:
        offsets = [CTP("spread", p, 10 + p) for p in range(3)]
        committed = c.commit(offsets=offsets, asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 10, None), (1, 11, None),
                                                                            (2, 12, None)]
        got = c.committed([CTP("spread", p) for p in range(3)], timeout=30)
        assert [tp.offset for tp in got] == [10, 11, 12]
    finally:
        c.close()

