"""Online migration between the classic and the consumer group protocol in one group
(KIP-848, `group.consumer.migration.policy`), with librdkafka consumers on a real broker:
a classic group upgraded by a `group.protocol=consumer` member and downgraded when it
leaves, records consumed exactly once across the changes, committed offsets kept, a
converted group going on after a broker restart; and the refusals of the policy
`disabled` with Kafka's error."""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkafast.protocol._generated.consumer_group_describe import ConsumerGroupDescribeRequest
from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kafkafast.protocol._generated.join_group import JoinGroupRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.integration.test_consumer_group_protocol import SETTINGS, create_topics, new_consumer, produce, settle
from tests.support.raw_client import RawClient

CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest",
           "enable.auto.commit": False}


def classic_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CLASSIC})
    c.subscribe([topic])
    return c


def drain_exact(consumers: list[Consumer], records: dict, want: set, timeout: float = 30) -> None:
    """Polls until every record of `want` was seen; `records` counts each value seen."""
    deadline = time.monotonic() + timeout
    while not want <= set(records) and time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                records[msg.value()] = records.get(msg.value(), 0) + 1
    assert want <= set(records), f"missing {sorted(want - set(records))}"


def commit_all(consumers: list[Consumer], records: dict, timeout: float = 20) -> None:
    """Commits each consumer's positions; a commit refused during a rebalance is retried."""
    for c in consumers:
        deadline = time.monotonic() + timeout
        while True:
            try:
                c.commit(asynchronous=False)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                for other in consumers:
                    msg = other.poll(0.05)
                    if msg is not None and msg.error() is None:
                        records[msg.value()] = records.get(msg.value(), 0) + 1


def group_type(bootstrap: str, group: str) -> ConsumerGroupType:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(10).type


def values(tag: str, partitions: int, per_partition: int) -> set[bytes]:
    return {f"{tag}{p}-{i}".encode() for p in range(partitions) for i in range(per_partition)}


def test_classic_group_upgrades_to_consumer_group_and_back(broker_factory):
    b = broker_factory(settings=SETTINGS)
    bs, topic, group = b.bootstrap, "mig", "g-mig"
    create_topics(bs, {topic: 4})
    produce(bs, topic, 4, 5, tag="a")
    records: dict[bytes, int] = {}
    c1, c2 = classic_consumer(bs, group, topic), classic_consumer(bs, group, topic)
    settle([c1, c2], 4, records, sizes=[2, 2])
    drain_exact([c1, c2], records, values("a", 4, 5))
    commit_all([c1, c2], records)
    assert group_type(bs, group) == ConsumerGroupType.CLASSIC

    # A consumer-protocol member joins: the group becomes a consumer group, all three share the partitions.
    c3 = new_consumer(bs, group, [topic])
    parts = settle([c1, c2, c3], 4, records, sizes=[1, 1, 2])
    assert len(set().union(*parts)) == 4
    assert group_type(bs, group) == ConsumerGroupType.CONSUMER
    with RawClient(b.port) as raw:
        d = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
    assert d.error_code == 0 and sorted(m.member_type for m in d.members) == [0, 0, 1]  # two classic, one consumer
    produce(bs, topic, 4, 3, tag="b")
    drain_exact([c1, c2, c3], records, values("b", 4, 3))
    assert set(records.values()) == {1}  # the classic members' commits held: nothing read twice
    commit_all([c1, c2, c3], records)
    committed = {tp.partition: tp.offset for tp in c1.committed([TopicPartition(topic, p) for p in range(4)], 10)}
    assert committed == {p: 8 for p in range(4)}

    # It leaves: the group is classic again and the classic members take every partition.
    c3.close()
    settle([c1, c2], 4, records, sizes=[2, 2])
    assert group_type(bs, group) == ConsumerGroupType.CLASSIC
    produce(bs, topic, 4, 3, tag="c")
    drain_exact([c1, c2], records, values("c", 4, 3))
    assert set(records.values()) == {1}
    assert set(records) == values("a", 4, 5) | values("b", 4, 3) | values("c", 4, 3)
    c1.close()
    c2.close()


def test_an_upgraded_group_goes_on_after_a_restart(broker_factory):
    b = broker_factory(settings=SETTINGS)
    bs, topic, group = b.bootstrap, "mig-r", "g-mig-r"
    create_topics(bs, {topic: 2})
    records: dict[bytes, int] = {}
    c1 = classic_consumer(bs, group, topic)
    settle([c1], 2, records)
    c2 = new_consumer(bs, group, [topic])
    settle([c1, c2], 2, records, sizes=[1, 1])
    produce(bs, topic, 2, 4, tag="a")
    drain_exact([c1, c2], records, values("a", 2, 4))
    commit_all([c1, c2], records)
    with RawClient(b.port) as raw:
        before = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
    b.restart()
    with RawClient(b.port) as raw:
        deadline = time.monotonic() + 20
        while True:
            d = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
            if d.error_code != EC.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert d.error_code == 0  # still a consumer group, with its classic member
    assert sorted((m.member_id, m.member_type) for m in d.members) == \
        sorted((m.member_id, m.member_type) for m in before.members)
    produce(bs, topic, 2, 3, tag="b")
    drain_exact([c1, c2], records, values("b", 2, 3), timeout=40)
    assert {v: n for v, n in records.items() if n != 1} == {}
    c1.close()
    c2.close()


def test_policy_disabled_refuses_the_upgrade_with_group_id_not_found(broker_factory):
    b = broker_factory(settings={**SETTINGS, "group.consumer.migration.policy": "disabled"})
    bs, topic = b.bootstrap, "mig-d"
    create_topics(bs, {topic: 2})
    c1 = classic_consumer(bs, "g-mig-d", topic)
    settle([c1], 2)
    hb = ConsumerGroupHeartbeatRequest(group_id="g-mig-d", member_id=uuid.uuid4().hex, member_epoch=0,
                                       rebalance_timeout_ms=10000, subscribed_topic_names=[topic], topic_partitions=[])
    with RawClient(b.port) as raw:
        r = raw.request(hb, 1)
        assert r.error_code == EC.GROUP_ID_NOT_FOUND
        assert r.error_message == "Cannot upgrade classic group g-mig-d to consumer group because online " \
                                  "upgrade is disabled."
        assert group_type(bs, "g-mig-d") == ConsumerGroupType.CLASSIC
        assert {(tp.topic, tp.partition) for tp in c1.assignment()} == {(topic, 0), (topic, 1)}
        # A group that does not use the consumer embedded protocol is never upgraded either.
        hb.group_id = "g-connect"
        join = JoinGroupRequest(group_id="g-connect", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                member_id="", protocol_type="connect",
                                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="default", metadata=b"x")])
        first = raw.request(join, 7)
        assert first.error_code == EC.MEMBER_ID_REQUIRED
        join.member_id = first.member_id
        assert raw.request(join, 7).error_code == 0
        r = raw.request(hb, 1)
        assert r.error_code == EC.GROUP_ID_NOT_FOUND and "disabled" in r.error_message
    c1.close()
