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


def _ids_per_partition(prefix: str, partitions: int) -> list[str]:
    """One id for each partition of an internal topic of `partitions` (Kafka's placement)."""
    from kafkafast.broker.group_coordinator import java_string_hash

    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        key = f"{prefix}-{i}"
        found.setdefault((java_string_hash(key) & 0x7FFFFFFF) % partitions, key)
        i += 1
    return [found[p] for p in range(partitions)]


def test_workers_racing_to_create_the_internal_topics_both_serve_every_partition(broker_factory):
    """FindCoordinator creates `__consumer_offsets` and `__transaction_state` on first use, in
    whichever worker a connection landed on. When both workers create them at once, the one
    that finds the topic already there (it read the other's topic file while trying) must
    still open its own partitions: before, it never did, and answered NOT_COORDINATOR for
    every group (and transactional id) of those partitions until it was restarted: KafkaJS's
    and confluent-kafka's groups then failed on a 2-worker broker. Eight connections (spread
    over both workers) ask at the same moment, three fresh brokers in a row; then every
    connection's group and transaction requests for an id of each partition are served."""
    import threading

    from kafkafast.protocol import api
    from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
    from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest
    from kafkafast.protocol._generated.offset_fetch import OffsetFetchRequest
    from tests.support.raw_client import RawClient

    parts = 4
    groups, tids = _ids_per_partition("race-group", parts), _ids_per_partition("race-txn", parts)
    retriable = {14, 51}  # COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS
    for round_ in range(3):
        b = broker_factory(f"race{round_}", workers=WORKERS, settings={
            "offsets.topic.num.partitions": str(parts), "transaction.state.log.num.partitions": str(parts)})
        conns = [RawClient(b.port) for _ in range(8)]
        start = threading.Barrier(len(conns))

        def ask(i: int, rc: RawClient) -> None:
            frames = b"".join(api.encode_request(FindCoordinatorRequest(key=key, key_type=kt), 1, n + 1, "race")
                              for n, (key, kt) in enumerate([(groups[i % parts], 0), (tids[i % parts], 1)]))
            start.wait(10)
            rc.send_raw(frames)
            for n in range(2):
                corr, resp = api.decode_response(FindCoordinatorRequest.API_KEY, 1, rc.recv_frame())
                assert (corr, resp.error_code, resp.node_id) == (n + 1, 0, 0)
            rc.correlation = 2

        threads = [threading.Thread(target=ask, args=(i, rc)) for i, rc in enumerate(conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert all(rc.correlation == 2 for rc in conns)  # every FindCoordinator answered, no error
        for n, rc in enumerate(conns):
            for group, tid in zip(groups, tids):
                deadline = time.monotonic() + 20
                while True:
                    group_err = rc.request(OffsetFetchRequest(group_id=group, topics=None), 3).error_code
                    txn_err = rc.request(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                                               producer_id=-1, producer_epoch=-1), 3).error_code
                    if {group_err, txn_err} <= {0} or time.monotonic() > deadline:
                        break
                    assert {group_err, txn_err} <= retriable | {0}, (round_, n, group, group_err, tid, txn_err)
                    time.sleep(0.1)
                assert (group_err, txn_err) == (0, 0), (round_, n, group, tid)
        for rc in conns:
            rc.close()
        b.kill()


def test_confluent_kafka_groups_started_together_on_a_fresh_broker_all_commit(broker_factory):
    """The same race through confluent-kafka: eight consumers created at once on a fresh
    2-worker broker (their FindCoordinator requests create `__consumer_offsets` on both
    workers at the same moment), in groups of every partition of it; each joins, gets the
    topic's partition and commits an offset that reads back. Before, the groups of the
    losing worker's partitions got NOT_COORDINATOR until the consumers gave up."""
    parts = 4
    b = broker_factory("cgrace", workers=WORKERS, settings={
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": str(parts)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("cgrace", 1, 1)])["cgrace"].result(15)
    groups = _ids_per_partition("cgrace-a", parts) + _ids_per_partition("cgrace-b", parts)
    members = [consumer(b.bootstrap, g) for g in groups]
    for c in members:
        c.subscribe(["cgrace"])
    for n, c in enumerate(members):
        deadline = time.monotonic() + 40
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert [tp.partition for tp in c.assignment()] == [0], groups[n]
        c.commit(offsets=[TopicPartition("cgrace", 0, 10 + n)], asynchronous=False)
    for n, c in enumerate(members):
        assert c.committed([TopicPartition("cgrace", 0)], 20)[0].offset == 10 + n, groups[n]
        c.close()
