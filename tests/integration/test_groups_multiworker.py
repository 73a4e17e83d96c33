"""Consumer groups on a multi-process broker: members whose connections land on different
worker processes see one group (group requests are forwarded to the worker owning the
group's __consumer_offsets partition), and committed offsets survive a restart."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

WORKERS = 2
SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "8"}


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return Consumer(conf)


def settle(consumers: list[Consumer], total: int, timeout: float = 60) -> list[set[int]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        parts = [{tp.partition for tp in c.assignment()} for c in consumers]
        union = set().union(*parts)
        if len(union) == total and sum(len(p) for p in parts) == total and all(parts):
            return parts
    raise AssertionError(f"no complete assignment: {[sorted(p) for p in parts]}")


def test_group_members_on_different_workers_share_one_group(broker_factory):
    b = broker_factory("mw", workers=WORKERS, settings=SETTINGS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mwg", 12, 1)])["mwg"].result(15)
    members = [consumer(b.bootstrap, "mw-group") for _ in range(4)]  # 4 connections spread over 2 workers
    for c in members:
        c.subscribe(["mwg"])
    parts = settle(members, 12)
    assert sorted(len(p) for p in parts) == [3, 3, 3, 3]
    for c in members:
        c.close()


def test_offsets_committed_through_one_worker_are_read_through_another(broker_factory):
    b = broker_factory("mwo", workers=WORKERS, settings=SETTINGS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mwo", 3, 1)])["mwo"].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(300):
        p.produce("mwo", value=b"%d" % i, partition=i % 3)
    assert p.flush(20) == 0
    c = consumer(b.bootstrap, "mwo-group")
    c.commit(offsets=[TopicPartition("mwo", 0, 17), TopicPartition("mwo", 1, 42), TopicPartition("mwo", 2, 99)],
             asynchronous=False)
    c.close()
    seen = set()
    for _ in range(6):  # new connections land on either worker; every one sees the same commits
        c = consumer(b.bootstrap, "mwo-group")
        got = c.committed([TopicPartition("mwo", i) for i in range(3)], timeout=10)
        seen.add(tuple(tp.offset for tp in got))
        c.close()
    assert seen == {(17, 42, 99)}
    assert b.stop() == 0
    b.start()
    c = consumer(b.bootstrap, "mwo-group")
    assert [tp.offset for tp in c.committed([TopicPartition("mwo", i) for i in range(3)], timeout=10)] == [17, 42, 99]
    c.subscribe(["mwo"])
    first = {}
    deadline = time.monotonic() + 30
    while len(first) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            first.setdefault(m.partition(), m.offset())
    c.close()
    assert first == {0: 17, 1: 42, 2: 99}


def test_list_describe_and_delete_groups_see_groups_of_every_worker(broker_factory):
    from confluent_kafka import ConsumerGroupTopicPartitions

    b = broker_factory("mwl", workers=WORKERS, settings=SETTINGS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mwl", 2, 1)])["mwl"].result(15)
    groups = [f"grp-{i}" for i in range(8)]  # spread over the 8 offsets partitions, so over both workers
    for g in groups:
        c = consumer(b.bootstrap, g)
        c.commit(offsets=[TopicPartition("mwl", 0, 5)], asynchronous=False)
        c.close()
    for _ in range(3):  # whichever worker answers, every group is listed
        listed = admin.list_consumer_groups().result(15)
        assert {g.group_id for g in listed.valid} >= set(groups)
    described = admin.describe_consumer_groups(groups)
    assert {g: f.result(15).state.name for g, f in described.items()} == {g: "EMPTY" for g in groups}
    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g) for g in groups[:1]])
    assert [tp.offset for tp in list(fetched.values())[0].result(15).topic_partitions] == [5]
    deleted = admin.delete_consumer_groups(groups)
    for f in deleted.values():
        f.result(15)
    listed = admin.list_consumer_groups().result(15)
    assert not ({g.group_id for g in listed.valid} & set(groups))
