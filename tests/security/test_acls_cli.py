"""`kafkafast acls` (kafka-acls.sh's flags) against a broker with the ACL authorizer, over a
SASL_PLAINTEXT listener with the admin's --command-config: --add (explicit operations,
--producer/--consumer, prefixed patterns, deny entries), --list (all, per resource, per
principal, match), --remove; the ACLs take effect for real clients, and a principal that
is not a super user is refused."""
from __future__ import annotations

import json

import pytest

from tests.security.test_authorization import JAAS, consume_error, produce_error, start
from tests.support.cli import kafkafast

pytestmark = pytest.mark.timeout(180)


def command_config(tmp_path, user: str, password: str):
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{user}" password="{password}";\n')
    return str(path)


def acl_rows(out: str) -> set[tuple]:
    return {(a["resource_type"], a["name"], a["pattern_type"], a["principal"], a["host"], a["operation"],
             a["permission_type"]) for a in json.loads(out)["acls"]}


def test_acls_cli_adds_lists_and_removes_acls_that_clients_then_meet(tmp_path):
    import confluent_kafka as ck

    broker, sasl = start(tmp_path / "data", extra={"auto.create.topics.enable": "false"})
    try:
        admin = ["--bootstrap-server", f"127.0.0.1:{sasl}", "--command-config", command_config(tmp_path, "admin",
                                                                                              "admin-secret")]
        # the other admin commands speak SASL with the same file
        kafkafast("topics", *admin, "--create", "--topic", "orders", "--partitions", "1")
        assert "orders" in kafkafast("topics", *admin, "--list").stdout.split()
        assert produce_error(sasl, "alice", "orders").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED

        out = kafkafast("acls", *admin, "--add", "--allow-principal", "User:alice", "--producer",
                        "--topic", "orders").stdout
        resource = "`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`"
        assert f"Adding ACLs for resource {resource}: " in out and f"Current ACLs for resource {resource}: " in out
        for op in ("WRITE", "DESCRIBE", "CREATE"):
            assert f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" in out
        assert produce_error(sasl, "alice", "orders") is None

        kafkafast("acls", *admin, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "orders",
                  "--group", "billing")
        kafkafast("acls", *admin, "--add", "--deny-principal", "User:bob", "--deny-host", "10.1.2.3",
                  "--operation", "Read", "--topic", "ord", "--resource-pattern-type", "prefixed")
        assert consume_error(sasl, "bob", "orders", group="billing") == (None, b"v")  # alice's record (produce_error sends b"v")

        listed = acl_rows(kafkafast("acls", *admin, "--list", "--topic", "orders", "--output", "json").stdout)
        assert listed == {("TOPIC", "orders", "LITERAL", "User:alice", "*", op, "ALLOW")
                          for op in ("WRITE", "DESCRIBE", "CREATE")} | \
                         {("TOPIC", "orders", "LITERAL", "User:bob", "*", op, "ALLOW") for op in ("READ", "DESCRIBE")}
        everything = acl_rows(kafkafast("acls", *admin, "--list", "--output", "json").stdout)
        assert listed < everything
        assert ("GROUP", "billing", "LITERAL", "User:bob", "*", "READ", "ALLOW") in everything
        assert ("TOPIC", "ord", "PREFIXED", "User:bob", "10.1.2.3", "READ", "DENY") in everything
        # match: every ACL that applies to the topic orders, literal or prefixed; one principal's
        matched = acl_rows(kafkafast("acls", *admin, "--list", "--topic", "orders", "--resource-pattern-type",
                                     "match", "--principal", "User:bob", "--output", "json").stdout)
        assert matched == {("TOPIC", "orders", "LITERAL", "User:bob", "*", "READ", "ALLOW"),
                           ("TOPIC", "orders", "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW"),
                           ("TOPIC", "ord", "PREFIXED", "User:bob", "10.1.2.3", "READ", "DENY")}
        text = kafkafast("acls", *admin, "--list", "--topic", "ord", "--resource-pattern-type", "prefixed").stdout
        assert "(principal=User:bob, host=10.1.2.3, operation=READ, permissionType=DENY)" in text
        ord_ = ("--list", "--topic", "ord", "--output", "json")
        assert acl_rows(kafkafast("acls", *admin, *ord_).stdout) == set()  # literal by default, as Kafka's tool
        assert acl_rows(kafkafast("acls", *admin, *ord_, "--resource-pattern-type", "any").stdout) == {
            ("TOPIC", "ord", "PREFIXED", "User:bob", "10.1.2.3", "READ", "DENY")}

        # a transactional, idempotent producer: prefixed topic and transactional-id, the cluster's IdempotentWrite
        kafkafast("acls", *admin, "--add", "--allow-principal", "User:carol", "--producer", "--idempotent",
                  "--topic", "pay-", "--transactional-id", "pay-tx-", "--resource-pattern-type", "prefixed")
        carol = acl_rows(kafkafast("acls", *admin, "--list", "--principal", "User:carol", "--output", "json").stdout)
        assert carol == {("TOPIC", "pay-", "PREFIXED", "User:carol", "*", op, "ALLOW")
                         for op in ("WRITE", "DESCRIBE", "CREATE")} | \
                        {("TRANSACTIONAL_ID", "pay-tx-", "PREFIXED", "User:carol", "*", op, "ALLOW")
                         for op in ("WRITE", "DESCRIBE")} | \
                        {("CLUSTER", "kafka-cluster", "LITERAL", "User:carol", "*", "IDEMPOTENT_WRITE", "ALLOW")}
        kafkafast("acls", *admin, "--remove", "--force", "--cluster")
        assert acl_rows(kafkafast("acls", *admin, "--list", "--cluster", "--output", "json").stdout) == set()

        # remove one operation of one principal, then everything on the topic
        out = kafkafast("acls", *admin, "--remove", "--force", "--allow-principal", "User:alice", "--operation",
                        "Write", "--topic", "orders").stdout
        assert "Removing ACLs for resource" in out and "operation=WRITE, permissionType=ALLOW" in out
        assert produce_error(sasl, "alice", "orders").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        left = acl_rows(kafkafast("acls", *admin, "--list", "--topic", "orders", "--output", "json").stdout)
        assert ("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW") not in left and len(left) == 4
        kafkafast("acls", *admin, "--remove", "--force", "--topic", "orders")
        assert acl_rows(kafkafast("acls", *admin, "--list", "--topic", "orders", "--output", "json").stdout) == set()
        assert consume_error(sasl, "bob", "orders", group="billing")[0] == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED

        # not a super user: refused; a wrong password: no connection at all
        bob = ["--bootstrap-server", f"127.0.0.1:{sasl}", "--command-config", command_config(tmp_path, "bob",
                                                                                            "bob-secret")]
        refused = kafkafast("acls", *bob, "--add", "--allow-principal", "User:bob", "--operation", "All",
                            "--topic", "orders", check=False)
        assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused
        wrong = ["--bootstrap-server", f"127.0.0.1:{sasl}", "--command-config", command_config(tmp_path, "eve", "x")]
        denied = kafkafast("acls", *wrong, "--list", check=False)
        assert denied.returncode == 1 and "Authentication failed" in denied.stderr, denied
        # flags kafka-acls.sh refuses
        bad = kafkafast("acls", *admin, "--add", "--allow-principal", "User:x", "--topic", "t",
                        "--resource-pattern-type", "match", check=False)
        assert bad.returncode == 1 and "only for --list and --remove" in bad.stderr
        assert kafkafast("acls", *admin, "--add", "--allow-principal", "User:x", "--consumer", "--topic", "t",
                         check=False).returncode == 1  # --consumer without --group
    finally:
        broker.kill()
    assert JAAS  # the broker's users: admin (super user), alice, bob, eve
