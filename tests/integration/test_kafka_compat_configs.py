"""Topic configs and dynamic broker configs through real clients, on a single node and a
3-broker cluster (the `kafka` fixture, issue 24): every message.format.version Kafka's parser
takes (librdkafka's 0092_mixed_msgver creates topics with 0.10.0.0), a broker's own value over
the cluster-wide default (kept over a restart; refused names and values), the dynamic broker
configs kafkafast has no use for that librdkafka's 0081_admin alters
(sasl.kerberos.min.time.before.relogin), and DescribeConfigs' types and documentation.

A broker's configs are altered through that broker (librdkafka routes a BROKER resource there)
and a topic's defaults are the describing broker's, so a test reads them from the broker it
altered; a cluster's others take the change from ZooKeeper a moment later (what only a cluster
has, the znodes and every broker applying its entry, is tests/cluster/test_controller.py's)."""
from __future__ import annotations

import subprocess

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from kafkafast.config_def import BROKER_CONFIGS
from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest as DC
from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from tests.support.cli import kafkafast
from tests.support.raw_client import RawClient

# Kafka's MetadataVersion.fromVersionString: "0.x.y" keeps three parts, other releases two.
ACCEPTED_VERSIONS = ["0.8.0", "0.8.2.1", "0.9.0.1", "0.10.0.0", "0.10.0-IV1", "0.10.2.1", "0.11.0.2",
                     "1.0.1", "1.1", "2.0.0", "2.4.1", "2.8.1", "3.0-IV1", "3.3-IV3", "3.9", "4.0-IV1"]
REFUSED_VERSIONS = ["0.10", "0.7.0", "4.0", "3.0-IV9", "banana", "3"]


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    return {"log.message.format.version": "0.10.0.0"}  # a broker config too


@pytest.fixture(scope="module")
def admin(kafka):
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


@pytest.fixture(scope="module")
def node(kafka) -> tuple[str, int]:
    """One broker's id (the name of its BROKER resource) and port."""
    return kafka.a_broker()


def topic_config(admin: AdminClient, topic: str) -> dict:
    (fut,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return fut.result(10)


def topic_value_on(port: int, topic: str, name: str) -> tuple[str, int]:
    """(value, source) of a topic config as the broker at `port` describes it."""
    with RawClient(port) as c:
        res = c.request(DC(resources=[DC.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                                  configuration_keys=[name])]), 4)
    (entry,) = res.results[0].configs
    return entry.value, entry.config_source


def broker_config(admin: AdminClient, broker_id: str) -> dict:
    (fut,) = admin.describe_configs([ConfigResource("broker", broker_id)]).values()
    return fut.result(10)


def alter_broker(admin: AdminClient, broker_id: str, name: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    (fut,) = admin.incremental_alter_configs([ConfigResource("broker", broker_id, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op)])]).values()
    fut.result(10)


def alter_cluster_default(bootstrap: str, name: str, value: str) -> subprocess.CompletedProcess:
    """The cluster-wide default (an empty broker name, which confluent-kafka cannot send), with
    the kafka-configs flags of kafkafast's command line."""
    return kafkafast("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-default",
                     "--alter", "--add-config", f"{name}={value}", check=False)


def test_every_message_format_version_kafka_parses_is_accepted(kafka, admin):
    rf = kafka.replication_factor
    for i, version in enumerate(ACCEPTED_VERSIONS):
        name = f"fmt-{i}"
        admin.create_topics([NewTopic(name, 1, rf, config={"message.format.version": version})])[name].result(10)
        assert topic_config(admin, name)["message.format.version"].value == version
    for i, version in enumerate(REFUSED_VERSIONS):
        name = f"bad-fmt-{i}"
        fut = admin.create_topics([NewTopic(name, 1, rf, config={"message.format.version": version})])[name]
        with pytest.raises(ck.KafkaException) as info:
            fut.result(10)
        err = info.value.args[0]
        assert err.code() == ck.KafkaError.INVALID_CONFIG, version
        assert err.str().endswith(f"Invalid value {version} for configuration message.format.version: "
                                  f"Version {version} is not a valid version"), err.str()


def test_log_message_format_version_takes_kafkas_values_at_start_and_as_a_dynamic_default(kafka, node):
    _, port = node
    kafka.create_topic("fmt-static", 1)
    assert topic_value_on(port, "fmt-static", "message.format.version") == (
        "0.10.0.0", ConfigSource.STATIC_BROKER_CONFIG.value)

    assert alter_cluster_default(kafka.bootstrap, "log.message.format.version", "0.11.0.2").returncode == 0
    kafka.create_topic("fmt-default", 1)
    kafka.wait_for(lambda: topic_value_on(port, "fmt-default", "message.format.version") == (
        "0.11.0.2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), 15, "the dynamic default described")
    refused = alter_cluster_default(kafka.bootstrap, "log.message.format.version", "0.10")
    assert refused.returncode != 0 and "Version 0.10 is not a valid version" in refused.stderr, refused


def test_a_brokers_dynamic_config_goes_over_the_cluster_default_and_is_kept_over_a_restart(kafka, admin, node):
    broker_id, port = node
    kafka.create_topic("dyn", 1)
    with RawClient(port) as c:  # the cluster-wide default resource (confluent-kafka cannot name it)
        resp = c.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            IAC.AlterableConfig(name="log.retention.ms", config_operation=0, value="7200000")])]), 1)
    assert resp.responses[0].error_code == 0
    alter_broker(admin, broker_id, "log.retention.ms", "3600000")
    with pytest.raises(ck.KafkaException, match="dynamically"):
        alter_broker(admin, broker_id, "num.partitions", "4")
    with pytest.raises(ck.KafkaException):
        alter_broker(admin, broker_id, "log.retention.ms", "soon")
    # this broker's own value over the cluster default
    assert topic_value_on(port, "dyn", "retention.ms") == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    entry = broker_config(admin, broker_id)["log.retention.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)

    kafka.restart()
    assert topic_value_on(port, "dyn", "retention.ms") == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    alter_broker(admin, broker_id, "log.retention.ms", None)
    assert topic_value_on(port, "dyn", "retention.ms") == (  # the cluster-wide default remains
        "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    with RawClient(port) as c:
        desc = c.request(DC(resources=[DC.DescribeConfigsResource(resource_type=4, resource_name="",
                                                                  configuration_keys=None)]), 4)
    assert [(e.value, e.config_source) for e in desc.results[0].configs if e.name == "log.retention.ms"] == [
        ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]


def test_kerberos_relogin_time_is_accepted_per_broker_and_described_as_kafka_does(kafka, admin, node):
    broker_id, _ = node
    name = "sasl.kerberos.min.time.before.relogin"
    entry = broker_config(admin, broker_id)[name]
    assert (entry.value, entry.source, entry.is_read_only) == ("60000", ConfigSource.DEFAULT_CONFIG.value, False)

    alter_broker(admin, broker_id, name, "58000")  # what librdkafka's 0081_admin does
    entry = broker_config(admin, broker_id)[name]
    assert (entry.value, entry.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    # the old AlterConfigs (replaces the broker's dynamic configs), as 0081_admin also uses it
    (fut,) = admin.alter_configs([ConfigResource("broker", broker_id, set_config={name: "59000"})]).values()
    fut.result(10)
    assert broker_config(admin, broker_id)[name].value == "59000"

    refused = alter_cluster_default(kafka.bootstrap, name, "58000")  # a listener config: per broker, as Kafka
    assert refused.returncode != 0 and "broker id must be specified" in refused.stderr, refused
    with pytest.raises(ck.KafkaException) as info:
        alter_broker(admin, broker_id, name, "soon")
    err = info.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_CONFIG
    assert err.str().endswith(f"Invalid value soon for configuration {name}: Not a number of type LONG")
    with pytest.raises(ck.KafkaException) as info:
        alter_broker(admin, broker_id, "sasl.login.refresh.window.factor", "0.2")
    assert info.value.args[0].str().endswith("Value must be at least 0.5")


def test_thread_pool_sizes_stay_refused_with_the_reason(admin, node):
    with pytest.raises(ck.KafkaException) as info:
        alter_broker(admin, node[0], "num.io.threads", "16")
    err = info.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_REQUEST
    assert "no request-handler, network or background thread pools" in err.str()


def test_describe_configs_answers_types_and_documentation_from_the_table(node):
    """The config types (v3+) and documentation of broker configs are the table's."""
    broker_id, port = node
    keys = ["num.partitions", "log.cleanup.policy", "offsets.topic.replication.factor", "log.retention.ms"]
    with RawClient(port) as c:
        res = c.request(DC(resources=[DC.DescribeConfigsResource(resource_type=4, resource_name=broker_id,
                                                                  configuration_keys=keys)],
                           include_documentation=True), 4)
    entries = {e.name: e for e in res.results[0].configs}
    # Kafka's ConfigType codes: INT 3, SHORT 4, LONG 5, LIST 7
    assert {n: e.config_type for n, e in entries.items()} == {
        "num.partitions": 3, "log.cleanup.policy": 7, "offsets.topic.replication.factor": 4, "log.retention.ms": 5}
    assert entries["log.retention.ms"].documentation == BROKER_CONFIGS["log.retention.ms"].doc
