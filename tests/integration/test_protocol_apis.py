"""The APIs and versions added for protocol coverage, called with what they are for: real
admin clients where they speak the API (confluent-kafka), raw requests for the rest. The client
quotas' store (a file, or ZooKeeper) is checked on a single node and a 3-broker cluster (the
`kafka` fixture)."""
from __future__ import annotations

import uuid

import pytest

from kafkafast.protocol.errors import ErrorCode
from kafkafast.protocol.primitives import ZERO_UUID
from kafkafast.protocol._generated.describe_log_dirs import DescribeLogDirsRequest
from kafkafast.protocol._generated.describe_producers import DescribeProducersRequest
from kafkafast.protocol._generated.describe_topic_partitions import DescribeTopicPartitionsRequest
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.push_telemetry import PushTelemetryRequest
from kafkafast.records import iter_record_batches
from tests.support.raw_client import RawClient

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic  # noqa: E402


def make_topics(bootstrap: str, **partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, n, 1) for name, n in partitions.items()]).values():
        fut.result(10)


def produce(bootstrap: str, topic: str, n: int, **conf) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, **conf})
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=i % 2 if topic != "one" else 0)
    assert p.flush(20) == 0


def topic_id(port: int, topic: str) -> bytes:
    with RawClient(port) as c:
        meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                         allow_auto_topic_creation=False), 12)
    return bytes(meta.topics[0].topic_id)


def test_authorized_operations_and_group_types_through_confluent_admin(broker):
    make_topics(broker.bootstrap, ops=2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert {AclOperation.DESCRIBE, AclOperation.ALTER, AclOperation.CLUSTER_ACTION,
            AclOperation.IDEMPOTENT_WRITE} <= set(cluster.authorized_operations)
    (desc,) = admin.describe_topics(ck.TopicCollection(["ops"]), include_authorized_operations=True).values()
    topic = desc.result(10)
    assert len(topic.partitions) == 2
    assert {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE_CONFIGS} <= set(topic.authorized_operations)

    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic-g",
                            "auto.offset.reset": "earliest"})
    consumer.subscribe(["ops"])
    for _ in range(40):
        consumer.poll(0.25)
        if consumer.assignment():
            break
    assert consumer.assignment()
    try:
        (fut,) = admin.describe_consumer_groups(["classic-g"], include_authorized_operations=True).values()
        group = fut.result(10)
        assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
        classic = admin.list_consumer_groups(types={ck.ConsumerGroupType.CLASSIC}).result(10)
        assert [g.group_id for g in classic.valid] == ["classic-g"]
        assert classic.valid[0].type == ck.ConsumerGroupType.CLASSIC
        new = admin.list_consumer_groups(types={ck.ConsumerGroupType.CONSUMER}).result(10)
        assert new.valid == []
    finally:
        consumer.close()


def test_describe_log_dirs_and_producers(broker):
    make_topics(broker.bootstrap, sized=2)
    produce(broker.bootstrap, "sized", 200, **{"enable.idempotence": True})
    with RawClient(broker.port) as c:
        dirs = c.request(DescribeLogDirsRequest(topics=None), 4)
        only = c.request(DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(
            topic="sized", partitions=[1])]), 0)
        producers = c.request(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
            name="sized", partition_indexes=[0, 1, 7])]), 0)
    (result,) = dirs.results
    assert result.error_code == 0 and result.log_dir == str(broker.data_dir.resolve())
    assert result.total_bytes > result.usable_bytes > 0
    sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
    on_disk = {p: sum(f.stat().st_size for f in (broker.data_dir / f"sized-{p}").glob("*.log")) for p in (0, 1)}
    assert sizes[("sized", 0)] == on_disk[0] > 0 and sizes[("sized", 1)] == on_disk[1] > 0
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.results[0].topics] == [("sized", [1])]

    parts = {p.partition_index: p for p in producers.topics[0].partitions}
    assert parts[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for i in (0, 1):
        assert parts[i].error_code == 0
        (state,) = parts[i].active_producers
        assert state.producer_id >= 0 and state.producer_epoch == 0 and state.last_sequence == 99
        assert state.current_txn_start_offset == -1
    assert parts[0].active_producers[0].producer_id == parts[1].active_producers[0].producer_id


def test_describe_topic_partitions_pages_with_a_cursor(broker):
    make_topics(broker.bootstrap, **{"dtp-a": 3, "dtp-b": 2})
    seen, cursor, pages = [], None, 0
    with RawClient(broker.port) as c:
        while True:
            resp = c.request(DescribeTopicPartitionsRequest(
                topics=[DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in ("dtp-b", "dtp-a", "nope")],
                response_partition_limit=2, cursor=cursor), 0)
            pages += 1
            for t in resp.topics:
                if t.name == "nope":
                    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                assert t.error_code == 0 and t.topic_id != ZERO_UUID and t.topic_authorized_operations > 0
                seen += [(t.name, p.partition_index, p.leader_id, p.eligible_leader_replicas) for p in t.partitions]
            if resp.next_cursor is None:
                break
            cursor = DescribeTopicPartitionsRequest.Cursor(topic_name=resp.next_cursor.topic_name,
                                                           partition_index=resp.next_cursor.partition_index)
    assert pages == 3
    assert [(n, i) for n, i, _, _ in seen] == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)]
    leaders = {leader for _, _, leader, _ in seen}
    assert len(leaders) == 1 and min(leaders) >= 0  # the one broker leads them all
    assert all(elr == [] for *_, elr in seen)


def test_fetch_v17_by_topic_id_and_list_offsets_v9(broker):
    make_topics(broker.bootstrap, one=1)
    produce(broker.bootstrap, "one", 5)
    tid = topic_id(broker.port, "one")
    unknown = uuid.uuid4().bytes

    def fetch_req(ids):
        return FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=-1), max_wait_ms=0, min_bytes=0,
                            max_bytes=1 << 20, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                                topic_id=i, partitions=[FetchRequest.FetchPartition(
                                    partition=0, fetch_offset=2, partition_max_bytes=1 << 20)]) for i in ids],
                            forgotten_topics_data=[], rack_id="")

    with RawClient(broker.port) as c:
        resp = c.request(fetch_req([tid, unknown]), 17)
        offsets = c.request(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name="one", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)
                                    for ts in (-4, -5, -1)])]), 9)
    by_id = {bytes(t.topic_id): t for t in resp.responses}
    assert by_id[unknown].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    part = by_id[tid].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 5
    records = [r for _, rs in iter_record_batches(part.records) for r in rs if r.offset >= 2]
    assert [r.value for r in records] == [b"v2", b"v3", b"v4"]
    assert [(p.offset, p.error_code) for p in offsets.topics[0].partitions] == [(0, 0), (-1, 0), (5, 0)]


def test_telemetry_as_a_broker_without_a_metrics_plugin(broker):
    with RawClient(broker.port) as c:
        sub = c.request(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO_UUID), 0)
        assert sub.error_code == 0 and sub.client_instance_id != ZERO_UUID and sub.requested_metrics == []
        again = c.request(GetTelemetrySubscriptionsRequest(client_instance_id=sub.client_instance_id), 0)
        assert again.client_instance_id == sub.client_instance_id
        ok = c.request(PushTelemetryRequest(client_instance_id=sub.client_instance_id,
                                            subscription_id=sub.subscription_id, metrics=b"x" * 100), 0)
        wrong = c.request(PushTelemetryRequest(client_instance_id=sub.client_instance_id,
                                               subscription_id=sub.subscription_id + 1, metrics=b""), 0)
    assert ok.error_code == 0 and wrong.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID


def test_client_quotas_are_stored_described_and_validated(kafka):
    from kafkafast.protocol._generated.alter_client_quotas import AlterClientQuotasRequest as AQ
    from kafkafast.protocol._generated.describe_client_quotas import DescribeClientQuotasRequest as DQ

    def entry(entity, **ops):
        return AQ.EntryData(entity=[AQ.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                            ops=[AQ.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])

    port = kafka.listener_port("PLAINTEXT")  # (a cluster's other brokers take it from ZooKeeper)
    with RawClient(port) as c:
        resp = c.request(AQ(entries=[
            entry([("user", "alice")], producer_byte_rate=1048576.0),
            entry([("user", "alice"), ("client-id", None)], consumer_byte_rate=2048.0),
            entry([("client-id", None)], request_percentage=50.0),
            entry([("user", "bob")], bogus_rate=1.0),
            entry([("ip", "10.0.0.1"), ("user", "x")], connection_creation_rate=1.0),
        ]), 1)
        assert [e.error_code for e in resp.entries] == [0, 0, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
        dry = c.request(AQ(entries=[entry([("user", "carol")], producer_byte_rate=1.0)], validate_only=True), 0)
        assert dry.entries[0].error_code == 0

        def describe(components, strict=False):
            r = c.request(DQ(components=[DQ.ComponentData(entity_type=t, match_type=m, match=n)
                                         for t, m, n in components], strict=strict), 1)
            assert r.error_code == 0
            return sorted((tuple((e.entity_type, e.entity_name) for e in x.entity),
                           tuple((v.key, v.value) for v in x.values)) for x in r.entries)

        assert describe([("user", 0, "alice")], strict=True) == [((("user", "alice"),), (("producer_byte_rate", 1048576.0),))]
        assert len(describe([("user", 0, "alice")])) == 2
        assert describe([("client-id", 1, None)], strict=True) == [((("client-id", None),), (("request_percentage", 50.0),))]
        assert describe([("user", 2, None)], strict=True) == [((("user", "alice"),), (("producer_byte_rate", 1048576.0),))]
        assert describe([("user", 0, "carol")]) == []
        c.request(AQ(entries=[entry([("user", "alice")], producer_byte_rate=None)]), 1)
        assert describe([("user", 0, "alice")], strict=True) == []
    kafka.restart()
    with RawClient(port) as c:
        r = c.request(DQ(components=[], strict=False), 0)
    assert len(r.entries) == 2  # persisted: alice + default client-id, and the default client-id alone


@pytest.mark.parametrize("commit_version,fetch_version", [(0, 0), (1, 0), (9, 9)])
def test_offset_commit_and_fetch_at_the_new_versions(broker, commit_version, fetch_version):
    from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest as OC
    from kafkafast.protocol._generated.offset_fetch import OffsetFetchRequest as OF

    make_topics(broker.bootstrap, **{f"oc{commit_version}": 2})
    topic, group = f"oc{commit_version}", f"g{commit_version}"
    with RawClient(broker.port) as c:
        committed = c.request(OC(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            OC.OffsetCommitRequestTopic(name=topic, partitions=[
                OC.OffsetCommitRequestPartition(partition_index=p, committed_offset=10 + p, committed_metadata="m")
                for p in (0, 1)])]), commit_version)
        assert [p.error_code for p in committed.topics[0].partitions] == [0, 0]
        if fetch_version >= 8:
            resp = c.request(OF(groups=[OF.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1,
                                                                   topics=[OF.OffsetFetchRequestTopics(
                                                                       name=topic, partition_indexes=[0, 1])])]),
                             fetch_version)
            parts = resp.groups[0].topics[0].partitions
        else:
            resp = c.request(OF(group_id=group, topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])]),
                             fetch_version)
            parts = resp.topics[0].partitions
    assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in parts] == \
        [(0, 10, "m", 0), (1, 11, "m", 0)]
