"""`kafkafast acls` (kafka-acls.sh's flags) against a broker with the ACL authorizer, over a
SASL_PLAINTEXT listener with the admin's --command-config: --add (explicit operations,
--producer/--consumer, prefixed patterns, deny entries), --list (all, per resource, per
principal, match), --remove; the ACLs take effect for real clients, and a principal that
is not a super user is refused. On a single node and a 3-broker cluster (the `kafka` fixture:
a cluster's brokers take the ACLs one of them wrote from ZooKeeper)."""
from __future__ import annotations

import json

import pytest

from kafkafast.protocol._generated.describe_acls import DescribeAclsRequest
from tests.security.test_authorization import SETTINGS, consume_error, produce_error
from tests.support.cli import kafkafast
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    return {**SETTINGS, "auto.create.topics.enable": "false"}


@pytest.fixture(scope="module")
def kafka_listeners() -> tuple[str, ...]:
    return ("SASL_PLAINTEXT",)


def command_config(tmp_path, user: str, password: str):
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{user}" password="{password}";\n')
    return str(path)


def settled(kafka) -> None:
    """Until every broker describes the same ACLs: the broker that took a change has it at once,
    a cluster's others a moment later (asked over PLAINTEXT, a super user's listener here)."""
    everything = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                     principal_filter=None, host_filter=None, operation=1, permission_type=1)

    def described(port: int) -> list:
        with RawClient(port) as rc:
            return sorted(repr(r) for r in rc.request(everything, 1).resources)

    kafka.wait_for(lambda: len({tuple(described(p)) for p in kafka.ports().values()}) == 1, 20,
                   "every broker describing the same ACLs")


def acls(kafka, *args: str, check: bool = True):
    """`kafkafast acls ...` (a change is awaited on every broker)."""
    done = kafkafast("acls", *args, check=check)
    if "--list" not in args:
        settled(kafka)
    return done


def acl_rows(out: str) -> set[tuple]:
    return {(a["resource_type"], a["name"], a["pattern_type"], a["principal"], a["host"], a["operation"],
             a["permission_type"]) for a in json.loads(out)["acls"]}


def test_acls_cli_adds_lists_and_removes_acls_that_clients_then_meet(kafka, tmp_path):
    import confluent_kafka as ck

    sasl = kafka.listener_port("SASL_PLAINTEXT")
    admin = ["--bootstrap-server", f"127.0.0.1:{sasl}", "--command-config", command_config(tmp_path, "admin",
                                                                                          "admin-secret")]
    # the other admin commands speak SASL with the same file
    kafkafast("topics", *admin, "--create", "--topic", "orders", "--partitions", "1")
    assert "orders" in kafkafast("topics", *admin, "--list").stdout.split()
    assert produce_error(sasl, "alice", "orders").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED

    out = acls(kafka, *admin, "--add", "--allow-principal", "User:alice", "--producer",
               "--topic", "orders").stdout
    resource = "`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`"
    assert f"Adding ACLs for resource {resource}: " in out and f"Current ACLs for resource {resource}: " in out
    for op in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" in out
    assert produce_error(sasl, "alice", "orders") is None

    acls(kafka, *admin, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "orders",
         "--group", "billing")
    acls(kafka, *admin, "--add", "--deny-principal", "User:bob", "--deny-host", "10.1.2.3",
         "--operation", "Read", "--topic", "ord", "--resource-pattern-type", "prefixed")
    assert consume_error(sasl, "bob", "orders", group="billing") == (None, b"v")  # alice's record (produce_error sends b"v")

    listed = acl_rows(acls(kafka, *admin, "--list", "--topic", "orders", "--output", "json").stdout)
    assert listed == {("TOPIC", "orders", "LITERAL", "User:alice", "*", op, "ALLOW")
                      for op in ("WRITE", "DESCRIBE", "CREATE")} | \
                     {("TOPIC", "orders", "LITERAL", "User:bob", "*", op, "ALLOW") for op in ("READ", "DESCRIBE")}
    everything = acl_rows(acls(kafka, *admin, "--list", "--output", "json").stdout)
    assert listed < everything
    assert ("GROUP", "billing", "LITERAL", "User:bob", "*", "READ", "ALLOW") in everything
    assert ("TOPIC", "ord", "PREFIXED", "User:bob", "10.1.2.3", "READ", "DENY") in everything
    # match: every ACL that applies to the topic orders, literal or prefixed; one principal's
    matched = acl_rows(acls(kafka, *admin, "--list", "--topic", "orders", "--resource-pattern-type",
                            "match", "--principal", "User:bob", "--output", "json").stdout)
    assert matched == {("TOPIC", "orders", "LITERAL", "User:bob", "*", "READ", "ALLOW"),
                       ("TOPIC", "orders", "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW"),
                       ("TOPIC", "ord", "PREFIXED", "User:bob", "10.1.2.3", "READ", "DENY")}
    text = acls(kafka, *admin, "--list", "--topic", "ord", "--resource-pattern-type", "prefixed").stdout
    assert "(principal=User:bob, host=10.1.2.3, operation=READ, permissionType=DENY)" in text
    ord_ = ("--list", "--topic", "ord", "--output", "json")
    assert acl_rows(acls(kafka, *admin, *ord_).stdout) == set()  # literal by default, as Kafka's tool
    assert acl_rows(acls(kafka, *admin, *ord_, "--resource-pattern-type", "any").stdout) == {
        ("TOPIC", "ord", "PREFIXED", "User:bob", "10.1.2.3", "READ", "DENY")}

    # a transactional, idempotent producer: prefixed topic and transactional-id, the cluster's IdempotentWrite
    acls(kafka, *admin, "--add", "--allow-principal", "User:carol", "--producer", "--idempotent",
         "--topic", "pay-", "--transactional-id", "pay-tx-", "--resource-pattern-type", "prefixed")
    carol = acl_rows(acls(kafka, *admin, "--list", "--principal", "User:carol", "--output", "json").stdout)
    assert carol == {("TOPIC", "pay-", "PREFIXED", "User:carol", "*", op, "ALLOW")
                     for op in ("WRITE", "DESCRIBE", "CREATE")} | \
                    {("TRANSACTIONAL_ID", "pay-tx-", "PREFIXED", "User:carol", "*", op, "ALLOW")
                     for op in ("WRITE", "DESCRIBE")} | \
                    {("CLUSTER", "kafka-cluster", "LITERAL", "User:carol", "*", "IDEMPOTENT_WRITE", "ALLOW")}
    acls(kafka, *admin, "--remove", "--force", "--cluster")
    assert acl_rows(acls(kafka, *admin, "--list", "--cluster", "--output", "json").stdout) == set()

    # remove one operation of one principal, then everything on the topic
    out = acls(kafka, *admin, "--remove", "--force", "--allow-principal", "User:alice", "--operation",
               "Write", "--topic", "orders").stdout
    assert "Removing ACLs for resource" in out and "operation=WRITE, permissionType=ALLOW" in out
    assert produce_error(sasl, "alice", "orders").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    left = acl_rows(acls(kafka, *admin, "--list", "--topic", "orders", "--output", "json").stdout)
    assert ("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW") not in left and len(left) == 4
    acls(kafka, *admin, "--remove", "--force", "--topic", "orders")
    assert acl_rows(acls(kafka, *admin, "--list", "--topic", "orders", "--output", "json").stdout) == set()
    assert consume_error(sasl, "bob", "orders", group="billing")[0] == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED

    # not a super user: refused; a wrong password: no connection at all
    bob = ["--bootstrap-server", f"127.0.0.1:{sasl}", "--command-config", command_config(tmp_path, "bob",
                                                                                        "bob-secret")]
    refused = acls(kafka, *bob, "--add", "--allow-principal", "User:bob", "--operation", "All",
                   "--topic", "orders", check=False)
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused
    wrong = ["--bootstrap-server", f"127.0.0.1:{sasl}", "--command-config", command_config(tmp_path, "eve", "x")]
    denied = acls(kafka, *wrong, "--list", check=False)
    assert denied.returncode == 1 and "Authentication failed" in denied.stderr, denied
    # flags kafka-acls.sh refuses
    bad = acls(kafka, *admin, "--add", "--allow-principal", "User:x", "--topic", "t",
               "--resource-pattern-type", "match", check=False)
    assert bad.returncode == 1 and "only for --list and --remove" in bad.stderr
    assert acls(kafka, *admin, "--add", "--allow-principal", "User:x", "--consumer", "--topic", "t",
                check=False).returncode == 1  # --consumer without --group
