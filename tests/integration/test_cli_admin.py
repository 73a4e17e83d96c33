"""`kafkafast topics`, `configs`, `cluster` and `health` against a running broker."""
from __future__ import annotations

import json

from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest
from tests.support.broker_process import free_port
from tests.support.cli import kafkafast
from tests.support.raw_client import RawClient


def test_topics_create_list_describe_alter_delete(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    out = kafkafast("topics", *b, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
                    "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact,delete")
    assert out.stdout.strip() == "Created topic orders."
    assert "orders" in kafkafast("topics", *b, "--list").stdout.split()
    assert "__consumer_offsets" not in kafkafast("topics", *b, "--list", "--exclude-internal").stdout.split()

    text = kafkafast("topics", *b, "--describe", "--topic", "orders").stdout
    assert "PartitionCount: 3" in text and "ReplicationFactor: 1" in text
    assert "Configs: cleanup.policy=compact,delete,retention.ms=3600000" in text
    assert "\tTopic: orders\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0" in text

    kafkafast("topics", *b, "--alter", "--topic", "orders", "--partitions", "5")
    doc = json.loads(kafkafast("topics", *b, "--describe", "--topic", "orders", "--output", "json").stdout)
    assert doc[0]["partition_count"] == 5
    assert [p["leader"] for p in doc[0]["partitions"]] == [0] * 5
    assert doc[0]["configs"] == {"cleanup.policy": "compact,delete", "retention.ms": "3600000"}

    fewer = kafkafast("topics", *b, "--alter", "--topic", "orders", "--partitions", "2", check=False)
    assert fewer.returncode == 1 and "InvalidPartitionsError" in fewer.stderr
    again = kafkafast("topics", *b, "--create", "--topic", "orders", "--partitions", "1", check=False)
    assert again.returncode == 1 and "TopicAlreadyExistsError" in again.stderr
    kafkafast("topics", *b, "--create", "--topic", "orders", "--partitions", "1", "--if-not-exists")

    assert kafkafast("topics", *b, "--delete", "--topic", "orders").stdout.strip() == "Deleted topic orders."
    assert "orders" not in kafkafast("topics", *b, "--list").stdout.split()
    missing = kafkafast("topics", *b, "--describe", "--topic", "orders", check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_configs_alter_and_describe_topic_and_broker(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "cfg", "--partitions", "1")
    kafkafast("configs", *b, "--entity-type", "topics", "--entity-name", "cfg", "--alter",
              "--add-config", "segment.bytes=1048576,cleanup.policy=[compact,delete]")
    doc = {e["name"]: e for e in json.loads(kafkafast("configs", *b, "--topic", "cfg", "--describe",
                                                      "--output", "json").stdout)}
    assert doc["segment.bytes"]["value"] == "1048576"
    assert doc["cleanup.policy"]["value"] == "compact,delete"
    assert doc["segment.bytes"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert "retention.ms" not in doc  # only overrides without --all

    kafkafast("configs", *b, "--topic", "cfg", "--alter", "--delete-config", "segment.bytes")
    every = {e["name"]: e for e in json.loads(kafkafast("configs", *b, "--topic", "cfg", "--describe", "--all",
                                                        "--output", "json").stdout)}
    assert every["segment.bytes"]["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
    assert every["segment.bytes"]["value"] != "1048576"
    assert every["cleanup.policy"]["value"] == "compact,delete"

    broker = kafkafast("configs", *b, "--entity-type", "brokers", "--entity-name", "0", "--describe").stdout
    assert any(line.split()[:3] == ["listeners", f"PLAINTEXT://{module_broker.bootstrap}", "STATIC_BROKER_CONFIG"]
               for line in broker.splitlines())
    static = kafkafast("configs", *b, "--broker", "0", "--alter", "--add-config", "num.partitions=7", check=False)
    assert static.returncode == 1 and "InvalidRequestError" in static.stderr and "dynamically" in static.stderr
    kafkafast("configs", *b, "--broker", "0", "--alter", "--add-config", "log.retention.ms=86400001")
    broker = kafkafast("configs", *b, "--entity-type", "brokers", "--entity-name", "0", "--describe").stdout
    assert any(line.split()[:3] == ["log.retention.ms", "86400001", "DYNAMIC_BROKER_CONFIG"] for line in broker.splitlines())
    kafkafast("configs", *b, "--broker", "0", "--alter", "--delete-config", "log.retention.ms")
    broker = kafkafast("configs", *b, "--entity-type", "brokers", "--entity-name", "0", "--describe").stdout
    assert "86400001" not in broker


def test_configs_alter_and_describe_group_configs_as_kafka_configs_does(module_broker):
    """kafka-configs.sh --entity-type groups (Kafka 4): IncrementalAlterConfigs / DescribeConfigs of
    resource type GROUP, described in Kafka's text with each config's synonyms."""
    b = ["--bootstrap-server", module_broker.bootstrap]
    group = "cfg-workers"
    out = kafkafast("configs", *b, "--entity-type", "groups", "--entity-name", group, "--alter",
                    "--add-config", "share.auto.offset.reset=earliest,share.delivery.count.limit=3")
    assert out.stdout == f"Completed updating config for group {group}.\n"
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=32, resource_name=group, configuration_keys=["share.auto.offset.reset"])])
    with RawClient(module_broker.port) as rc:  # the broker keeps it
        assert [(c.name, c.value) for c in rc.request(req, 4).results[0].configs] == [
            ("share.auto.offset.reset", "earliest")]
    assert kafkafast("configs", *b, "--entity-type", "groups", "--entity-name", group, "--describe").stdout == (
        f"Dynamic configs for group {group} are:\n"
        "  share.auto.offset.reset=earliest sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}\n"
        "  share.delivery.count.limit=3 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.delivery.count.limit=3}\n")
    every = kafkafast("configs", *b, "--group", group, "--describe", "--all").stdout.splitlines()
    assert every[0] == f"All configs for group {group} are:"
    assert "  share.isolation.level=read_uncommitted sensitive=false " \
           "synonyms={DEFAULT_CONFIG:share.isolation.level=read_uncommitted}" in every
    assert "  share.auto.offset.reset=earliest sensitive=false " \
           "synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}" in every
    bad = kafkafast("configs", *b, "--group", group, "--alter", "--add-config", "share.auto.offset.reset=soon",
                    check=False)
    assert bad.returncode == 1 and "InvalidConfigError" in bad.stderr and "Traceback" not in bad.stderr
    nameless = kafkafast("configs", *b, "--entity-type", "groups", "--alter", "--add-config",
                         "share.auto.offset.reset=latest", check=False)
    assert nameless.returncode != 0 and "--entity-name" in nameless.stderr
    kafkafast("configs", *b, "--group", group, "--alter", "--delete-config",
              "share.auto.offset.reset,share.delivery.count.limit")
    assert kafkafast("configs", *b, "--entity-type", "groups", "--entity-name", group, "--describe").stdout == (
        f"Dynamic configs for group {group} are:\n")


def test_cluster_shows_broker_controller_and_cluster_id(module_broker):
    doc = json.loads(kafkafast("cluster", "--bootstrap-server", module_broker.bootstrap, "--output", "json").stdout)
    meta = (module_broker.data_dir / "meta.properties").read_text()
    assert f"cluster.id={doc['cluster_id']}" in meta
    assert doc["controller"] == 0
    assert doc["brokers"] == [{"id": 0, "host": "127.0.0.1", "port": module_broker.port, "rack": None}]
    text = kafkafast("cluster", "--bootstrap-server", module_broker.bootstrap).stdout
    assert f"Cluster ID: {doc['cluster_id']}" in text


def test_health_exit_code(module_broker):
    ok = kafkafast("health", "--bootstrap-server", module_broker.bootstrap)
    assert ok.stdout.startswith(f"OK {module_broker.bootstrap}")
    down = kafkafast("health", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "2", check=False)
    assert down.returncode == 1 and down.stdout.startswith("UNHEALTHY")


def test_command_config_is_passed_to_the_client(module_broker, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("client.id=ops-tool\nrequest.timeout.ms=5000\n")
    out = kafkafast("topics", "--bootstrap-server", module_broker.bootstrap, "--command-config", str(props), "--list")
    assert out.returncode == 0
    props.write_text("security.protocol=SASL_SSL\n")
    bad = kafkafast("topics", "--bootstrap-server", module_broker.bootstrap, "--command-config", str(props),
                    "--list", check=False)
    assert bad.returncode == 1 and "sasl.mechanism=GSSAPI" in bad.stderr  # admin commands speak SASL, not Kerberos
    bad = kafkafast("produce", "--bootstrap-server", module_broker.bootstrap, "--topic", "t", "--producer.config",
                    str(props), stdin="x\n", check=False)
    assert bad.returncode == 1 and "sasl.mechanism=GSSAPI" in bad.stderr  # produce speaks SASL too


def test_every_command_has_help_with_an_example():
    from kafkafast.cli.main import COMMANDS

    assert {"topics", "groups", "configs", "produce", "consume", "dump-log", "cluster", "bench", "health",
            "reassign", "acls"} <= set(COMMANDS)
    for cmd in COMMANDS:
        out = kafkafast(cmd, "--help")
        assert "example:" in out.stdout and f"kafkafast {cmd}" in out.stdout, cmd
