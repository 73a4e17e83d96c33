"""Cluster mode with security: three brokers replicating over a SASL_SSL inter-broker
listener (certificates made by the test), an ACL authorizer whose ACLs and a SCRAM store
whose credentials live in ZooKeeper in Kafka's layout, seen by every broker.

Everything here is what only a cluster has (inter-broker security, stores in ZooKeeper read
by every broker); the features on both modes are tests/security/test_authorization.py's (ACLs)
and tests/integration/test_kafka_compat_configs.py's (configs).

Each broker: PLAINTEXT (clients, the harness's probe) and INTERNAL (SASL_SSL, PLAIN and
SCRAM; `inter.broker.listener.name=INTERNAL`, the brokers log in as User:broker, the only
super user); `allow.everyone.if.no.acl.found=true`, so only resources with ACLs are guarded.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.security.pki import make_pki
from tests.support.broker_process import free_port
from tests.support.cluster import KafkaCluster
from tests.support.logins import login_refused
from tests.support.raw_client import RawClient

BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
               'password="broker-secret" user_broker="broker-secret";')
N = 200


class SecureCluster(KafkaCluster):
    def __init__(self, root, pki, size: int = 3, settings: dict | None = None) -> None:
        super().__init__(root, size=size, settings={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.internal.plain.sasl.jaas.config": BROKER_JAAS,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
            "ssl.key.password": pki.key_password, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:broker",
            "allow.everyone.if.no.acl.found": "true",
            "connection.failed.authentication.delay.ms": "50",
            **(settings or {}),
        })
        self.pki = pki
        self.ports = {i: (free_port(), free_port()) for i in range(1, self.size + 1)}

    def broker_port(self, broker_id: int) -> int:
        return self.ports[broker_id][0]

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        plain, internal = self.ports[broker_id]
        return {**super().broker_settings(broker_id),
                "listeners": f"PLAINTEXT://127.0.0.1:{plain},INTERNAL://127.0.0.1:{internal}"}

    def plaintext(self, broker_id: int) -> str:
        return f"127.0.0.1:{self.ports[broker_id][0]}"

    def sasl_ssl(self, broker_id: int, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.ports[broker_id][1]}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki.ca), "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": password}


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure-cluster")
    c = SecureCluster(root, make_pki(root / "pki"))
    try:
        yield c.start()
    finally:
        c.close()


def produce(bootstrap: str, topic: str, values: list[bytes], **extra) -> list:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **extra})
    errors: list = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(60)
    return errors


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{topic}-{time.monotonic()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


def test_registration_lists_every_listener_and_metadata_answers_the_clients_listener(secure):
    from confluent_kafka.admin import AdminClient

    zk = secure.zk()
    for i, (plain, internal) in secure.ports.items():
        doc = json.loads(zk.get(f"/brokers/ids/{i}")[0])
        assert doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{plain}", f"INTERNAL://127.0.0.1:{internal}"]
        assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SASL_SSL"}
        assert (doc["host"], doc["port"]) == ("127.0.0.1", plain)
    # Clients get every broker's endpoint on the listener they came in on.
    on_plaintext = AdminClient({"bootstrap.servers": secure.plaintext(1)}).list_topics(timeout=20).brokers
    assert {b.id: b.port for b in on_plaintext.values()} == {i: p[0] for i, p in secure.ports.items()}
    on_internal = AdminClient(secure.sasl_ssl(2, "broker", "broker-secret", "PLAIN")).list_topics(timeout=20).brokers
    assert {b.id: b.port for b in on_internal.values()} == {i: p[1] for i, p in secure.ports.items()}


def test_rf3_replicates_over_sasl_ssl_and_a_follower_turned_leader_serves_everything(secure):
    secure.create_topic("replicated", 1, 3, {"min.insync.replicas": "2"})
    sent = [b"r-%04d" % i for i in range(N)]
    assert produce(secure.bootstrap, "replicated", sent) == [None] * N
    leader = secure.leader("replicated", 0)
    secure.brokers[leader].kill()
    new_leader = secure.wait_for(lambda: (lambda l: l if l not in (-1, leader) else 0)(secure.leader("replicated", 0)),
                                 30, "a new leader")
    assert leader not in secure.partition_state("replicated", 0)["isr"]
    survivors = ",".join(secure.plaintext(i) for i in secure.ports if i != leader)
    # acks=all with min.insync.replicas=2: the remaining follower fetches from the new
    # leader over SASL_SSL, or these time out.
    more = [b"after-%02d" % i for i in range(20)]
    assert produce(survivors, "replicated", more, **{"message.timeout.ms": 30000}) == [None] * 20
    assert consume_all(survivors, "replicated", N + 20) == sent + more
    assert secure.leader("replicated", 0) == new_leader
    secure.brokers[leader].start(timeout=60)
    secure.wait_for(lambda: len(secure.registered()) == 3, 60, "the killed broker registered again")
    secure.wait_for(lambda: sorted(secure.partition_state("replicated", 0)["isr"]) == [1, 2, 3], 60,
                    "the restarted broker back in the ISR (caught up over SASL_SSL)")


def _acl(rtype: str, name: str, pattern: str, principal: str, op: str, perm: str):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, "*", AclOperation[op],
                      AclPermissionType[perm])


def _produce_error(bootstrap: str, topic: str) -> int | None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "retries": 0, "message.timeout.ms": 10000,
                  "enable.idempotence": False})
    errors: list = []
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    return errors[0].code() if errors and errors[0] is not None else None


def test_an_acl_created_through_one_broker_is_enforced_by_another(secure):
    """Cluster only (what each API needs is tests/security/test_authorization.py's, on both
    modes): ACLs kept in ZooKeeper in Kafka's layout (/kafka-acl, /kafka-acl-extended and their
    change notifications), written through one broker and enforced and described by another, and
    the inter-broker APIs refused to an anonymous client once the cluster resource has ACLs while
    the brokers, super users, keep replicating."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    secure.create_topic("guarded", 1, 3)
    leader = secure.leader("guarded", 0)
    via = next(i for i in secure.ports if i != leader)
    admin = AdminClient({"bootstrap.servers": secure.plaintext(via)})
    assert _produce_error(secure.plaintext(leader), "guarded") is None
    deny = _acl("TOPIC", "guarded", "LITERAL", "User:ANONYMOUS", "WRITE", "DENY")
    for fut in admin.create_acls([deny]).values():
        fut.result(30)
    zk = secure.zk()
    assert json.loads(zk.get("/kafka-acl/Topic/guarded")[0]) == {
        "version": 1, "acls": [{"principal": "User:ANONYMOUS", "permissionType": "Deny", "operation": "Write",
                                "host": "*"}]}
    notes = [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")]
    assert b"Topic:guarded" in notes
    # The leader, another broker, refuses the write within seconds.
    secure.wait_for(lambda: _produce_error(secure.plaintext(leader), "guarded") == KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    20, "the ACL enforced by the partition leader")

    prefixed = _acl("GROUP", "team-", "PREFIXED", "User:alice", "READ", "ALLOW")
    for fut in admin.create_acls([prefixed]).values():
        fut.result(30)
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Group/team-")[0])["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]
    extended = [json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0])
                for c in zk.get_children("/kafka-acl-extended-changes")]
    assert {"version": 1, "resourceType": "Group", "name": "team-", "patternType": "PREFIXED"} in extended
    other = AdminClient({"bootstrap.servers": secure.plaintext(leader)})
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    seen = secure.wait_for(lambda: (lambda acls: acls if len(acls) == 2 else None)(other.describe_acls(flt).result(30)),
                           20, "both ACLs described by another broker")
    assert {(b.name, b.principal) for b in seen} == {("guarded", "User:ANONYMOUS"), ("team-", "User:alice")}

    # Inter-broker APIs need ClusterAction once the cluster resource has ACLs: an anonymous
    # client is refused, while the brokers (User:broker, a super user) keep replicating.
    cluster_acl = _acl("BROKER", "kafka-cluster", "LITERAL", "User:alice", "DESCRIBE", "ALLOW")
    for fut in admin.create_acls([cluster_acl]).values():
        fut.result(30)
    from kafkafast.protocol._generated.update_metadata import UpdateMetadataRequest
    from kafkafast.protocol._generated.stop_replica import StopReplicaRequest

    def refused() -> bool:  # epoch 0: stale if it were authorized (11), so nothing changes either way
        with RawClient(secure.ports[leader][0]) as rc:
            um = rc.request(UpdateMetadataRequest(controller_id=via, controller_epoch=0, broker_epoch=-1,
                                                  topic_states=[], live_brokers=[]), 7)
            sr = rc.request(StopReplicaRequest(controller_id=via, controller_epoch=0, broker_epoch=-1,
                                               delete_partitions=False, topic_states=[]), 3)
        assert {um.error_code, sr.error_code} <= {11, 31}
        return um.error_code == 31 and sr.error_code == 31

    secure.wait_for(refused, 20, "CLUSTER_AUTHORIZATION_FAILED for an anonymous controller request")
    assert produce(secure.bootstrap, "replicated", [b"still-replicating"]) == [None]

    def matching(b):
        return AclBindingFilter(b.restype, b.name, b.resource_pattern_type, None, None, b.operation, b.permission_type)

    # The cluster now has ACLs and the anonymous client no Alter on it: a super user cleans up.
    admin = AdminClient(secure.sasl_ssl(via, "broker", "broker-secret", "PLAIN"))
    for fut in admin.delete_acls([matching(deny)]).values():
        fut.result(30)
    assert zk.exists("/kafka-acl/Topic/guarded") is None  # no ACL left on it: the znode goes
    secure.wait_for(lambda: _produce_error(secure.plaintext(leader), "guarded") is None, 20,
                    "the deletion seen by the leader")
    for fut in admin.delete_acls([matching(cluster_acl), matching(prefixed)]).values():
        fut.result(30)


def _logs_in(config: dict) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient(config).list_topics(timeout=8)
        return True
    except KafkaException:
        return False


def test_a_scram_user_created_on_one_broker_logs_in_on_another(secure):
    """Cluster only: SCRAM credentials in ZooKeeper in Kafka's layout (/config/users, written by
    kafkafast or by Kafka's tools), created through one broker and used to log in on another."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": secure.plaintext(1)})
    up = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                      b"carol-secret")
    admin.alter_user_scram_credentials([up])["carol"].result(30)
    zk = secure.zk()
    doc = json.loads(zk.get("/config/users/carol")[0])
    assert doc["version"] == 1 and list(doc["config"]) == ["SCRAM-SHA-256"]
    assert re.fullmatch(r"salt=[A-Za-z0-9+/=]+,stored_key=[A-Za-z0-9+/=]+,server_key=[A-Za-z0-9+/=]+,iterations=4096",
                        doc["config"]["SCRAM-SHA-256"])
    changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "users/carol"} in changes
    assert secure.wait_for(lambda: _logs_in(secure.sasl_ssl(3, "carol", "carol-secret")), 20,
                           "carol logging in on broker 3")
    assert login_refused(secure.sasl_ssl(3, "carol", "wrong"))
    assert login_refused(secure.sasl_ssl(2, "carol", "carol-secret", "SCRAM-SHA-512"))  # no 512 credential

    # A credential written as Kafka's tools write it (kafka-configs --zookeeper) is used too.
    from kafkafast.security.scram import ScramCredential
    from kafkafast.security.zk_stores import credential_text

    cred = ScramCredential.from_password("SCRAM-SHA-512", "dave-secret", 8192)
    zk.create("/config/users/dave", json.dumps({"version": 1, "config": {
        "SCRAM-SHA-512": credential_text(cred), "producer_byte_rate": "1048576"}}).encode())
    zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"users/dave"}', sequence=True)
    assert secure.wait_for(lambda: _logs_in(secure.sasl_ssl(2, "dave", "dave-secret", "SCRAM-SHA-512")), 20,
                           "dave logging in on broker 2")


class ScramInterBrokerCluster(SecureCluster):
    """Two brokers logging in to each other with SCRAM-SHA-512 as User:broker, whose
    credential is written to ZooKeeper before they start (as `kafka-configs --zookeeper`
    bootstraps it for Kafka)."""

    def __init__(self, root, pki) -> None:
        super().__init__(root, pki, size=2, settings={
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config":
                'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                'password="broker-scram-secret";'})

    def before_brokers(self) -> None:
        from kazoo.client import KazooClient

        from kafkafast.security.scram import ScramCredential
        from kafkafast.security.zk_stores import credential_text

        zk = KazooClient(hosts=self.zookeeper.connect, timeout=10)
        zk.start(timeout=20)
        try:
            cred = ScramCredential.from_password("SCRAM-SHA-512", "broker-scram-secret", 4096)
            zk.create("/kafka/config/users/broker", json.dumps(
                {"version": 1, "config": {"SCRAM-SHA-512": credential_text(cred)}}).encode(), makepath=True)
        finally:
            zk.stop()
            zk.close()


def test_brokers_replicate_with_a_scram_inter_broker_login_from_zookeeper(tmp_path):
    with ScramInterBrokerCluster(tmp_path, make_pki(tmp_path / "pki")) as c:
        c.create_topic("scram-replicated", 1, 2, {"min.insync.replicas": "2"})
        sent = [b"s-%03d" % i for i in range(50)]
        # acks=all with both replicas required: answered only once the follower fetched the
        # records over the SCRAM-authenticated SASL_SSL listener.
        assert produce(c.bootstrap, "scram-replicated", sent, **{"message.timeout.ms": 30000}) == [None] * 50
        assert c.partition_state("scram-replicated", 0)["isr"] != []
        leader = c.leader("scram-replicated", 0)
        c.brokers[leader].kill()
        c.wait_for(lambda: c.leader("scram-replicated", 0) == 3 - leader, 30, "the follower leading")
        assert consume_all(c.plaintext(3 - leader), "scram-replicated", 50) == sent


def test_a_brokers_inter_broker_certificate_rotates_at_run_time_and_only_through_that_broker(secure, tmp_path):
    """The key store of broker 2's SASL_SSL inter-broker listener is replaced at run time (kept in
    ZooKeeper at /config/brokers/2); replication goes on over it; broker 1 refuses to alter broker
    2's stores (only the broker whose listener serves them can check them, as in Kafka)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
    from tests.security.pki import server_keystore
    from tests.security.test_dynamic_tls_stores import certificate_der, served_certificate

    name = "listener.name.internal.ssl.keystore.location"
    rotated = server_keystore(secure.pki, tmp_path / "broker2.pem", password=secure.pki.key_password.encode())
    admin = AdminClient({"bootstrap.servers": secure.plaintext(2)})  # a broker's own configs go to that broker
    (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry(name, str(rotated), incremental_operation=AlterConfigOpType.SET)])]).values()
    fut.result(15)
    assert json.loads(secure.zk().get("/config/brokers/2")[0])["config"][name] == str(rotated)
    internal = secure.ports[2][1]
    secure.wait_for(lambda: served_certificate(internal, str(secure.pki.ca)) == certificate_der(rotated), 15,
                    "broker 2's new certificate on its inter-broker listener")
    assert served_certificate(secure.ports[1][1], str(secure.pki.ca)) == certificate_der(secure.pki.server_keystore)

    with RawClient(secure.broker_port(1)) as c:
        resp = c.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="2", configs=[
            IAC.AlterableConfig(name=name, config_operation=0, value=str(secure.pki.server_keystore))])]), 1)
    assert resp.responses[0].error_code == 42  # INVALID_REQUEST
    assert "altered on broker 2" in resp.responses[0].error_message

    secure.create_topic("rotated", 1, 3, {"min.insync.replicas": "3"})
    assert produce(secure.plaintext(1), "rotated", [b"%d" % i for i in range(N)]) == [None] * N
