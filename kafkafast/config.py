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
import re
from dataclasses import dataclass, field

log = logging.getLogger("kafkafast.config")

LONG_MAX = 9223372036854775807
# Default ratio of message.max.decompressed.bytes to message.max.bytes (a topic's
# max.message.bytes where it is larger): room for what real producers compress (text and
# JSON 5-20x), far below what a compression bomb expands to (1000x and more).
DECOMPRESSED_PER_MESSAGE_BYTES = 64

DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"  # Kafka's

# name -> default (as a string, None meaning "not set")
DEFAULTS: dict[str, str | None] = {
    "node.id": None,
    "broker.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": None,
    "listener.security.protocol.map": DEFAULT_PROTOCOL_MAP,
    "log.dirs": None,
    "log.dir": "/tmp/kafka-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "message.max.bytes": "1048588",
    # Bound on the records of one compressed batch once decompressed (produce validation and
    # the log cleaner); unset: DECOMPRESSED_PER_MESSAGE_BYTES x the batch size bound in use.
    "message.max.decompressed.bytes": None,
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
    "log.flush.start.offset.checkpoint.interval.ms": "60000",
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.cleanup.policy": "delete",
    "log.message.timestamp.type": "CreateTime",
    "log.message.format.version": "3.0-IV1",  # deprecated, accepted and ignored as in Kafka 3.x
    "log.message.downconversion.enable": "true",
    "log.cleaner.enable": "true",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",  # Kafka's Double.MaxValue: unthrottled
    "log.cleaner.dedupe.buffer.size": "134217728",  # bounds the keys of one cleaning (storage/cleaner.py)
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
    # The consumer group protocol (KIP-848), Kafka 4.0's names and defaults.
    "group.coordinator.rebalance.protocols": "classic,consumer",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.consumer.max.size": "2147483647",
    "group.consumer.assignors": "uniform,range",
    "group.consumer.migration.policy": "bidirectional",
    # Share groups (KIP-932), Kafka 4.2's names and defaults.
    "group.share.session.timeout.ms": "45000",
    "group.share.min.session.timeout.ms": "45000",
    "group.share.max.session.timeout.ms": "60000",
    "group.share.heartbeat.interval.ms": "5000",
    "group.share.min.heartbeat.interval.ms": "5000",
    "group.share.max.heartbeat.interval.ms": "15000",
    "group.share.max.size": "200",
    "group.share.record.lock.duration.ms": "30000",
    "group.share.min.record.lock.duration.ms": "15000",
    "group.share.max.record.lock.duration.ms": "60000",
    "group.share.partition.max.record.locks": "2000",
    "group.share.delivery.count.limit": "5",
    "group.share.min.delivery.count.limit": "2",
    "group.share.max.delivery.count.limit": "10",
    "share.coordinator.state.topic.num.partitions": "50",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.snapshot.update.records.per.snapshot": "500",
    "transactional.id.expiration.ms": "604800000",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.segment.bytes": "104857600",
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
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
    # -- rolling operations (cluster/controller.py, cluster/cluster_broker.py) --
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "3",
    "controlled.shutdown.retry.backoff.ms": "5000",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.per.broker.percentage": "10",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.replication.throttled.rate": "9223372036854775807",
    "follower.replication.throttled.rate": "9223372036854775807",
    # -- end rolling operations --
    "inter.broker.listener.name": None,
    "security.inter.broker.protocol": "PLAINTEXT",
    "cluster.id": None,
    "num.workers": None,
    # Worker processes append a produce for a partition another worker owns themselves,
    # through shared memory (docs/ARCHITECTURE.md, "Shared append"); false: forward it.
    "kafkafast.produce.shared.append": "true",
    # The same in cluster mode (zookeeper.connect, --workers N) for partitions this broker
    # leads; follower appends take the same lock, the owner keeps the high watermark. Off by
    # default: faster at acks=1, not yet shown to be at acks=all (perf/results/cluster_shared_append.md).
    "kafkafast.produce.shared.append.cluster": "false",
    # -- security (kafkafast/security, kafkafast/runtime/limits.py) --
    "inter.broker.listener.name": None,
    "security.inter.broker.protocol": "PLAINTEXT",
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.keystore.key": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.key.password": None,
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": None,
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.principal.mapping.rules": "DEFAULT",
    "ssl.allow.dn.changes": "false",  # may a dynamic key store change the certificate's subject
    "ssl.allow.san.changes": "false",  # ... or its subject alternative names
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "connections.max.reauth.ms": "0",
    "connection.failed.authentication.delay.ms": "100",
    "authorizer.class.name": "",
    "super.users": None,
    "allow.everyone.if.no.acl.found": "false",
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "connections.max.idle.ms": "600000",
    "queued.max.requests": "500",
    "queued.max.request.bytes": "-1",
    # broker-wide limit counters (kafkafast/runtime/limits.py, shared_counters.py)
    "kafkafast.max.pending.connections": "512",
    "kafkafast.connection.setup.timeout.ms": "10000",
    "kafkafast.shm.ip.entries": "8192",
    "kafkafast.shm.quota.entities": "1024",
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
    "log.message.format.version": "message.format.version",
    "log.message.downconversion.enable": "message.downconversion.enable",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
}


def max_decompressed_bytes(setting: str | None, max_message_bytes: int) -> int:
    """`message.max.decompressed.bytes` (a string, None when unset) in effect for batches
    bounded by `max_message_bytes`."""
    if setting is not None:
        return int(setting)
    return DECOMPRESSED_PER_MESSAGE_BYTES * max_message_bytes


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


# Kafka's listener grammar: NAME://host:port, an IPv6 host in brackets, an empty host for all interfaces
LISTENER_RE = re.compile(r"^([A-Za-z0-9_.-]+)://\[?([0-9A-Za-z%._:-]*?)\]?:([0-9]+)$")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ConfigError(ValueError):
    """A setting the broker cannot start with; the message names the setting."""


@dataclass(frozen=True)
class Listener:
    name: str  # upper-cased, as Kafka normalises listener names
    host: str  # "" binds every interface
    port: int
    security_protocol: str = "PLAINTEXT"


def parse_protocol_map(text: str) -> dict[str, str]:
    """`listener.security.protocol.map`: NAME:PROTOCOL pairs, comma-separated."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map: bad entry {item!r}, expected NAME:PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: unknown security protocol {proto!r} for listener "
                              f"{name} (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: listener {name} is mapped twice")
        out[name] = proto
    return out


def parse_listeners(text: str, protocol_map: dict[str, str] | None = None, *,
                    setting: str = "listeners") -> list[Listener]:
    """`NAME://host:port,...`; each NAME's security protocol comes from `protocol_map`
    (Kafka's default map when None). Names must be unique."""
    protocols = parse_protocol_map(DEFAULT_PROTOCOL_MAP) if protocol_map is None else protocol_map
    out: list[Listener] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        m = LISTENER_RE.match(item)
        if m is None or not 0 <= int(m.group(3)) <= 65535:
            raise ConfigError(f"{setting}: bad listener {item!r}, expected NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        proto = protocols.get(name)
        if proto is None:
            raise ConfigError(f"{setting}: no security protocol defined for listener {name} "
                              "(add it to listener.security.protocol.map)")
        if any(x.name == name for x in out):
            raise ConfigError(f"{setting}: listener {name} is defined twice; each listener needs its own name")
        out.append(Listener(name, host, port, proto))
    if not out:
        raise ConfigError(f"{setting}: no listener defined")
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
            if key not in DEFAULTS and not key.startswith("listener.name."):
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
            try:
                value = self.get_int(key)
            except ValueError:
                raise ConfigError(f"{key} must be an integer, got {self.props.get(key)!r}") from None
            if value <= 0:
                raise ConfigError(f"{key} must be positive")
        v = self.props.get("message.max.decompressed.bytes")
        if v is not None and int(v) <= 0:
            raise ConfigError("message.max.decompressed.bytes must be positive")
        for key in ("log.retention.check.interval.ms", "log.flush.offset.checkpoint.interval.ms",
                    "log.flush.start.offset.checkpoint.interval.ms"):
            if self.get_int(key) <= 0:
                raise ConfigError(f"{key} must be positive")
        self._check_listeners()

    def _check_listeners(self) -> None:
        """Listener names and protocols are checked by parsing them; an advertised listener
        must be one of the listeners."""
        listeners = self.listeners()
        names = {x.name for x in listeners}
        for adv in self.advertised_listeners():
            if adv.name not in names:
                raise ConfigError(f"advertised.listeners: listener {adv.name} is not one of listeners "
                                  f"({', '.join(sorted(names))})")

    def max_decompressed_bytes(self, max_message_bytes: int | None = None) -> int:
        """Largest size the records of one compressed batch may decompress to:
        `message.max.decompressed.bytes` if set, else DECOMPRESSED_PER_MESSAGE_BYTES times
        `max_message_bytes` (the topic's max.message.bytes) or message.max.bytes."""
        return max_decompressed_bytes(self.props.get("message.max.decompressed.bytes"),
                                      self.get_int("message.max.bytes") if max_message_bytes is None
                                      else max_message_bytes)

    @property
    def node_id(self) -> int:
        v = self.props.get("node.id")
        return int(v) if v is not None else self.get_int("broker.id")

    @property
    def log_dirs(self) -> list[str]:
        v = self.props.get("log.dirs") or self.props.get("log.dir") or "/tmp/kafka-logs"
        return [os.path.abspath(d.strip()) for d in v.split(",") if d.strip()]

    def protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.props.get("listener.security.protocol.map") or DEFAULT_PROTOCOL_MAP)

    def listeners(self) -> list[Listener]:
        return parse_listeners(self.props.get("listeners") or "PLAINTEXT://127.0.0.1:9092", self.protocol_map())

    def advertised_listeners(self) -> list[Listener]:
        adv = self.props.get("advertised.listeners")
        return parse_listeners(adv, self.protocol_map(), setting="advertised.listeners") if adv else self.listeners()

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
