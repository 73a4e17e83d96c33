"""Configs that Kafka's clients and tools set and Kafka accepts, through confluent-kafka's
AdminClient: every message.format.version Kafka's parser takes (librdkafka's 0092_mixed_msgver
creates topics with 0.10.0.0), and the dynamic broker configs kafkafast has no use for that
librdkafka's 0081_admin alters (sasl.kerberos.min.time.before.relogin)."""
from __future__ import annotations

import subprocess

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from tests.support.cli import kafkafast

# Kafka's MetadataVersion.fromVersionString: "0.x.y" keeps three parts, other releases two.
ACCEPTED_VERSIONS = ["0.8.0", "0.8.2.1", "0.9.0.1", "0.10.0.0", "0.10.0-IV1", "0.10.2.1", "0.11.0.2",
                     "1.0.1", "1.1", "2.0.0", "2.4.1", "2.8.1", "3.0-IV1", "3.3-IV3", "3.9", "4.0-IV1"]
REFUSED_VERSIONS = ["0.10", "0.7.0", "4.0", "3.0-IV9", "banana", "3"]


@pytest.fixture
def broker(broker_factory):
    return broker_factory(settings={"log.message.format.version": "0.10.0.0"})  # a broker config too


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def topic_config(admin: AdminClient, topic: str) -> dict:
    (fut,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return fut.result(10)


def broker_config(admin: AdminClient, broker_id: str) -> dict:
    (fut,) = admin.describe_configs([ConfigResource("broker", broker_id)]).values()
    return fut.result(10)


def alter_broker(admin: AdminClient, broker_id: str, name: str, value: str) -> None:
    (fut,) = admin.incremental_alter_configs([ConfigResource("broker", broker_id, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])]).values()
    fut.result(10)


def alter_cluster_default(bootstrap: str, name: str, value: str) -> subprocess.CompletedProcess:
    """The cluster-wide default (an empty broker name, which confluent-kafka cannot send), with
    the kafka-configs flags of kafkafast's command line."""
    return kafkafast("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-default",
                     "--alter", "--add-config", f"{name}={value}", check=False)


def test_every_message_format_version_kafka_parses_is_accepted(admin):
    for i, version in enumerate(ACCEPTED_VERSIONS):
        name = f"fmt-{i}"
        admin.create_topics([NewTopic(name, 1, 1, config={"message.format.version": version})])[name].result(10)
        assert topic_config(admin, name)["message.format.version"].value == version
    for i, version in enumerate(REFUSED_VERSIONS):
        name = f"bad-fmt-{i}"
        fut = admin.create_topics([NewTopic(name, 1, 1, config={"message.format.version": version})])[name]
        with pytest.raises(ck.KafkaException) as info:
            fut.result(10)
        err = info.value.args[0]
        assert err.code() == ck.KafkaError.INVALID_CONFIG, version
        assert err.str().endswith(f"Invalid value {version} for configuration message.format.version: "
                                  f"Version {version} is not a valid version"), err.str()


def test_log_message_format_version_takes_kafkas_values_at_start_and_as_a_dynamic_default(broker, admin):
    admin.create_topics([NewTopic("fmt-static", 1, 1)])["fmt-static"].result(10)
    entry = topic_config(admin, "fmt-static")["message.format.version"]
    assert (entry.value, entry.source) == ("0.10.0.0", ConfigSource.STATIC_BROKER_CONFIG.value)

    assert alter_cluster_default(broker.bootstrap, "log.message.format.version", "0.11.0.2").returncode == 0
    admin.create_topics([NewTopic("fmt-default", 1, 1)])["fmt-default"].result(10)
    entry = topic_config(admin, "fmt-default")["message.format.version"]
    assert (entry.value, entry.source) == ("0.11.0.2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    refused = alter_cluster_default(broker.bootstrap, "log.message.format.version", "0.10")
    assert refused.returncode != 0 and "Version 0.10 is not a valid version" in refused.stderr, refused


def test_kerberos_relogin_time_is_accepted_per_broker_and_described_as_kafka_does(broker, admin):
    (broker_id,) = [str(b.id) for b in admin.list_topics(timeout=10).brokers.values()]
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

    refused = alter_cluster_default(broker.bootstrap, name, "58000")  # a listener config: per broker, as Kafka
    assert refused.returncode != 0 and "broker id must be specified" in refused.stderr, refused
    with pytest.raises(ck.KafkaException) as info:
        alter_broker(admin, broker_id, name, "soon")
    err = info.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_CONFIG
    assert err.str().endswith(f"Invalid value soon for configuration {name}: Not a number of type LONG")
    with pytest.raises(ck.KafkaException) as info:
        alter_broker(admin, broker_id, "sasl.login.refresh.window.factor", "0.2")
    assert info.value.args[0].str().endswith("Value must be at least 0.5")


def test_thread_pool_sizes_stay_refused_with_the_reason(admin):
    (broker_id,) = [str(b.id) for b in admin.list_topics(timeout=10).brokers.values()]
    with pytest.raises(ck.KafkaException) as info:
        alter_broker(admin, broker_id, "num.io.threads", "16")
    err = info.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_REQUEST
    assert "no request-handler, network or background thread pools" in err.str()
