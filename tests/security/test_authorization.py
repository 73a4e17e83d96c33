"""The ACL authorizer end to end: every API answers Kafka's authorization error without
the ACL and succeeds with it; PREFIXED and LITERAL patterns, DENY over ALLOW, super users,
Metadata hiding what a principal may not describe, follower fetches refused to clients,
ACLs managed through CreateAcls/DescribeAcls/DeleteAcls by a real admin client, share groups'
APIs (on a single node and a 3-broker cluster, the `kafka` fixture), and changes seen by every
worker of a multi-process broker. That an ACL written through one broker is enforced by another,
in Kafka's ZooKeeper layout, is tests/cluster/test_security.py's."""
from __future__ import annotations

import time

import pytest

from kafkafast.protocol._generated.describe_acls import DescribeAclsRequest
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.sasl_authenticate import SaslAuthenticateRequest
from kafkafast.protocol._generated.sasl_handshake import SaslHandshakeRequest
from tests.security.conftest import PLAIN_JAAS
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(180)
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "eve": "eve-secret"}
JAAS = PLAIN_JAAS[:-1] + ' user_eve="eve-secret";'  # eve never gets an ACL


# with a SASL_PLAINTEXT listener besides PLAINTEXT
SETTINGS = {
    "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    # the PLAINTEXT listener is the operators' (and a cluster's brokers') back door here
    "super.users": "User:admin;User:ANONYMOUS",
    "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "true",
    "share.coordinator.state.topic.num.partitions": "3",
}


def start(base, workers=0, extra=None) -> tuple[BrokerProcess, int]:
    sasl = free_port()
    plain = free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}", **SETTINGS}
    settings.update(extra or {})
    return BrokerProcess(base, port=plain, workers=workers, settings=settings).start(), sasl


def conf(port: int, user: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


_ADMINS: dict = {}


def admin(port: int, user: str):
    """One admin client per user and broker, kept alive (a collected client cancels its futures)."""
    from confluent_kafka.admin import AdminClient

    key = (port, user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(conf(port, user))
    return _ADMINS[key]


def acl(rtype: str, name: str, principal: str, op: str, *, pattern: str = "LITERAL", perm: str = "ALLOW"):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, "*", AclOperation[op],
                      AclPermissionType[perm])


def grant(port: int, *bindings) -> None:
    for fut in admin(port, "admin").create_acls(list(bindings)).values():
        fut.result(30)
    settled(port)


def settled(port: int) -> None:
    """Until every broker (as Metadata through `port` lists them) describes the same ACLs: the
    broker that took a change has it at once, a cluster's others take it from ZooKeeper."""
    everything = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                     principal_filter=None, host_filter=None, operation=1, permission_type=1)
    with login(port, "admin") as c:
        ports = [b.port for b in c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers]

    def described(p: int) -> tuple:
        with login(p, "admin") as c:
            return tuple(sorted(repr(r) for r in c.request(everything, 1).resources))

    deadline = time.monotonic() + 20
    while len({described(p) for p in ports}) > 1:
        assert time.monotonic() < deadline, "the brokers describe different ACLs"
        time.sleep(0.1)


def produce_error(port: int, user: str, topic: str):
    import confluent_kafka as ck

    result = []
    p = ck.Producer({**conf(port, user), "message.timeout.ms": 10000, "enable.idempotence": False})
    p.produce(topic, b"v", on_delivery=lambda err, msg: result.append(err))
    p.flush(20)
    assert result, "no delivery report"
    return result[0]


def consume_error(port: int, user: str, topic: str, group: str | None = None):
    """(error code or None, values) of reading the topic with assign (group=None) or subscribe."""
    import confluent_kafka as ck

    c = ck.Consumer({**conf(port, user), "group.id": group or "unused", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    if group is None:
        c.assign([ck.TopicPartition(topic, 0, 0)])
    else:
        c.subscribe([topic])
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    continue
                return m.error().code(), None
            return None, m.value()
    finally:
        c.close()
    return "timeout", None


def login(port: int, user: str) -> RawClient:
    c = RawClient(port)
    assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    assert c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{PASSWORDS[user]}".encode()), 1).error_code == 0
    return c


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    return SETTINGS


@pytest.fixture(scope="module")
def kafka_listeners() -> tuple[str, ...]:
    return ("SASL_PLAINTEXT",)


@pytest.fixture(scope="module")
def env(kafka):
    """(the `kafka` target, a broker's SASL_PLAINTEXT port) with three seeded topics."""
    import confluent_kafka as ck

    port = kafka.listener_port("SASL_PLAINTEXT")
    for t in ("orders", "alice-private", "shared"):
        kafka.create_topic(t, 1)
    p = ck.Producer({"bootstrap.servers": kafka.bootstrap})
    for t in ("orders", "alice-private", "shared"):
        p.produce(t, b"seed-" + t.encode())
    assert p.flush(20) == 0
    grant(port, acl("GROUP", "unused", "User:*", "READ"))  # librdkafka looks up its group's coordinator
    yield kafka, port
    _ADMINS.clear()


def test_produce_needs_write(env):
    import confluent_kafka as ck

    _, port = env
    assert produce_error(port, "bob", "orders").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(port, acl("TOPIC", "orders", "User:bob", "WRITE"))
    assert produce_error(port, "bob", "orders") is None


def test_fetch_needs_read_and_group_consume_needs_group_read(env):
    import confluent_kafka as ck

    _, port = env
    grant(port, acl("TOPIC", "shared", "User:bob", "DESCRIBE"))  # metadata yes, Fetch no
    assert consume_error(port, "bob", "shared")[0] == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(port, acl("TOPIC", "shared", "User:bob", "READ"))
    assert consume_error(port, "bob", "shared") == (None, b"seed-shared")
    assert consume_error(port, "bob", "shared", group="bobs")[0] == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    grant(port, acl("GROUP", "bobs", "User:bob", "READ"))
    assert consume_error(port, "bob", "shared", group="bobs") == (None, b"seed-shared")


def test_prefixed_acl_and_deny_wins(env):
    import confluent_kafka as ck

    _, port = env
    grant(port, acl("TOPIC", "alice-", "User:alice", "ALL", pattern="PREFIXED"))
    assert produce_error(port, "alice", "alice-private") is None
    assert consume_error(port, "alice", "alice-private") == (None, b"seed-alice-private")
    grant(port, acl("TOPIC", "alice-private", "User:alice", "READ", perm="DENY"))
    assert consume_error(port, "alice", "alice-private")[0] == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(port, "alice", "alice-private") is None  # only READ is denied


def test_create_and_delete_topics(env):
    from confluent_kafka.admin import NewTopic

    _, port = env
    with pytest.raises(Exception) as info:
        admin(port, "bob").create_topics([NewTopic("bob-new", 1, 1)])["bob-new"].result(30)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)
    grant(port, acl("TOPIC", "bob-", "User:bob", "CREATE", pattern="PREFIXED"))
    admin(port, "bob").create_topics([NewTopic("bob-new", 1, 1)])["bob-new"].result(30)
    with pytest.raises(Exception) as info:
        admin(port, "bob").delete_topics(["bob-new"])["bob-new"].result(30)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)
    grant(port, acl("TOPIC", "bob-new", "User:bob", "DELETE"))
    admin(port, "bob").delete_topics(["bob-new"])["bob-new"].result(30)


def test_describe_and_alter_configs(env):
    from confluent_kafka.admin import ConfigResource, ResourceType

    _, port = env
    res = ConfigResource(ResourceType.TOPIC, "orders")
    with pytest.raises(Exception) as info:
        admin(port, "alice").describe_configs([res])[res].result(30)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)
    grant(port, acl("TOPIC", "orders", "User:alice", "ALTER_CONFIGS"))  # implies DESCRIBE_CONFIGS
    assert "retention.ms" in admin(port, "alice").describe_configs([res])[res].result(30)
    res2 = ConfigResource(ResourceType.TOPIC, "shared", set_config={"retention.ms": "12345"})
    with pytest.raises(Exception) as info:
        admin(port, "alice").alter_configs([res2])[res2].result(30)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)
    broker_id = min(admin(port, "admin").list_topics(timeout=20).brokers)  # (librdkafka sends it to that broker)
    broker_res = ConfigResource(ResourceType.BROKER, str(broker_id))
    with pytest.raises(Exception) as info:
        admin(port, "alice").describe_configs([broker_res])[broker_res].result(30)
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(info.value)


def test_list_offsets_needs_describe_and_delete_records_needs_delete(env):
    import confluent_kafka as ck
    from confluent_kafka.admin import OffsetSpec

    from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest

    kafka, port = env
    leader = kafka.leader_port("orders", 0, "SASL_PLAINTEXT")
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="orders", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                           timestamp=-1)])])
    with login(leader, "alice") as c:
        assert c.request(req, 5).topics[0].partitions[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    grant(port, acl("TOPIC", "orders", "User:alice", "DESCRIBE"))
    with login(leader, "alice") as c:
        assert c.request(req, 5).topics[0].partitions[0].error_code == 0
    tp = ck.TopicPartition("orders", 0, 1)
    latest = admin(port, "alice").list_offsets({ck.TopicPartition("orders", 0): OffsetSpec.latest()})[
        ck.TopicPartition("orders", 0)].result(30)
    assert latest.offset >= 1
    with pytest.raises(Exception) as info:
        admin(port, "alice").delete_records([tp])[tp].result(30)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)
    grant(port, acl("TOPIC", "orders", "User:alice", "DELETE"))
    assert admin(port, "alice").delete_records([tp])[tp].result(30).low_watermark == 1


def test_metadata_lists_only_describable_topics_and_does_not_auto_create(env):
    _, port = env
    with login(port, "bob") as c:  # bob got WRITE on orders and READ on shared in earlier tests or not at all
        names = {t.name for t in c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9).topics}
        assert "alice-private" not in names
        resp = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="alice-private")],
                                         allow_auto_topic_creation=True), 9)
        assert resp.topics[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    grant(port, acl("TOPIC", "ghost", "User:bob", "DESCRIBE"))
    with login(port, "bob") as c:
        resp = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="ghost")],
                                         allow_auto_topic_creation=True), 9)
        assert resp.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: no Create, so not created
    with login(port, "admin") as c:  # super user: sees everything
        names = {t.name for t in c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9).topics}
        assert {"orders", "alice-private", "shared"} <= names and "ghost" not in names


def test_fetch_with_a_replica_id_is_refused_to_clients(env):
    kafka, port = env
    grant(port, acl("TOPIC", "shared", "User:alice", "READ"))
    P = FetchRequest.FetchPartition
    for replica_id, expected in ((-1, 0), (0, 29)):
        with login(kafka.leader_port("shared", 0, "SASL_PLAINTEXT"), "alice") as c:
            req = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                               isolation_level=0, session_id=0, session_epoch=-1,
                               topics=[FetchRequest.FetchTopic(topic="shared", partitions=[
                                   P(partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                     partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
            resp = c.request(req, 11)
            assert resp.responses[0].partitions[0].error_code == expected


def test_acls_described_and_deleted_by_admin_client(env):
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType

    _, port = env
    grant(port, acl("GROUP", "temp-", "User:bob", "READ", pattern="PREFIXED"))
    flt = AclBindingFilter(ResourceType.GROUP, "temp-", ResourcePatternType.PREFIXED, "User:bob", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    found = admin(port, "admin").describe_acls(flt).result(30)
    assert [(b.name, b.operation, b.permission_type) for b in found] == \
        [("temp-", AclOperation.READ, AclPermissionType.ALLOW)]
    from kafkafast.protocol._generated.describe_acls import DescribeAclsRequest

    with login(port, "bob") as c:  # librdkafka drops DescribeAcls' top-level error; read it raw
        resp = c.request(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                             principal_filter=None, host_filter=None, operation=1,
                                             permission_type=1), 1)
        assert (resp.error_code, resp.resources) == (31, [])  # CLUSTER_AUTHORIZATION_FAILED
    deleted = admin(port, "admin").delete_acls([flt])[flt].result(30)
    assert [b.name for b in deleted] == ["temp-"]
    settled(port)
    assert admin(port, "admin").describe_acls(flt).result(30) == []


def test_acl_changes_reach_every_worker(tmp_path):
    import confluent_kafka as ck

    broker, port = start(tmp_path / "data", workers=2)
    try:
        from confluent_kafka.admin import NewTopic

        admin(port, "admin").create_topics([NewTopic("mw", 2, 1)])["mw"].result(30)
        assert produce_error(port, "bob", "mw").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant(port, acl("TOPIC", "mw", "User:bob", "WRITE"))
        deadline = time.monotonic() + 10
        ok = 0
        while ok < 8 and time.monotonic() < deadline:  # fresh connections land on both workers
            ok = ok + 1 if produce_error(port, "bob", "mw") is None else 0
        assert ok == 8
        # group requests are forwarded to the worker owning the group: the principal goes along
        grant(port, acl("TOPIC", "mw", "User:bob", "READ"))
        assert consume_error(port, "bob", "mw", group="mwg")[0] == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
        grant(port, acl("GROUP", "mwg", "User:bob", "READ"))
        # every worker applies it once CreateAcls is answered (were one still refusing, a consumer
        # refused there after the group's worker took its JoinGroup would leave a pending member)
        assert consume_error(port, "bob", "mw", group="mwg")[0] is None
        from kafkafast.protocol._generated.join_group import JoinGroupRequest

        with login(port, "bob") as c:  # groups owned by either worker: a forwarded JoinGroup is still bob's
            for g in ("g1", "g2", "g3", "g4", "g5", "g6"):
                resp = c.request(JoinGroupRequest(group_id=g, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                                  member_id="", group_instance_id=None, protocol_type="consumer",
                                                  protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                                      name="range", metadata=b"")]), 5)
                assert resp.error_code == 30, g  # GROUP_AUTHORIZATION_FAILED
            # requests split over the groups' owners (DescribeGroups, ListGroups) keep the principal too
            from kafkafast.protocol._generated.describe_groups import DescribeGroupsRequest
            from kafkafast.protocol._generated.list_groups import ListGroupsRequest

            groups = ["mwg", "g1", "g2", "g3", "g4", "g5", "g6"]
            described = c.request(DescribeGroupsRequest(groups=groups, include_authorized_operations=False), 5)
            assert [(g.group_id, g.error_code) for g in described.groups] == [("mwg", 0)] + [(g, 30) for g in groups[1:]]
            assert [g.group_id for g in c.request(ListGroupsRequest(states_filter=[]), 4).groups] == ["mwg"]
    finally:
        _ADMINS.clear()
        broker.kill()


def test_every_worker_applies_an_acl_change_once_it_is_answered(tmp_path):
    """CreateAcls and DeleteAcls through one worker: the next request on any connection, whichever
    worker serves it, is authorized with the change (as by Kafka's one authorizer per broker). A
    worker that had just decided with the old ACLs would otherwise keep them until its re-read of
    the ACL file, up to half a second later."""
    from kafkafast.protocol._generated.create_acls import CreateAclsRequest
    from kafkafast.protocol._generated.delete_acls import DeleteAclsRequest
    from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest

    broker, port = start(tmp_path / "data", workers=2)
    binding = dict(resource_type=3, resource_name="fresh", principal="User:bob", host="*", operation=3,
                   permission_type=3)  # GROUP fresh, READ, ALLOW
    conns = [login(port, "bob") for _ in range(8)]  # FindCoordinator is answered by the connection's worker
    try:
        with login(port, "admin") as admin_conn:
            def codes() -> list[int]:
                return [c.request(FindCoordinatorRequest(key="fresh", key_type=0), 3).error_code for c in conns]

            for _ in range(3):
                assert codes() == [30] * 8  # GROUP_AUTHORIZATION_FAILED: every worker has just decided
                created = admin_conn.request(CreateAclsRequest(creations=[
                    CreateAclsRequest.AclCreation(resource_pattern_type=3, **binding)]), 3)
                assert [r.error_code for r in created.results] == [0]
                assert codes() == [0] * 8
                deleted = admin_conn.request(DeleteAclsRequest(filters=[
                    DeleteAclsRequest.DeleteAclsFilter(pattern_type_filter=3, resource_name_filter="fresh",
                                                       principal_filter="User:bob", host_filter="*",
                                                       resource_type_filter=3, operation=3, permission_type=3)]), 3)
                assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
    finally:
        for c in conns:
            c.close()
        broker.kill()


def test_an_unauthenticated_clients_group_requests_are_authorized_on_every_worker(tmp_path):
    """A PLAINTEXT client is User:ANONYMOUS: its group requests, forwarded to the worker owning
    each group, are authorized there as ANONYMOUS too (a forwarded request without a principal
    would be trusted as internal)."""
    from kafkafast.protocol._generated.describe_groups import DescribeGroupsRequest
    from kafkafast.protocol._generated.join_group import JoinGroupRequest

    broker, _ = start(tmp_path / "data", workers=2, extra={"super.users": "User:admin"})
    groups = [f"anon-{i}" for i in range(8)]  # (owned by either worker)
    try:
        with RawClient(broker.port) as c:
            for g in groups:
                resp = c.request(JoinGroupRequest(group_id=g, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                                  member_id="", group_instance_id=None, protocol_type="consumer",
                                                  protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                                      name="range", metadata=b"")]), 5)
                assert resp.error_code == 30, g  # GROUP_AUTHORIZATION_FAILED
            described = c.request(DescribeGroupsRequest(groups=groups, include_authorized_operations=False), 5)
            assert [(g.group_id, g.error_code) for g in described.groups] == [(g, 30) for g in groups]
    finally:
        broker.kill()


def test_offset_fetch_needs_group_and_topic_describe(env):
    from kafkafast.protocol._generated.offset_fetch import OffsetFetchRequest

    kafka, port = env
    coordinator = kafka.coordinator_port("carols", 0, "SASL_PLAINTEXT")
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    req = OffsetFetchRequest(group_id="carols", topics=[T(name="orders", partition_indexes=[0])],
                             require_stable=False)
    with login(coordinator, "bob") as c:
        resp = c.request(req, 7)
        assert resp.error_code == 30 and resp.topics == []  # GROUP_AUTHORIZATION_FAILED
    grant(port, acl("GROUP", "carols", "User:bob", "DESCRIBE"), acl("TOPIC", "shared", "User:bob", "DESCRIBE"))
    req.topics = [T(name="alice-private", partition_indexes=[0]), T(name="shared", partition_indexes=[0])]
    with login(coordinator, "bob") as c:
        resp = c.request(req, 7)
        assert resp.error_code == 0
        assert [(t.name, t.partitions[0].error_code, t.partitions[0].committed_offset) for t in resp.topics] == [
            ("alice-private", 29, -1), ("shared", 0, -1)]


def test_consumer_group_regex_matches_only_describable_topics(env):
    """ConsumerGroupHeartbeat as Kafka 4.0 authorizes it: DESCRIBE on every subscribed topic
    name, and a regex resolved only to the topics the member may describe. Its topics, group
    and ACLs carry a prefix no other test of the module uses (the regex is matched against
    whole names), so what bob may describe among them is exactly what is granted here."""
    from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as HB
    from kafkafast.protocol._generated.metadata import MetadataRequest as MR

    kafka, port = env
    topics = {"rx848-open": 2, "rx848-pre-a": 1, "rx848-pre-b": 1, "rx848-hidden": 1}
    for t, n in topics.items():
        kafka.create_topic(t, n)
        kafka.wait_for_leaders(t, n)  # in every broker's metadata, the coordinator's too
    coordinator = kafka.coordinator_port("rx848-group", 0, "SASL_PLAINTEXT")
    grant(port, acl("GROUP", "rx848-group", "User:bob", "READ"),
          acl("TOPIC", "rx848-open", "User:bob", "DESCRIBE"),  # LITERAL
          acl("TOPIC", "rx848-pre-", "User:bob", "DESCRIBE", pattern="PREFIXED"),
          acl("TOPIC", "rx848-pre-b", "User:bob", "DESCRIBE", perm="DENY"))  # DENY over the prefix's ALLOW
    with login(port, "admin") as c:
        ids = {t.name: bytes(t.topic_id) for t in c.request(MR(topics=None), 12).topics}
    assert set(topics) <= set(ids)

    def heartbeat(c, member: str, names: list[str], regex: str | None = None):
        return c.request(HB(group_id="rx848-group", member_id=member, member_epoch=0, rebalance_timeout_ms=5000,
                            subscribed_topic_names=names, subscribed_topic_regex=regex, topic_partitions=[]), 1)

    with login(coordinator, "bob") as c:
        for names in (["rx848-open", "rx848-hidden"], ["rx848-pre-a", "rx848-pre-b"]):
            assert heartbeat(c, "b1", names).error_code == 29  # TOPIC_AUTHORIZATION_FAILED
        r = heartbeat(c, "b2", [], "rx848-.*")
        assert r.error_code == 0
        # all four match; bob may describe rx848-open and rx848-pre-a only
        assert {bytes(t.topic_id): sorted(t.partitions) for t in r.assignment.topic_partitions} == {
            ids["rx848-open"]: [0, 1], ids["rx848-pre-a"]: [0]}
    with login(coordinator, "admin") as c:  # the admin's own member of the group sees everything it matches
        r = heartbeat(c, "a1", [], "rx848-(hidden|pre-b)")
        assert r.error_code == 0
        assert {bytes(t.topic_id) for t in r.assignment.topic_partitions} == {ids["rx848-hidden"], ids["rx848-pre-b"]}


def test_every_other_checked_api_answers_its_authorization_error(env):
    """eve holds no ACL at all: each API answers Kafka's error for it (and the connection
    stays usable)."""
    from kafkafast.protocol._generated.consumer_group_describe import ConsumerGroupDescribeRequest
    from kafkafast.protocol._generated.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
    from kafkafast.protocol._generated.create_partitions import CreatePartitionsRequest as CP
    from kafkafast.protocol._generated.delete_groups import DeleteGroupsRequest
    from kafkafast.protocol._generated.heartbeat import HeartbeatRequest
    from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
    from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest
    from kafkafast.protocol._generated.leave_group import LeaveGroupRequest
    from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest as OC
    from kafkafast.protocol._generated.offset_delete import OffsetDeleteRequest as OD
    from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest as OE
    from kafkafast.protocol._generated.sync_group import SyncGroupRequest

    _, port = env
    cases = [
        (SyncGroupRequest(group_id="nope", generation_id=1, member_id="m", assignments=[]), 3,
         lambda r: r.error_code, 30),
        (HeartbeatRequest(group_id="nope", generation_id=1, member_id="m"), 4, lambda r: r.error_code, 30),
        (ConsumerGroupHeartbeatRequest(group_id="nope", member_id="m", member_epoch=0, rebalance_timeout_ms=1000,
                                       subscribed_topic_names=["orders"], topic_partitions=[]), 1,
         lambda r: r.error_code, 30),
        (ConsumerGroupDescribeRequest(group_ids=["nope"]), 1, lambda r: r.groups[0].error_code, 30),
        (LeaveGroupRequest(group_id="nope", members=[LeaveGroupRequest.MemberIdentity(member_id="m")]), 4,
         lambda r: r.error_code, 30),
        (LeaveGroupRequest(group_id="nope", member_id="m"), 1, lambda r: r.error_code, 30),
        (DeleteGroupsRequest(groups_names=["nope"]), 2, lambda r: r.results[0].error_code, 30),
        (OD(group_id="nope", topics=[OD.OffsetDeleteRequestTopic(
            name="orders", partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])]), 0,
         lambda r: r.error_code, 30),
        (OC(group_id="nope", generation_id_or_member_epoch=-1, member_id="", topics=[OC.OffsetCommitRequestTopic(
            name="orders", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 8,
         lambda r: r.topics[0].partitions[0].error_code, 30),
        (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4, lambda r: r.error_code, 31),
        (CP(topics=[CP.CreatePartitionsTopic(name="orders", count=3, assignments=None)], timeout_ms=1000), 3,
         lambda r: r.results[0].error_code, 29),
        (IAC(resources=[IAC.AlterConfigsResource(resource_type=2, resource_name="orders", configs=[
            IAC.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])]), 1,
         lambda r: r.responses[0].error_code, 29),
        (OE(replica_id=-1, topics=[OE.OffsetForLeaderTopic(topic="alice-private", partitions=[
            OE.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]), 4,
         lambda r: r.topics[0].partitions[0].error_code, 29),
    ]
    with login(port, "eve") as c:
        for req, version, code_of, expected in cases:
            assert code_of(c.request(req, version)) == expected, type(req).__name__


def test_share_group_apis_need_read_on_the_group_and_the_topic(env):
    """As Kafka checks them: ShareGroupHeartbeat needs READ on the group and DESCRIBE on the
    subscribed topics, ShareFetch / ShareAcknowledge READ on the group and READ on each topic,
    ShareGroupDescribe DESCRIBE on the group, and the group configs ALTER_CONFIGS on the group
    (DescribeConfigs DESCRIBE_CONFIGS, which ALTER_CONFIGS implies)."""
    import confluent_kafka as ck

    from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest
    from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
    from kafkafast.protocol._generated.share_fetch import ShareFetchRequest as F
    from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest
    from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest
    from kafkafast.protocol.errors import ErrorCode as EC

    kafka, port = env
    kafka.create_topic("jobs", 1)
    p = ck.Producer({"bootstrap.servers": kafka.bootstrap})
    p.produce("jobs", b"job-1")
    assert p.flush(20) == 0
    with login(kafka.coordinator_port("workers", 0, "SASL_PLAINTEXT"), "bob") as c:
        hb = ShareGroupHeartbeatRequest(group_id="workers", member_id="m1", member_epoch=0,
                                        subscribed_topic_names=["jobs"])
        assert c.request(hb, 1).error_code == EC.GROUP_AUTHORIZATION_FAILED
        alter = IAC(resources=[IAC.AlterConfigsResource(resource_type=32, resource_name="workers", configs=[
            IAC.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest")])])
        assert c.request(alter, 1).responses[0].error_code == EC.GROUP_AUTHORIZATION_FAILED
        describe = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=32, resource_name="workers", configuration_keys=["share.auto.offset.reset"])])
        assert c.request(describe, 4).results[0].error_code == EC.GROUP_AUTHORIZATION_FAILED
        assert c.request(ShareGroupDescribeRequest(group_ids=["workers"]), 1).groups[0].error_code == \
            EC.GROUP_AUTHORIZATION_FAILED
        grant(port, acl("GROUP", "workers", "User:bob", "READ"), acl("GROUP", "workers", "User:bob", "ALTER_CONFIGS"))
        assert c.request(alter, 1).responses[0].error_code == 0
        assert [(r.error_code, [(e.name, e.value) for e in r.configs]) for r in c.request(describe, 4).results] == [
            (0, [("share.auto.offset.reset", "earliest")])]
        assert c.request(hb, 1).error_code == EC.TOPIC_AUTHORIZATION_FAILED
        grant(port, acl("TOPIC", "jobs", "User:bob", "DESCRIBE"))
        assert c.request(hb, 1).error_code == 0
        assert c.request(ShareGroupDescribeRequest(group_ids=["workers"]), 1).groups[0].error_code == 0  # READ implies DESCRIBE
        tid = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="jobs")]), 12).topics[0].topic_id
    fetch = F(group_id="workers", member_id="m1", share_session_epoch=0, max_wait_ms=100, min_bytes=1,
              max_records=10, batch_size=10, topics=[F.FetchTopic(topic_id=tid, partitions=[
                  F.FetchPartition(partition_index=0)])])
    leader = kafka.leader_port("jobs", 0, "SASL_PLAINTEXT")
    with login(leader, "bob") as c:
        part = c.request(fetch, 1).responses[0].partitions[0]
        assert part.error_code == EC.TOPIC_AUTHORIZATION_FAILED and not part.acquired_records
        grant(port, acl("TOPIC", "jobs", "User:bob", "READ"))
        # NOT_LEADER_OR_FOLLOWER until the share-partition's state is readable (a cluster creates the
        # replicated share-state topic first): the client fetches again, as librdkafka does
        part = kafka.wait_for(lambda: (lambda p: p if p.error_code != EC.NOT_LEADER_OR_FOLLOWER else None)(
            c.request(fetch, 1).responses[0].partitions[0]), 30, "the share-partition's state loaded")
        assert (part.error_code, [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]) \
            == (0, [(0, 0, 1)])
    with login(leader, "eve") as c:
        fetch.member_id = "m2"
        assert c.request(fetch, 1).error_code == EC.GROUP_AUTHORIZATION_FAILED
