"""LogConfig: Kafka names, defaults, validation."""
from __future__ import annotations

import pytest

from kafkafast.protocol.errors import InvalidConfigError
from kafkafast.storage import TOPIC_CONFIG_DEFAULTS, LogConfig


def test_defaults_are_kafkas():
    cfg = LogConfig()
    assert cfg.segment_bytes == 1073741824 and cfg.segment_ms == 604800000
    assert cfg.segment_index_bytes == 10485760 and cfg.index_interval_bytes == 4096
    assert cfg.retention_ms == 604800000 and cfg.retention_bytes == -1
    assert cfg.flush_messages == cfg.flush_ms == 9223372036854775807
    assert cfg.cleanup_policy == "delete" and cfg.message_timestamp_type == "CreateTime"
    assert cfg.max_message_bytes == 1048588 and cfg.delete_retention_ms == 86400000
    assert cfg.min_cleanable_dirty_ratio == 0.5 and cfg.file_delete_delay_ms == 60000
    assert cfg.compression_type == "producer" and cfg.min_insync_replicas == 1
    assert TOPIC_CONFIG_DEFAULTS["segment.bytes"] == "1073741824"
    assert LogConfig().to_props() == TOPIC_CONFIG_DEFAULTS


def test_from_props_applies_over_base_and_round_trips():
    base = LogConfig.from_props({"retention.ms": "1000"})
    cfg = LogConfig.from_props({"segment.bytes": "2048", "cleanup.policy": "compact, delete",
                                "preallocate": "TRUE"}, base)
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.cleanup_policy, cfg.preallocate) == (2048, 1000, "compact,delete", True)
    assert cfg.compact and cfg.delete
    assert LogConfig.from_props(cfg.to_props()) == cfg


@pytest.mark.parametrize("name,value", [
    ("segment.bytes", "abc"), ("segment.bytes", "13"), ("segment.bytes", "99999999999"),
    ("retention.ms", "-2"), ("cleanup.policy", "forever"), ("min.cleanable.dirty.ratio", "1.5"),
    ("message.timestamp.type", "Now"), ("compression.type", "brotli"), ("preallocate", "yes"),
    ("min.insync.replicas", "0"), ("no.such.config", "1"),
])
def test_bad_values_and_unknown_names_raise_invalid_config(name, value):
    with pytest.raises(InvalidConfigError) as exc:
        LogConfig.from_props({name: value})
    assert name in str(exc.value)
