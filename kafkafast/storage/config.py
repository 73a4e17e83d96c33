"""Topic-level log configuration (Kafka's `TopicConfig` names, defaults and validation).

`LogConfig` is a frozen value; a topic's effective config is the broker default with the
topic's overrides applied: `LogConfig.from_props(overrides, base=broker_default)`.
Unknown names and bad values raise `InvalidConfigError` with a message naming the config,
as Kafka's CreateTopics / AlterConfigs do.
"""
from __future__ import annotations


from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kafkafast.config_def import metadata_version
from kafkafast.protocol.errors import InvalidConfigError

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _parse_int(bits: int) -> Callable[[str, str], int]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def parse(name: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {text!r} for configuration {name}: Not a number of type "
                                     f"{'INT' if bits == 32 else 'LONG'}") from None
        if not lo <= value <= hi:
            raise InvalidConfigError(f"Invalid value {text!r} for configuration {name}: out of range")
        return value

    return parse


def _parse_double(name: str, text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {name}: Not a number of type DOUBLE") from None


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise InvalidConfigError(f"Invalid value {text!r} for configuration {name}: Expected value to be either true or false")


def _parse_str(name: str, text: str) -> str:
    return text.strip()


def _parse_list(name: str, text: str) -> str:
    return ",".join(part.strip() for part in text.split(",") if part.strip())


def _at_least(minimum: float) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {minimum}")

    return check


def _between(lo: float, hi: float) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if not lo <= value <= hi:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be in [{lo}, {hi}]")

    return check


def _one_of(*allowed: str) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: String must be one of: "
                                     f"{', '.join(allowed)}")

    return check


def _cleanup_policy(name: str, value: Any) -> None:
    parts = value.split(",") if value else []
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                 f"must be a list of compact, delete")


def _format_version(name: str, value: Any) -> None:
    """message.format.version / log.message.format.version, parsed as Kafka's
    MetadataVersion.fromVersionString: a release "0.x.y" keeps three dot-separated parts and any
    other release two, the rest is ignored ("0.10.0.0" is 0.10.0, "1.0.1" is 1.0, "2.8.1" is 2.8);
    the result must be a release or a version ("3.0-IV1") Kafka knows. Kafka 3.x accepts the
    value and ignores it (record batches are always v2 from inter.broker.protocol 3.0 on), and so
    does kafkafast."""
    if metadata_version(value) is None:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Version {value} is not a valid version")


def _no_check(name: str, value: Any) -> None:
    return None


_INT = _parse_int(32)
_LONG = _parse_int(64)

# Kafka config name -> (attribute, parser, validator, default as Kafka prints it)
_SPEC: dict[str, tuple[str, Callable[[str, str], Any], Callable[[str, Any], None], str]] = {
    "segment.bytes": ("segment_bytes", _INT, _at_least(14), "1073741824"),
    "segment.ms": ("segment_ms", _LONG, _at_least(1), "604800000"),
    "segment.jitter.ms": ("segment_jitter_ms", _LONG, _at_least(0), "0"),
    "segment.index.bytes": ("segment_index_bytes", _INT, _at_least(4), "10485760"),
    "index.interval.bytes": ("index_interval_bytes", _INT, _at_least(0), "4096"),
    "retention.ms": ("retention_ms", _LONG, _at_least(-1), "604800000"),
    "retention.bytes": ("retention_bytes", _LONG, _no_check, "-1"),
    "flush.messages": ("flush_messages", _LONG, _at_least(1), str(LONG_MAX)),
    "flush.ms": ("flush_ms", _LONG, _at_least(0), str(LONG_MAX)),
    "cleanup.policy": ("cleanup_policy", _parse_list, _cleanup_policy, "delete"),
    "message.timestamp.type": ("message_timestamp_type", _parse_str, _one_of(*_TIMESTAMP_TYPES), "CreateTime"),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _LONG, _at_least(0), str(LONG_MAX)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _LONG, _at_least(0), str(LONG_MAX)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _LONG, _at_least(0), str(LONG_MAX)),
    "max.message.bytes": ("max_message_bytes", _INT, _at_least(0), "1048588"),
    "delete.retention.ms": ("delete_retention_ms", _LONG, _at_least(0), "86400000"),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _parse_double, _between(0.0, 1.0), "0.5"),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _LONG, _at_least(0), "0"),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _LONG, _at_least(1), str(LONG_MAX)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _LONG, _at_least(0), "60000"),
    "compression.type": ("compression_type", _parse_str, _one_of(*_COMPRESSION_TYPES), "producer"),
    "min.insync.replicas": ("min_insync_replicas", _INT, _at_least(1), "1"),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _parse_bool, _no_check, "false"),
    "preallocate": ("preallocate", _parse_bool, _no_check, "false"),
    "message.downconversion.enable": ("message_downconversion_enable", _parse_bool, _no_check, "true"),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", _parse_str, _no_check, ""),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", _parse_str, _no_check, ""),
    # Deprecated since Kafka 3.0 and ignored (the log always holds v2 batches; old clients get
    # converted records): accepted and described, as Kafka 3.x does.
    "message.format.version": ("message_format_version", _parse_str, _format_version, "3.0-IV1"),
}
# The broker config's name, accepted as a topic config too (it sets message.format.version).
TOPIC_ALIASES = {"log.message.format.version": "message.format.version"}

TOPIC_CONFIG_DEFAULTS: dict[str, str] = {name: spec[3] for name, spec in _SPEC.items()}
"""Every topic-level config name this broker knows, with Kafka's default as a string."""

_ATTR_TO_NAME = {spec[0]: name for name, spec in _SPEC.items()}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One topic's log configuration; attribute `segment_bytes` is config `segment.bytes`."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False
    message_downconversion_enable: bool = True
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    message_format_version: str = "3.0-IV1"

    @classmethod
    def from_props(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """`base` (or the defaults) with `props` applied; InvalidConfigError on a bad name or value."""
        changes: dict[str, Any] = {}
        for name, text in props.items():
            name = TOPIC_ALIASES.get(name, name)
            spec = _SPEC.get(name)
            if spec is None:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            if text is None:
                raise InvalidConfigError(f"Null value not supported for topic config {name}")
            attr, parse, check, _ = spec
            value = parse(name, str(text))
            check(name, value)
            changes[attr] = value
        return replace(base if base is not None else cls(), **changes)

    def to_props(self) -> dict[str, str]:
        """Every config as Kafka would describe it (name -> string value)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            out[_ATTR_TO_NAME[f.name]] = text
        return out

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may take appends (Kafka's LogConfig.maxSegmentMs): a
        compacted topic's max.compaction.lag.ms bounds segment.ms, so that its records become
        cleanable in time."""
        if self.max_compaction_lag_ms < self.segment_ms and self.compact:  # (the default: LONG_MAX, never)
            return self.max_compaction_lag_ms
        return self.segment_ms
