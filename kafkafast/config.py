"""Broker configuration: Kafka's property names and defaults.

`BrokerConfig.load(path, overrides)` reads a Java-style properties file (`key=value`,
`#`/`!` comments, `:` separators, backslash line continuations) and applies `--set key=value`
overrides. Unknown keys are kept (and logged once) as Kafka does. Broker-level log settings
map to the topic-level names the storage layer uses (`log.segment.bytes` ->
`segment.bytes`, ...), the same mapping Kafka applies to topics without overrides.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger("kafkafast.config")

LONG_MAX = 9223372036854775807

# name -> default (as a string, None meaning "not set")
DEFAULTS: dict[str, str | None] = {
    "node.id": None,
    "broker.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": None,
    "log.dirs": None,
    "log.dir": "/tmp/kafka-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "log.segment.bytes": "1073741824",
    "log.roll.ms": None,
    "log.roll.hours": "168",
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.flush.interval.messages": str(LONG_MAX),
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": str(LONG_MAX),
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.cleanup.policy": "delete",
    "log.message.timestamp.type": "CreateTime",
    "log.cleaner.enable": "true",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.backoff.ms": "15000",
    "log.segment.delete.delay.ms": "60000",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offsets.load.buffer.size": "5242880",
    "offsets.commit.timeout.ms": "5000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.max.size": "2147483647",
    "transactional.id.expiration.ms": "604800000",
    "producer.id.expiration.ms": "86400000",
    "zookeeper.connect": None,
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.connection.timeout.ms": None,
    "broker.id.generation.enable": "true",
    "reserved.broker.max.id": "1000",
    "broker.rack": None,
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.backoff.ms": "1000",
    "replica.socket.timeout.ms": "30000",
    "num.replica.fetchers": "1",
    "unclean.leader.election.enable": "false",
    "controller.socket.timeout.ms": "30000",
    "inter.broker.listener.name": None,
    "security.inter.broker.protocol": "PLAINTEXT",
    "cluster.id": None,
    "num.workers": None,
}

# broker property -> topic-level property (Kafka's LogConfig synonyms)
TOPIC_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
}


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: comments, `=`/`:` separators, line continuations."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            key, value = line.strip(), ""
        else:
            key, value = line[:sep].strip(), line[sep + 1 :].strip()
        props[key] = value
    return props


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(text: str) -> list[Listener]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        u = urlsplit(item)
        if not u.scheme or u.port is None:
            raise ValueError(f"bad listener {item!r}: expected NAME://host:port")
        out.append(Listener(u.scheme.upper(), u.hostname or "", u.port))
    return out


@dataclass
class BrokerConfig:
    props: dict[str, str | None] = field(default_factory=lambda: dict(DEFAULTS))

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, str] | None = None) -> "BrokerConfig":
        props = dict(DEFAULTS)
        if path:
            with open(path, encoding="utf-8") as fh:
                props.update(parse_properties(fh.read()))
        if overrides:
            props.update(overrides)
        for key in props:
            if key not in DEFAULTS:
                log.info("config %s is not used by kafkafast (kept)", key)
        cfg = cls(props)
        cfg.validate()
        return cfg

    # -- typed accessors ------------------------------------------------------------------
    def get(self, key: str) -> str | None:
        return self.props.get(key)

    def get_int(self, key: str) -> int:
        v = self.props.get(key)
        if v is None:
            raise KeyError(key)
        return int(v)

    def get_bool(self, key: str) -> bool:
        return str(self.props.get(key)).strip().lower() == "true"

    def validate(self) -> None:
        for key in ("num.partitions", "message.max.bytes", "socket.request.max.bytes", "log.segment.bytes",
                    "log.index.interval.bytes", "offsets.topic.num.partitions"):
            if self.get_int(key) <= 0:
                raise ValueError(f"{key} must be positive")
        self.listeners()

    @property
    def node_id(self) -> int:
        v = self.props.get("node.id")
        return int(v) if v is not None else self.get_int("broker.id")

    @property
    def log_dirs(self) -> list[str]:
        v = self.props.get("log.dirs") or self.props.get("log.dir") or "/tmp/kafka-logs"
        return [os.path.abspath(d.strip()) for d in v.split(",") if d.strip()]

    def listeners(self) -> list[Listener]:
        return parse_listeners(self.props.get("listeners") or "PLAINTEXT://127.0.0.1:9092")

    def advertised_listeners(self) -> list[Listener]:
        adv = self.props.get("advertised.listeners")
        return parse_listeners(adv) if adv else self.listeners()

    def retention_ms(self) -> int:
        for key, mult in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
            v = self.props.get(key)
            if v is not None:
                n = int(v)
                return n if n < 0 else n * mult
        return 7 * 24 * 3_600_000

    def roll_ms(self) -> int:
        v = self.props.get("log.roll.ms")
        if v is not None:
            return int(v)
        return int(self.props.get("log.roll.hours") or 168) * 3_600_000

    def flush_ms(self) -> int:
        v = self.props.get("log.flush.interval.ms")
        if v is not None:
            return int(v)
        return int(self.props.get("log.flush.scheduler.interval.ms") or LONG_MAX)

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config defaults implied by the broker settings."""
        out: dict[str, str] = {}
        for broker_key, topic_key in TOPIC_SYNONYMS.items():
            v = self.props.get(broker_key)
            if v is not None:
                out[topic_key] = v
        out["retention.ms"] = str(self.retention_ms())
        out["segment.ms"] = str(self.roll_ms())
        out["flush.ms"] = str(self.flush_ms())
        return out

    def topic_config_source(self, topic_key: str) -> str | None:
        """The broker property a topic-level default comes from (for DescribeConfigs synonyms)."""
        for broker_key, tk in TOPIC_SYNONYMS.items():
            if tk == topic_key:
                return broker_key
        return None
