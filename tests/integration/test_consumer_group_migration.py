"""Online migration between the classic and the consumer group protocol in one group
(KIP-848, `group.consumer.migration.policy`), with librdkafka (and kafka-python) consumers
and raw requests on a real broker:
a classic group upgraded by a `group.protocol=consumer` member and downgraded when it
leaves, records consumed exactly once across the changes, committed offsets kept, a
converted group going on after a broker restart; and the refusals of the policy
`disabled` with Kafka's error."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkafast.protocol._generated.consumer_group_describe import ConsumerGroupDescribeRequest
from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kafkafast.protocol._generated.join_group import JoinGroupRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.integration.test_consumer_group_protocol import SETTINGS, create_topics, new_consumer, produce, settle
from tests.support.kafka_python import group_consumer
from tests.support.raw_client import RawClient

CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest",
           "enable.auto.commit": False}


def classic_consumer(bootstrap: str, group: str, topic: str, strategy: str = "range,roundrobin") -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
                  **CLASSIC})
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


def settle_stable(port: int, group: str, consumers: list[Consumer], total: int, records: dict, sizes: list[int],
                  timeout: float = 40) -> list[set]:
    """`settle`, then polls until the coordinator reports the consumer group Stable (every
    member at the assignment epoch: a complete-looking state seen on the way is not the end),
    then `settle` again."""
    settle(consumers, total, records, sizes=sizes)
    deadline = time.monotonic() + timeout
    with RawClient(port) as raw:
        while True:
            d = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
            if d.group_state == "Stable" or time.monotonic() > deadline:
                break
            for c in consumers:
                msg = c.poll(0.05)
                if msg is not None and msg.error() is None:
                    records[msg.value()] = records.get(msg.value(), 0) + 1
    assert d.group_state == "Stable"
    return settle(consumers, total, records, sizes=sizes)


def twice(records: dict) -> dict:
    return {v: n for v, n in records.items() if n != 1}


def values(tag: str, partitions: int, per_partition: int) -> set[bytes]:
    return {f"{tag}{p}-{i}".encode() for p in range(partitions) for i in range(per_partition)}


@pytest.mark.parametrize("strategy,workers", [("range,roundrobin", 0), ("cooperative-sticky", 0),
                                              ("range,roundrobin", 2)])  # librdkafka's default; incremental
def test_classic_group_upgrades_to_consumer_group_and_back(broker_factory, strategy, workers):
    b = broker_factory(workers=workers, settings=SETTINGS)
    bs, topic, group = b.bootstrap, "mig", "g-mig"
    create_topics(bs, {topic: 4})
    records: dict[bytes, int] = {}
    c1, c2 = classic_consumer(bs, group, topic, strategy), classic_consumer(bs, group, topic, strategy)
    settle([c1, c2], 4, records, sizes=[2, 2])
    produce(bs, topic, 4, 5, tag="a")  # produced once the classic group is settled: each read once
    drain_exact([c1, c2], records, values("a", 4, 5))
    commit_all([c1, c2], records)
    assert group_type(bs, group) == ConsumerGroupType.CLASSIC

    # A consumer-protocol member joins: the group becomes a consumer group, all three share the partitions.
    c3 = new_consumer(bs, group, [topic])
    parts = settle_stable(b.port, group, [c1, c2, c3], 4, records, sizes=[1, 1, 2])
    assert len(set().union(*parts)) == 4
    assert group_type(bs, group) == ConsumerGroupType.CONSUMER
    with RawClient(b.port) as raw:
        d = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
    assert d.error_code == 0 and sorted(m.member_type for m in d.members) == [0, 0, 1]  # two classic, one consumer
    produce(bs, topic, 4, 3, tag="b")
    drain_exact([c1, c2, c3], records, values("b", 4, 3))
    assert twice(records) == {}  # the classic members' commits held: nothing read twice
    commit_all([c1, c2, c3], records)
    committed = {tp.partition: tp.offset for tp in c1.committed([TopicPartition(topic, p) for p in range(4)], 10)}
    assert committed == {p: 8 for p in range(4)}

    # It leaves: the group is classic again and the classic members take every partition.
    c3.close()
    settle([c1, c2], 4, records, sizes=[2, 2])
    assert group_type(bs, group) == ConsumerGroupType.CLASSIC
    produce(bs, topic, 4, 3, tag="c")
    drain_exact([c1, c2], records, values("c", 4, 3))
    assert twice(records) == {}
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
    settle_stable(b.port, group, [c1, c2], 2, records, sizes=[1, 1])
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
    assert twice(records) == {}
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


def test_classic_member_inside_a_consumer_group_request_by_request(broker_factory):
    """The classic protocol served by a consumer group, with raw requests: the upgrade keeps
    the classic member's partitions, its heartbeat asks it to rejoin, its join gets the member
    epoch as generation and no leader, SyncGroup the server's assignment, generations and
    commits are checked against its member epoch, and the consumer member leaving turns the
    group back into a classic group that rebalances."""
    from kafkafast.client.consumer_protocol import Subscription, decode_assignment, encode_assignment, \
        encode_subscription
    from kafkafast.protocol._generated.describe_groups import DescribeGroupsRequest
    from kafkafast.protocol._generated.heartbeat import HeartbeatRequest
    from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest as OC
    from kafkafast.protocol._generated.offset_fetch import OffsetFetchRequest as OF
    from kafkafast.protocol._generated.sync_group import SyncGroupRequest
    from kafkafast.client.consumer_protocol import Assignment as ClassicAssignment

    b = broker_factory(settings=SETTINGS)
    topic, group = "mig-raw", "g-mig-raw"
    create_topics(b.bootstrap, {topic: 2})
    meta = encode_subscription(Subscription([topic]))
    JG = JoinGroupRequest

    def classic_join(raw, member_id):
        return raw.request(JG(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member_id,
                              protocol_type="consumer", protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=meta)]),
                           7)

    def sync(raw, member_id, generation, assignments=()):
        r = raw.request(SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                                         protocol_type="consumer", protocol_name="range", assignments=[
                                             SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                             for m, a in assignments]), 5)
        return r.error_code, sorted(decode_assignment(r.assignment).partitions) if r.assignment else []

    def heartbeat(raw, member_id, generation):
        return raw.request(HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id), 4).error_code

    def commit(raw, member_id, generation, offset):
        return raw.request(OC(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, topics=[
            OC.OffsetCommitRequestTopic(name=topic, partitions=[
                OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]), 8
        ).topics[0].partitions[0].error_code

    with RawClient(b.port) as raw:
        a = classic_join(raw, "").member_id
        j = classic_join(raw, a)
        assert (j.error_code, j.generation_id, j.leader) == (0, 1, a)
        everything = encode_assignment(ClassicAssignment([(topic, 0), (topic, 1)]))
        assert sync(raw, a, 1, [(a, everything)]) == (0, [(topic, 0), (topic, 1)])
        assert commit(raw, a, 1, 3) == 0

        # A consumer-protocol member upgrades the group; the classic member keeps both partitions for now.
        c_id = uuid.uuid4().hex
        hb = raw.request(ConsumerGroupHeartbeatRequest(group_id=group, member_id=c_id, member_epoch=0,
                                                       rebalance_timeout_ms=10000, subscribed_topic_names=[topic],
                                                       topic_partitions=[]), 1)
        assert hb.error_code == 0 and hb.member_epoch == 2 and not hb.assignment.topic_partitions
        assert heartbeat(raw, a, 1) == EC.REBALANCE_IN_PROGRESS
        assert heartbeat(raw, a, 7) == EC.ILLEGAL_GENERATION
        assert heartbeat(raw, "nobody", 1) == EC.UNKNOWN_MEMBER_ID
        assert heartbeat(raw, c_id, 2) == EC.UNKNOWN_MEMBER_ID  # not a classic member
        assert commit(raw, a, 1, 4) == 0  # its generation is still 1 until it rejoins

        j = classic_join(raw, a)  # eager: it owns nothing when it rejoins
        assert (j.error_code, j.generation_id, j.leader, list(j.members), j.protocol_name) == (0, 2, "", [], "range")
        assert sync(raw, a, 1) == (EC.ILLEGAL_GENERATION, [])
        err, mine = sync(raw, a, 2)
        assert err == 0 and len(mine) == 1
        assert heartbeat(raw, a, 2) == 0
        assert commit(raw, a, 1, 5) == EC.ILLEGAL_GENERATION
        assert commit(raw, a, 2, 5) == 0
        hb = raw.request(ConsumerGroupHeartbeatRequest(group_id=group, member_id=c_id, member_epoch=2), 1)
        theirs = {(topic, p) for t in hb.assignment.topic_partitions for p in t.partitions}
        assert hb.error_code == 0 and theirs == {(topic, 0), (topic, 1)} - set(mine)
        d = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
        assert sorted((m.member_id, m.member_type) for m in d.members) == sorted([(a, 0), (c_id, 1)])

        # The consumer-protocol member leaves: a classic group again, rebalancing with its generation.
        assert raw.request(ConsumerGroupHeartbeatRequest(group_id=group, member_id=c_id, member_epoch=-1), 1
                           ).error_code == 0
        dg = raw.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert (dg.group_state, dg.protocol_type, [m.member_id for m in dg.members]) == \
            ("PreparingRebalance", "consumer", [a])
        assert heartbeat(raw, a, 2) == EC.REBALANCE_IN_PROGRESS
        j = classic_join(raw, a)
        assert (j.error_code, j.generation_id, j.leader, [m.member_id for m in j.members]) == (0, 3, a, [a])
        assert sync(raw, a, 3, [(a, everything)]) == (0, [(topic, 0), (topic, 1)])
        f = raw.request(OF(group_id=group, topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 5)
        assert f.topics[0].partitions[0].committed_offset == 5


def test_a_silent_classic_member_of_a_consumer_group_expires(broker_factory):
    """A classic member inside a consumer group has its own session timeout: when it stops
    heartbeating it is removed and the consumer-protocol member gets its partitions."""
    from kafkafast.client.consumer_protocol import Assignment as ClassicAssignment, Subscription, \
        encode_assignment, encode_subscription
    from kafkafast.protocol._generated.sync_group import SyncGroupRequest

    b = broker_factory(settings={**SETTINGS, "group.min.session.timeout.ms": "3000"})
    topic, group = "mig-s", "g-mig-s"
    create_topics(b.bootstrap, {topic: 2})
    JG = JoinGroupRequest
    join = JG(group_id=group, session_timeout_ms=3000, rebalance_timeout_ms=10000, member_id="",
              protocol_type="consumer",
              protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=encode_subscription(Subscription([topic])))])
    with RawClient(b.port) as raw:
        join.member_id = raw.request(join, 7).member_id
        j = raw.request(join, 7)
        assert j.error_code == 0
        everything = encode_assignment(ClassicAssignment([(topic, 0), (topic, 1)]))
        assert raw.request(SyncGroupRequest(group_id=group, generation_id=j.generation_id, member_id=join.member_id,
                                            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                                member_id=join.member_id, assignment=everything)]), 3).error_code == 0
        c_id = uuid.uuid4().hex
        hb = raw.request(ConsumerGroupHeartbeatRequest(group_id=group, member_id=c_id, member_epoch=0,
                                                       rebalance_timeout_ms=10000, subscribed_topic_names=[topic],
                                                       topic_partitions=[]), 1)
        assert hb.error_code == 0 and not hb.assignment.topic_partitions  # the classic member holds both
        epoch, held = hb.member_epoch, set()
        deadline = time.monotonic() + 20  # the classic member's 3 s session, on a loaded machine
        while held != {0, 1} and time.monotonic() < deadline:
            time.sleep(0.5)
            hb = raw.request(ConsumerGroupHeartbeatRequest(group_id=group, member_id=c_id, member_epoch=epoch,
                                                           topic_partitions=[]), 1)
            assert hb.error_code == 0
            epoch = hb.member_epoch
            if hb.assignment is not None:
                held = {p for t in hb.assignment.topic_partitions for p in t.partitions}
        assert held == {0, 1}
        d = raw.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
        assert [(m.member_id, m.member_type) for m in d.members] == [(c_id, 1)]


def test_an_unknown_migration_policy_stops_the_broker_at_start(broker_factory):
    with pytest.raises(RuntimeError, match=r"cannot start: Invalid value sideways for configuration "
                                           r"group.consumer.migration.policy: String must be one of \(case "
                                           r"insensitive\): disabled, upgrade, downgrade, bidirectional"):
        broker_factory(settings={"group.consumer.migration.policy": "sideways"})


def test_kafka_python_classic_member_in_a_migrating_group(broker_factory):
    """kafka-python speaks only the classic protocol: it stays in the group through the upgrade
    and the downgrade, with the server's assignment meanwhile."""
    b = broker_factory(settings=SETTINGS)
    bs, topic, group = b.bootstrap, "mig-kp", "g-mig-kp"
    create_topics(bs, {topic: 4})
    # (once in CI, kafka-python 3.0's first assignment was made without metadata of the new
    # topic, "No partition metadata for topic", and it stayed empty for 30 s: group_consumer
    # says why and joins knowing the partitions; metadata_max_age_ms: a later change of them is
    # seen within a second)
    kp = group_consumer([topic], bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
                        metadata_max_age_ms=1000)

    def wait(members: list, want: list[int]) -> list[set]:
        deadline = time.monotonic() + 30
        while True:
            for m in members:
                m.poll(100 if m is kp else 0.05)  # kafka-python polls in ms, librdkafka in s
            parts = [{tp.partition for tp in m.assignment()} for m in members]
            if sorted(len(p) for p in parts) == want and len(set().union(*parts)) == sum(want):
                return parts
            assert time.monotonic() < deadline, f"assignments {parts}"

    wait([kp], [4])
    c = new_consumer(bs, group, [topic])
    parts = wait([kp, c], [2, 2])
    assert parts[0] | parts[1] == {0, 1, 2, 3}
    assert group_type(bs, group) == ConsumerGroupType.CONSUMER
    c.close()
    wait([kp], [4])
    assert group_type(bs, group) == ConsumerGroupType.CLASSIC
    kp.close()
