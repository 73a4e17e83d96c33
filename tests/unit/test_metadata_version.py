"""inter.broker.protocol.version read as Kafka's MetadataVersion.fromVersionString reads it, and
what it decides here: the `__consumer_offsets` value versions Kafka's group coordinator writes at
each level, and the levels a broker refuses to start with (record batches v2 need 0.11.0)."""
from __future__ import annotations

import pytest

from kafkafast.broker.groups.offsets_records import value_versions
from kafkafast.config import BrokerConfig
from kafkafast.config_def import IBP_VERSIONS, ConfigError, ibp_at_least, metadata_version


@pytest.mark.parametrize("text,version", [
    ("2.2", "2.2-IV1"), ("2.2.1", "2.2-IV1"), ("2.3-IV0", "2.3-IV0"), ("0.10.0.0", "0.10.0-IV1"),
    ("0.10.0", "0.10.0-IV1"), ("0.8.2", "0.8.2"), ("2.8.1", "2.8-IV1"), ("1.0.1", "1.0-IV0"), ("3.9", "3.9-IV0"),
    ("4.0-IV1", "4.0-IV1"), (None, "3.9-IV0"),
])
def test_a_version_names_what_kafka_reads_it_as(text, version):
    assert IBP_VERSIONS[metadata_version(text)] == version


@pytest.mark.parametrize("text", ["4.0", "9.9", "2.2-IV7", "0.10", "x", "2"])
def test_a_version_kafka_does_not_know_is_refused(text):
    assert metadata_version(text) is None
    with pytest.raises(ConfigError, match=f"inter.broker.protocol.version: Version {text} is not a valid version"):
        BrokerConfig.load(None, {"inter.broker.protocol.version": text})


@pytest.mark.parametrize("ibp,group,offset", [
    (None, 3, 3), ("3.9", 3, 3), ("2.3-IV0", 3, 3), ("2.2", 2, 3), ("2.1-IV1", 2, 3), ("2.1-IV0", 2, 2),
    ("2.0", 1, 1), ("1.1", 1, 1), ("0.11.0", 1, 1),
])
def test_the_offsets_topic_value_versions_are_kafkas_at_each_level(ibp, group, offset):
    assert value_versions(ibp) == (group, offset)
    assert ibp_at_least(ibp, "2.3-IV0") == (group == 3)


def test_a_level_below_record_batches_v2_is_refused_at_start():
    BrokerConfig.load(None, {"inter.broker.protocol.version": "0.11.0"})
    with pytest.raises(ConfigError, match="log.message.format.version 3.0-IV1 can only be used when "
                                          "inter.broker.protocol.version is set to version 0.11.0 or higher"):
        BrokerConfig.load(None, {"inter.broker.protocol.version": "0.10.2"})
    with pytest.raises(ConfigError, match="stores record batches v2 only"):
        BrokerConfig.load(None, {"inter.broker.protocol.version": "0.10.2", "log.message.format.version": "0.10.2"})
    with pytest.raises(ConfigError, match="log.message.format.version: Version 5.5 is not a valid version"):
        BrokerConfig.load(None, {"log.message.format.version": "5.5"})
