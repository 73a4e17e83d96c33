"""The consumer group protocol (KIP-848) against a real broker: librdkafka consumers with
`group.protocol=consumer` (join, complete and disjoint assignments, rebalance on join and
leave, commit and resume) beside a classic group on the same broker; and raw
ConsumerGroupHeartbeat / ConsumerGroupDescribe requests at versions 0 and 1 for the
protocol's rules: revocation before reassignment, member and group epochs, fencing,
invalid requests, static members, member-epoch checks of OffsetCommit / OffsetFetch, the
coexistence with classic groups, and multi-worker routing. The librdkafka group, revocation
before reassignment, heartbeat errors, static members, the session timeout and the
rebalance-timeout fencing run on a single node and a 3-broker cluster (the `kafka` fixture;
raw requests go to the group's coordinator); a coordinator moving between brokers is
tests/cluster/test_consumer_group_protocol_cluster.py's."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic, \
    ResourceType

from kafkafast.broker.group_coordinator import java_string_hash
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.consumer_group_describe import ConsumerGroupDescribeRequest
from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kafkafast.protocol._generated.describe_groups import DescribeGroupsRequest
from kafkafast.protocol._generated.join_group import JoinGroupRequest
from kafkafast.protocol._generated.list_groups import ListGroupsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest
from kafkafast.protocol._generated.offset_fetch import OffsetFetchRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.support.raw_client import RawClient
from tests.support.targets import SETTINGS as TARGET_SETTINGS

# librdkafka gives each heartbeat the heartbeat interval as its request timeout: 1 s leaves
# room for a loaded machine.
SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000",
    "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0",
}
HB = ConsumerGroupHeartbeatRequest
TP = ConsumerGroupHeartbeatRequest.TopicPartitions


@pytest.fixture
def cbroker(broker_factory):
    return broker_factory(settings=SETTINGS)


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for f in futures.values():
        f.result(15)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "") -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{tag}{part}-{i}".encode(), partition=part)
    assert p.flush(20) == 0


# -- librdkafka with group.protocol=consumer ---------------------------------------------------

def new_consumer(bootstrap: str, group: str, topics: list[str], **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    c = Consumer(conf)
    c.subscribe(topics)
    return c


def settle(consumers: list[Consumer], total: int, records: dict | None = None, timeout: float = 40,
           sizes: list[int] | None = None) -> list[set]:
    """Polls until the members' assignments cover `total` partitions with no overlap (and,
    given `sizes`, are balanced so: a rebalance may pass through other complete states);
    every record polled meanwhile goes to `records` (value -> times seen)."""
    deadline = time.monotonic() + timeout
    parts: list[set] = []
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None and records is not None:
                records[msg.value()] = records.get(msg.value(), 0) + 1
        parts = [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]
        if sum(len(p) for p in parts) == total and len(set().union(*parts)) == total and all(parts) and \
                (sizes is None or sorted(len(p) for p in parts) == sizes):
            return parts
    raise AssertionError(f"no complete assignment: {[sorted(p) for p in parts]}")


def drain(consumers: list[Consumer], records: dict, want: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(records) < want and time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                records[msg.value()] = records.get(msg.value(), 0) + 1
    assert len(records) >= want, f"consumed {len(records)} of {want}: {sorted(records)}"


def test_librdkafka_consumer_protocol_rebalances_commits_and_resumes_beside_a_classic_group(kafka):
    """On a single node and a 3-broker cluster (the `kafka` fixture)."""
    bs = kafka.bootstrap
    kafka.create_topic("kip848", 6)
    kafka.create_topic("classic848", 3)
    produce(bs, "kip848", 6, 10)
    produce(bs, "classic848", 3, 5, tag="c")
    classic = Consumer({"bootstrap.servers": bs, "group.id": "classic-side", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    classic.subscribe(["classic848"])

    records: dict[bytes, int] = {}
    c1, c2 = new_consumer(bs, "g848", ["kip848"]), new_consumer(bs, "g848", ["kip848"])
    parts = settle([c1, c2, classic], 9, records, sizes=[3, 3, 3])  # both groups complete at the same time
    assert sorted(len(p) for p in parts[:2]) == [3, 3]
    assert parts[2] == {("classic848", i) for i in range(3)}

    c3 = new_consumer(bs, "g848", ["kip848"])
    parts = settle([c1, c2, c3], 6, records, sizes=[2, 2, 2])

    c2.close()  # leaves (epoch -1): its partitions move to the others
    parts = settle([c1, c3], 6, records, sizes=[3, 3])

    admin = AdminClient({"bootstrap.servers": bs})  # librdkafka's admin asks ConsumerGroupDescribe first
    desc = admin.describe_consumer_groups(["g848", "classic-side"])
    new, old = desc["g848"].result(10), desc["classic-side"].result(10)
    assert new.type == ConsumerGroupType.CONSUMER and old.type == ConsumerGroupType.CLASSIC
    assert {(tp.topic, tp.partition) for m in new.members for tp in m.assignment.topic_partitions} == \
        {("kip848", p) for p in range(6)}
    assert [m.assignment.topic_partitions for m in old.members][0]
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
    listed_types = {g.group_id: g.type for g in listed.valid}  # (other tests' groups share the target)
    assert listed_types["g848"] == ConsumerGroupType.CONSUMER and "classic-side" not in listed_types

    drain([c1, c3, classic], records, 60 + 15)
    assert {v for v in records if v.startswith(b"0-") or v.startswith(b"5-")}  # both ends of the topic
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a partition taken over from c2 restarts at the earliest offset
        positions = [tp.offset for c in (c1, c3) for tp in c.position(c.assignment())]
        if positions == [10] * 6:
            break
        for c in (c1, c3):
            c.poll(0.05)
    assert positions == [10] * 6
    for c in (c1, c3):
        c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for c in (c1, c3)
                 for tp in c.committed([TopicPartition("kip848", p) for p in range(6)], timeout=10) if tp.offset >= 0}
    assert committed == {p: 10 for p in range(6)}
    c1.close()
    c3.close()

    produce(bs, "kip848", 6, 2, tag="late")
    late: dict[bytes, int] = {}
    c4 = new_consumer(bs, "g848", ["kip848"])
    settle([c4], 6, late)
    drain([c4], late, 12)
    c4.close()
    assert set(late) == {f"late{p}-{i}".encode() for p in range(6) for i in range(2)}  # resumed at the commits
    assert set(late.values()) == {1}
    classic.close()


def test_librdkafka_consumer_protocol_on_a_multi_worker_broker(broker_factory):
    b = broker_factory("mw848", workers=2, settings=SETTINGS)
    create_topics(b.bootstrap, {"mw848": 8})
    members = [new_consumer(b.bootstrap, "mw848-group", ["mw848"]) for _ in range(3)]
    settle(members, 8, sizes=[2, 3, 3])
    for c in members:
        c.close()


# -- raw requests --------------------------------------------------------------------------

def topic_id(c: RawClient, name: str) -> bytes:
    resp = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]), 12)
    return bytes(resp.topics[0].topic_id)


def owned(resp_or_map) -> dict[bytes, set[int]]:
    if isinstance(resp_or_map, dict):
        return resp_or_map
    a = resp_or_map.assignment
    return {bytes(t.topic_id): set(t.partitions) for t in a.topic_partitions} if a is not None else None


def tps(m: dict[bytes, set[int]]) -> list:
    return [TP(topic_id=t, partitions=sorted(p)) for t, p in m.items() if p]


def join(c: RawClient, group: str, topics: list[str], version: int, **kw):
    member_id = kw.pop("member_id", uuid.uuid4().hex if version >= 1 else "")
    return c.request(HB(group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=10000,
                        subscribed_topic_names=topics, topic_partitions=[], **kw), version)


def beat(c: RawClient, group: str, member_id: str, epoch: int, held: dict | None, version: int = 1, **kw):
    return c.request(HB(group_id=group, member_id=member_id, member_epoch=epoch,
                        topic_partitions=None if held is None else tps(held), **kw), version)


def coordinator(kafka, group: str, topics: dict[str, int]) -> RawClient:
    """A connection to the group's coordinator once every broker's metadata has `topics`
    (created with the target's replication factor): the coordinator assigns what it knows."""
    for t, n in topics.items():
        kafka.create_topic(t, n)
        kafka.wait_for_leaders(t, n)
    return RawClient(kafka.coordinator_port(group))


def missing_group_beside(group: str) -> str:
    """A group id of no group, in the same __consumer_offsets partition as `group` (in a
    cluster, another partition's coordinator may be another broker: NOT_COORDINATOR there)."""
    n = int(TARGET_SETTINGS["offsets.topic.num.partitions"])
    home = (java_string_hash(group) & 0x7FFFFFFF) % n
    return next(g for g in (f"no-such-group-{i}" for i in range(1000)) if (java_string_hash(g) & 0x7FFFFFFF) % n == home)


def count(m: dict) -> int:
    return sum(len(p) for p in m.values())


def overlap(a: dict, b: dict) -> set:
    return {(t, p) for t, ps in a.items() for p in ps if p in b.get(t, set())}


@pytest.mark.parametrize("version", [0, 1])
def test_revocation_comes_before_reassignment(kafka, version):
    """On a single node and a 3-broker cluster (the `kafka` fixture): in the cluster every
    answer waits for the group's records to reach the ISR of its __consumer_offsets partition."""
    topic, gr = f"rev-v{version}", f"gr-v{version}"
    nobody = missing_group_beside(gr)
    with coordinator(kafka, gr, {topic: 4}) as c:
        tid = topic_id(c, topic)
        r1 = join(c, gr, [topic], version)
        assert r1.error_code == 0 and r1.member_epoch == 1 and r1.heartbeat_interval_ms == 1000
        assert r1.member_id  # made up by the broker (v0) or echoed (v1)
        m1, held1 = r1.member_id, owned(r1)
        assert held1 == {tid: {0, 1, 2, 3}}

        r2 = join(c, gr, [topic], version)
        m2 = r2.member_id
        assert r2.error_code == 0 and r2.member_epoch == 2
        held2 = owned(r2)
        assert count(held2) == 0  # its partitions are still m1's: not handed out yet

        # m1 learns what to revoke: it keeps its epoch until it has let them go.
        r = beat(c, gr, m1, 1, held1, version)
        assert r.error_code == 0 and r.member_epoch == 1
        keep = owned(r)
        assert count(keep) == 2 and keep[tid] < held1[tid]
        # m2 still gets nothing while m1 has not acknowledged the revocation.
        r = beat(c, gr, m2, 2, held2, version)
        assert r.error_code == 0 and count(owned(r) or {}) == 0

        # m1 acknowledges (its heartbeat lists only what it keeps): next epoch.
        r = beat(c, gr, m1, 1, keep, version)
        assert r.error_code == 0 and r.member_epoch == 2
        held1 = keep
        r = beat(c, gr, m2, 2, held2, version)
        held2 = owned(r)
        assert r.error_code == 0 and count(held2) == 2 and not overlap(held1, held2)
        assert held1[tid] | held2[tid] == {0, 1, 2, 3}

        d = c.request(ConsumerGroupDescribeRequest(group_ids=[gr, nobody]), version)
        g, missing = d.groups
        assert g.error_code == 0 and g.group_state == "Stable" and g.group_epoch == 2 and g.assignment_epoch == 2
        assert g.assignor_name == "uniform"
        assert {m.member_id: (m.member_epoch, {p for t in m.assignment.topic_partitions for p in t.partitions})
                for m in g.members} == {m1: (2, held1[tid]), m2: (2, held2[tid])}
        assert all(t.topic_name == topic for m in g.members for t in m.assignment.topic_partitions)
        assert all(m.subscribed_topic_names == [topic] for m in g.members)
        if version >= 1:
            assert {m.member_type for m in g.members} == {1}
        assert missing.error_code == EC.GROUP_ID_NOT_FOUND

        # m2 leaves (epoch -1): m1 gets everything, with a new epoch.
        r = beat(c, gr, m2, -1, None, version)
        assert r.error_code == 0 and r.member_epoch == -1
        r = beat(c, gr, m1, 2, held1, version)
        assert r.error_code == 0 and r.member_epoch == 3 and owned(r) == {tid: {0, 1, 2, 3}}


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_errors(kafka, version):
    """On a single node and a 3-broker cluster (the `kafka` fixture)."""
    topic, ge = f"errs-v{version}", f"ge-v{version}"
    nobody = missing_group_beside(ge)
    with coordinator(kafka, ge, {topic: 2}) as c:
        r = join(c, ge, [topic], version)
        m, epoch = r.member_id, r.member_epoch
        assert r.error_code == 0
        fenced = beat(c, ge, m, epoch + 5, None, version)
        assert fenced.error_code == EC.FENCED_MEMBER_EPOCH and fenced.error_message
        assert beat(c, ge, "nobody", 1, None, version).error_code == EC.UNKNOWN_MEMBER_ID
        assert beat(c, nobody, "nobody", 1, None, version).error_code == EC.GROUP_ID_NOT_FOUND
        invalid = [
            HB(group_id="", member_id="x", member_epoch=1),  # no group id
            HB(group_id=ge, member_id="x", member_epoch=-3),  # no such epoch
            HB(group_id=ge, member_id="x", member_epoch=0, rebalance_timeout_ms=1000, topic_partitions=[]),  # no topics
            HB(group_id=ge, member_id="x", member_epoch=0, subscribed_topic_names=[topic], topic_partitions=[]),  # no timeout
            HB(group_id=ge, member_id="x", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=[topic],
               topic_partitions=[TP(topic_id=b"\x01" * 16, partitions=[0])]),  # joining with partitions
            HB(group_id=ge, member_id="", member_epoch=1),  # no member id
            HB(group_id=ge, member_id=m, member_epoch=-2),  # static leave without an instance id
            HB(group_id=ge, member_id=m, member_epoch=epoch, instance_id=""),
        ]
        if version >= 1:
            invalid.append(HB(group_id=ge, member_id="", member_epoch=0, rebalance_timeout_ms=1000,
                              subscribed_topic_names=[topic], topic_partitions=[]))  # v1: the client makes the id
            invalid.append(HB(group_id=ge, member_id="r", member_epoch=0, rebalance_timeout_ms=1000,
                              subscribed_topic_names=[], subscribed_topic_regex="", topic_partitions=[]))  # neither
        for req in invalid:
            resp = c.request(req, version)
            assert resp.error_code == EC.INVALID_REQUEST and resp.error_message, req
        r = join(c, ge, [topic], version, server_assignor="sticky-nonexistent")
        assert r.error_code == EC.UNSUPPORTED_ASSIGNOR
        r = join(c, ge, [topic], version, server_assignor="range")
        assert r.error_code == 0
        # The member is still there and well after all that.
        assert beat(c, ge, m, epoch, None, version).error_code == 0


def test_static_member_leaves_for_now_and_rejoins_with_its_partitions(kafka):
    """On a single node and a 3-broker cluster (the `kafka` fixture)."""
    with coordinator(kafka, "gs", {"stat": 4}) as c:
        tid = topic_id(c, "stat")
        a = join(c, "gs", ["stat"], 1, instance_id="inst-a")
        b = join(c, "gs", ["stat"], 1, instance_id="inst-b")
        held_a = owned(a)
        r = beat(c, "gs", a.member_id, a.member_epoch, held_a)
        held_a = owned(r) or held_a
        r = beat(c, "gs", a.member_id, a.member_epoch, held_a)
        held_a, epoch_a = owned(r) or held_a, r.member_epoch
        held_b = owned(beat(c, "gs", b.member_id, b.member_epoch, {}))
        assert count(held_a) == 2 and count(held_b) == 2

        # Another process with the same instance id while inst-a is active: refused.
        dup = join(c, "gs", ["stat"], 1, instance_id="inst-a")
        assert dup.error_code == EC.UNRELEASED_INSTANCE_ID
        r = beat(c, "gs", a.member_id, -2, None, instance_id="inst-a")
        assert r.error_code == 0 and r.member_epoch == -2
        back = join(c, "gs", ["stat"], 1, instance_id="inst-a")
        assert back.error_code == 0 and back.member_id != a.member_id
        assert owned(back) == held_a and back.member_epoch == epoch_a  # no rebalance for the others
        d = c.request(ConsumerGroupDescribeRequest(group_ids=["gs"]), 1).groups[0]
        assert {m.instance_id for m in d.members} == {"inst-a", "inst-b"}
        assert a.member_id not in {m.member_id for m in d.members}
        assert tid in owned(back)


def test_session_timeout_removes_a_silent_member(kafka):
    """On a single node and a 3-broker cluster (the `kafka` fixture)."""
    with coordinator(kafka, "gt", {"sess": 2}) as c:
        a = join(c, "gt", ["sess"], 1)
        b = join(c, "gt", ["sess"], 1)
        held_a = owned(a)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # only a heartbeats; b goes silent
            r = beat(c, "gt", a.member_id, a.member_epoch, held_a)
            assert r.error_code == 0
            a.member_epoch, held_a = r.member_epoch, owned(r) if owned(r) is not None else held_a
            d = c.request(ConsumerGroupDescribeRequest(group_ids=["gt"]), 0).groups[0]
            if len(d.members) == 1 and count(held_a) == 2:
                break
            time.sleep(0.5)
        assert [m.member_id for m in d.members] == [a.member_id] and count(held_a) == 2
        assert beat(c, "gt", b.member_id, b.member_epoch, {}).error_code == EC.UNKNOWN_MEMBER_ID


def alter_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(15)


def test_group_configs_set_a_groups_heartbeat_interval_and_session_timeout(kafka):
    """consumer.heartbeat.interval.ms and consumer.session.timeout.ms on the group
    (IncrementalAlterConfigs, resource GROUP; Kafka 4's GroupConfig) override the broker's
    group.consumer.* for that group: the interval a heartbeat answers, and the session a silent
    member is removed after. Out of the broker's bounds, or an interval not below the session
    timeout, is INVALID_CONFIG. On a single node and a 3-broker cluster."""
    with pytest.raises(KafkaException, match="must be less than consumer.session.timeout.ms"):
        alter_group_configs(kafka.bootstrap, "gcfg", consumer_heartbeat_interval_ms="6000")  # the session: 6000
    with pytest.raises(KafkaException, match=r"Value must be in the range \[1000, 15000\]"):
        alter_group_configs(kafka.bootstrap, "gcfg", consumer_heartbeat_interval_ms="500")
    alter_group_configs(kafka.bootstrap, "gcfg", consumer_heartbeat_interval_ms="2000",
                        consumer_session_timeout_ms="9000")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    res = ConfigResource(ResourceType.GROUP, "gcfg")
    described = admin.describe_configs([res])[res].result(15)
    assert [(described[n].value, ConfigSource(described[n].source)) for n in (
        "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms")] == [
        ("2000", ConfigSource.GROUP_CONFIG), ("9000", ConfigSource.GROUP_CONFIG)]
    with coordinator(kafka, "gcfg", {"gcfg-t": 2}) as c:
        deadline = time.monotonic() + 15  # a cluster's brokers learn the change from ZooKeeper
        while True:
            a = join(c, "gcfg", ["gcfg-t"], 1)
            if a.heartbeat_interval_ms == 2000 or time.monotonic() > deadline:
                break
            beat(c, "gcfg", a.member_id, -1, None)  # leaves
            time.sleep(0.2)
        assert (a.error_code, a.heartbeat_interval_ms) == (0, 2000)
        b = join(c, "gcfg", ["gcfg-t"], 1)
        silent_since = time.monotonic()
        held_a, gone_after = owned(a), None
        while time.monotonic() < silent_since + 25:  # only a heartbeats; b goes silent
            r = beat(c, "gcfg", a.member_id, a.member_epoch, held_a)
            assert r.error_code == 0 and r.heartbeat_interval_ms == 2000
            a.member_epoch, held_a = r.member_epoch, owned(r) if owned(r) is not None else held_a
            if len(c.request(ConsumerGroupDescribeRequest(group_ids=["gcfg"]), 0).groups[0].members) == 1:
                gone_after = time.monotonic() - silent_since
                break
            time.sleep(0.25)
        assert gone_after is not None and 8.5 <= gone_after <= 15, gone_after  # 9 s, not the broker's 6 s
        assert beat(c, "gcfg", b.member_id, b.member_epoch, {}).error_code == EC.UNKNOWN_MEMBER_ID


def test_offsets_with_member_epochs_and_classic_coexistence(broker_factory):
    # Without online migration a classic group with members never becomes a consumer group
    # (group_migration.py and test_consumer_group_migration.py cover the conversions).
    cbroker = broker_factory(settings={**SETTINGS, "group.consumer.migration.policy": "disabled"})
    create_topics(cbroker.bootstrap, {"offs": 2})
    OC, OF = OffsetCommitRequest, OffsetFetchRequest

    def commit(c, member, epoch, offset, version=9):
        req = OC(group_id="go", generation_id_or_member_epoch=epoch, member_id=member, topics=[
            OC.OffsetCommitRequestTopic(name="offs", partitions=[
                OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])])
        return c.request(req, version).topics[0].partitions[0].error_code

    def fetch(c, member, epoch):
        req = OF(groups=[OF.OffsetFetchRequestGroup(group_id="go", member_id=member, member_epoch=epoch, topics=[
            OF.OffsetFetchRequestTopics(name="offs", partition_indexes=[0])])])
        g = c.request(req, 9).groups[0]
        return g.error_code, [p.committed_offset for t in g.topics for p in t.partitions]

    with RawClient(cbroker.port) as c:
        r = join(c, "go", ["offs"], 1)
        m, epoch = r.member_id, r.member_epoch
        assert commit(c, m, epoch, 42) == 0
        assert commit(c, m, epoch + 1, 43) == EC.STALE_MEMBER_EPOCH
        assert commit(c, "stranger", epoch, 44) == EC.UNKNOWN_MEMBER_ID
        assert commit(c, "", -1, 45) == EC.UNKNOWN_MEMBER_ID  # a simple commit needs an empty group
        assert commit(c, m, epoch, 46, version=8) == EC.UNSUPPORTED_VERSION  # members commit with v9+
        assert fetch(c, m, epoch) == (0, [42])
        assert fetch(c, m, epoch + 3)[0] == EC.STALE_MEMBER_EPOCH
        assert fetch(c, "stranger", epoch)[0] == EC.UNKNOWN_MEMBER_ID
        assert fetch(c, None, -1) == (0, [42])  # the admin's view

        # A classic member may join a consumer group whatever the policy (Kafka 4.0): it gets its
        # member id first; with malformed subscription metadata it is refused as Kafka refuses it.
        classic_join = JoinGroupRequest(group_id="go", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                        member_id="", protocol_type="consumer", protocols=[
                                            JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
        jg = c.request(classic_join, 7)
        assert jg.error_code == EC.MEMBER_ID_REQUIRED and jg.member_id
        classic_join.member_id = jg.member_id
        assert c.request(classic_join, 7).error_code == EC.UNKNOWN_SERVER_ERROR
        classic_join.protocol_type = "connect"
        assert c.request(classic_join, 7).error_code == EC.INCONSISTENT_GROUP_PROTOCOL
        # The consumer group is described in classic terms, and listed by type.
        dg = c.request(DescribeGroupsRequest(groups=["go"]), 5).groups[0]
        assert (dg.error_code, dg.protocol_type, dg.group_state, dg.protocol_data) == (0, "consumer", "Stable", "uniform")
        assert [m_.member_id for m_ in dg.members] == [m] and dg.members[0].member_assignment

        classic = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": "classic-go",
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        classic.subscribe(["offs"])
        deadline = time.monotonic() + 30
        while not classic.assignment() and time.monotonic() < deadline:
            classic.poll(0.1)
        assert classic.assignment()
        hb = join(c, "classic-go", ["offs"], 1)
        assert hb.error_code == EC.GROUP_ID_NOT_FOUND
        assert c.request(ConsumerGroupDescribeRequest(group_ids=["classic-go"]), 1).groups[0].error_code == \
            EC.GROUP_ID_NOT_FOUND

        def listed(types):
            return {(g.group_id, g.group_type, g.protocol_type)
                    for g in c.request(ListGroupsRequest(types_filter=types), 5).groups}
        assert ("go", "consumer", "consumer") in listed(["consumer"])
        assert "classic-go" not in {g for g, _, _ in listed(["consumer"])}
        assert {g for g, _, _ in listed(["classic"])} >= {"classic-go"} and "go" not in {g for g, _, _ in listed(["Classic"])}
        assert {g for g, _, _ in listed([])} >= {"go", "classic-go"}
        classic.close()

        # Once the consumer group is empty, a simple commit works and a classic member may take the id.
        assert beat(c, "go", m, -1, None).error_code == 0
        assert commit(c, "", -1, 47) == 0
        jg = c.request(JoinGroupRequest(group_id="go", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                        member_id="", protocol_type="consumer", protocols=[
                                            JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]), 7)
        assert jg.error_code == EC.MEMBER_ID_REQUIRED
        assert fetch(c, None, -1) == (0, [47])


def test_group_state_survives_a_restart(cbroker):
    create_topics(cbroker.bootstrap, {"rst": 2})
    with RawClient(cbroker.port) as c:
        tid = topic_id(c, "rst")
        a = join(c, "grs", ["rst"], 1)
        b = join(c, "grs", ["rst"], 1, instance_id="static-b")
        r = beat(c, "grs", a.member_id, a.member_epoch, owned(a))  # a gives up one partition ...
        held_a = owned(r)
        r = beat(c, "grs", a.member_id, r.member_epoch, held_a)  # ... and moves to epoch 2
        assert r.error_code == 0 and r.member_epoch == 2
        req = OffsetCommitRequest(group_id="grs", generation_id_or_member_epoch=2, member_id=a.member_id,
                                  topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="rst", partitions=[
                                      OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=1,
                                                                                       committed_offset=7)])])
        assert c.request(req, 9).topics[0].partitions[0].error_code == 0
        assert beat(c, "grs", b.member_id, b.member_epoch, {}, instance_id="static-b").error_code == 0
        assert beat(c, "grs", b.member_id, -2, None, instance_id="static-b").error_code == 0  # away for now
        before = c.request(ConsumerGroupDescribeRequest(group_ids=["grs"]), 1).groups[0]
    cbroker.restart()
    with RawClient(cbroker.port) as c:
        deadline = time.monotonic() + 20
        while True:  # the coordinator may still be loading its partitions
            d = c.request(ConsumerGroupDescribeRequest(group_ids=["grs"]), 1).groups[0]
            if d.error_code != EC.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert d.error_code == 0 and d.group_epoch == before.group_epoch
        assert d.assignment_epoch == before.assignment_epoch
        assert sorted((m.member_id, m.member_epoch, m.instance_id) for m in d.members) == \
            sorted((m.member_id, m.member_epoch, m.instance_id) for m in before.members)
        # The member goes on with its epoch and partitions; its commits are there.
        again = beat(c, "grs", a.member_id, 2, held_a)
        assert again.error_code == 0 and owned(again) in (None, held_a)
        assert again.member_epoch == 2  # the stored topic metadata: loading did not bump the epoch
        f = c.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id="grs", member_id=a.member_id, member_epoch=again.member_epoch, topics=None)]), 9)
        assert [(p.partition_index, p.committed_offset) for t in f.groups[0].topics for p in t.partitions] == [(1, 7)]
        # The static member comes back to the partition it held.
        back = join(c, "grs", ["rst"], 1, instance_id="static-b")
        assert back.error_code == 0 and owned(back) == {tid: {0, 1} - held_a[tid]}


def test_consumer_group_describe_spans_workers(broker_factory):
    b = broker_factory("cgd", workers=2, settings=SETTINGS)
    create_topics(b.bootstrap, {"cgd": 2})
    groups = [f"cgd-{i}" for i in range(6)]  # spread over the 4 __consumer_offsets partitions, 2 workers
    for _ in range(3):  # new connections land on either worker
        with RawClient(b.port) as c:
            for g in groups:
                r = join(c, g, ["cgd"], 1, member_id=f"{g}-m")  # joins, then rejoins as the same member
                assert r.error_code == 0 and r.member_id == f"{g}-m"
    with RawClient(b.port) as c:
        d = c.request(ConsumerGroupDescribeRequest(group_ids=groups + ["none"]), 1)
    assert [g.group_id for g in d.groups] == groups + ["none"]
    assert all(g.error_code == 0 and [m.member_id for m in g.members] == [f"{g.group_id}-m"] for g in d.groups[:-1])
    assert d.groups[-1].error_code == EC.GROUP_ID_NOT_FOUND


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced(kafka):
    """On a single node and a 3-broker cluster (the `kafka` fixture)."""
    with coordinator(kafka, "gf", {"slow": 2}) as c:
        a = c.request(HB(group_id="gf", member_id="slow-a", member_epoch=0, rebalance_timeout_ms=1000,
                         subscribed_topic_names=["slow"], topic_partitions=[]), 1)
        held_a = owned(a)
        b = join(c, "gf", ["slow"], 1)
        r = beat(c, "gf", "slow-a", a.member_epoch, held_a)  # learns it must give one partition up ...
        assert r.error_code == 0 and count(owned(r)) == 1
        time.sleep(2.5)  # ... and keeps it past its 1 s rebalance timeout
        assert beat(c, "gf", "slow-a", a.member_epoch, held_a).error_code == EC.UNKNOWN_MEMBER_ID
        r = beat(c, "gf", b.member_id, b.member_epoch, {})
        assert r.error_code == 0 and count(owned(r)) == 2


def test_consumer_protocol_can_be_switched_off(broker_factory):
    b = broker_factory("classic-only", settings={"group.coordinator.rebalance.protocols": "classic"})
    with RawClient(b.port) as c:
        keys = {k.api_key for k in c.request(ApiVersionsRequest(), 3).api_keys}
    assert {11, 12, 14} <= keys and not keys & {68, 69}


def test_librdkafka_members_go_on_after_a_broker_restart(cbroker):
    bs = cbroker.bootstrap
    create_topics(bs, {"again": 2})
    produce(bs, "again", 2, 5)
    seen: dict[bytes, int] = {}
    c = new_consumer(bs, "g-again", ["again"])
    settle([c], 2, seen)
    drain([c], seen, 10)
    c.commit(asynchronous=False)
    cbroker.restart()
    produce(bs, "again", 2, 3, tag="after")
    drain([c], seen, 16, timeout=40)  # the group is loaded back: its heartbeats go on
    assert {v for v in seen if v.startswith(b"after")} == {f"after{p}-{i}".encode() for p in range(2) for i in range(3)}
    assert {(tp.topic, tp.partition) for tp in c.assignment()} == {("again", 0), ("again", 1)}
    c.close()


def test_group_size_is_bounded_by_group_consumer_max_size(broker_factory):
    b = broker_factory("small", settings={**SETTINGS, "group.consumer.max.size": "2"})
    create_topics(b.bootstrap, {"small": 2})
    with RawClient(b.port) as c:
        assert [join(c, "gm", ["small"], 1).error_code for _ in range(3)] == [0, 0, EC.GROUP_MAX_SIZE_REACHED]
