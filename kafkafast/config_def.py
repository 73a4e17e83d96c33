"""The broker's known configs, as Kafka's `ConfigDef` defines them: name, type, default,
validator and documentation, in one table (`BROKER_CONFIGS`).

Start-up validation (`kafkafast.config.BrokerConfig.validate`), DescribeConfigs' config
types and `kafkafast broker --help-configs` read it. A value is parsed as Kafka's
`ConfigDef.parseType` does (booleans only `true`/`false` in any case, numbers in their
type's range, lists split on commas) and then checked by the key's validator; a bad one is
refused with Kafka's message, `Invalid value X for configuration Y: reason`.

Kafka configs that kafkafast accepts without a use for them (thread-pool sizes, socket
buffer sizes: its process model has no counterpart) are in the table too, typed and
validated, documented as unused: a key in the table is never reported as unknown.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A setting the broker cannot start with; the message names the setting."""


BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")
_INT_BITS = {SHORT: 16, INT: 32, LONG: 64}
LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

# replica.selector.class's one selector (Kafka's class name): consumers fetch from a replica in their rack.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# A validator gets the parsed value and returns the reason it is refused, or None.
Validator = Callable[[Any], "str | None"]


def at_least(minimum: int | float) -> Validator:
    return lambda v: None if v is None or v >= minimum else f"Value must be at least {minimum}"


def between(lo: int | float, hi: int | float) -> Validator:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if v < lo:
            return f"Value must be at least {lo}"
        return None if v <= hi else f"Value must be no more than {hi}"

    return check


def one_of(*allowed: str, case_sensitive: bool = True) -> Validator:
    folded = allowed if case_sensitive else tuple(a.lower() for a in allowed)

    def check(v: Any) -> str | None:
        if v is None or (v if case_sensitive else v.lower()) in folded:
            return None
        return f"String must be one of{'' if case_sensitive else ' (case insensitive)'}: {', '.join(allowed)}"

    return check


def list_of(*allowed: str, non_empty: bool = False) -> Validator:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if non_empty and not v:
            return "Empty list"
        bad = [x for x in v if x not in allowed]
        return f"String must be one of: {', '.join(allowed)}" if bad else None

    return check


# Kafka 3.9's MetadataVersion: every inter-broker protocol version (release and -IVn), oldest first.
IBP_VERSIONS = (
    "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1", "0.10.1-IV2",
    "0.10.2-IV0", "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV0", "2.0-IV1",
    "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0", "2.3-IV1", "2.4-IV0", "2.4-IV1",
    "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2", "2.8-IV0", "2.8-IV1", "3.0-IV0", "3.0-IV1",
    "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2", "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1",
    "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2", "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4",
    "3.8-IV0", "3.9-IV0", "4.0-IV0", "4.0-IV1",
)
LATEST_PRODUCTION_IBP = "3.9-IV0"
# The names MetadataVersion.fromVersionString looks up -> the position of the version they name:
# each version, and each release up to the latest production one (3.9) on its own ("0.10.0",
# "2.8", "3.9"), meaning that release's newest version (later entries overwrite earlier ones).
_VERSION_KEYS = {
    **{v.split("-")[0]: i for i, v in enumerate(IBP_VERSIONS[:IBP_VERSIONS.index(LATEST_PRODUCTION_IBP) + 1])},
    **{v: i for i, v in enumerate(IBP_VERSIONS)},
}


def metadata_version(value: str | None) -> int | None:
    """The position in IBP_VERSIONS of the version `value` names, read as Kafka's
    MetadataVersion.fromVersionString reads it: a release "0.x.y" keeps three dot-separated parts
    and any other release two, the rest is ignored ("0.10.0.0" is 0.10.0, "2.8.1" is 2.8, "2.2"
    is 2.2-IV1); unset (None) is the latest production version; None for a version Kafka does
    not know."""
    if value is None:
        return _VERSION_KEYS[LATEST_PRODUCTION_IBP]
    parts = value.split(".")
    keep = 3 if value.startswith("0.") else 2
    return _VERSION_KEYS.get(value if keep >= len(parts) else ".".join(parts[:keep]))


def ibp_at_least(value: str | None, version: str) -> bool:
    """Whether the inter-broker protocol version `value` (a valid one) is `version` or later."""
    return metadata_version(value) >= IBP_VERSIONS.index(version)  # type: ignore[operator]


def known_version(v: Any) -> str | None:
    """An inter-broker protocol version Kafka knows (metadata_version)."""
    return None if v is None or metadata_version(v) is not None else f"Version {v} is not a valid version"


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str
    default: str | None  # as a properties file spells it; None: not set
    validator: Validator | None
    doc: str

    def parse(self, text: str | None) -> Any:
        """The value of `text` as this key's type, validated; ConfigError with Kafka's message."""
        if text is None:
            return None
        value = parse_type(self.name, self.type, text)
        reason = self.validator(value) if self.validator is not None else None
        if reason is not None:
            raise ConfigError(f"Invalid value {text} for configuration {self.name}: {reason}")
        return value


def parse_type(name: str, type_: str, text: str) -> Any:
    """Kafka's ConfigDef.parseType: the trimmed text as `type_`."""
    s = text.strip()
    if type_ == BOOLEAN:
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        raise ConfigError(f"Invalid value {text} for configuration {name}: Expected value to be either true or false")
    if type_ in _INT_BITS:
        bits = _INT_BITS[type_]
        value = int(s) if re.fullmatch(r"[+-]?[0-9]+", s) else None
        if value is None or not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            raise ConfigError(f"Invalid value {text} for configuration {name}: Not a number of type {type_}")
        return value
    if type_ == DOUBLE:
        try:
            if "_" in s:  # Python's digit separators; not Java's
                raise ValueError(s)
            return float(s)
        except ValueError:
            raise ConfigError(f"Invalid value {text} for configuration {name}: Not a number of type DOUBLE") from None
    if type_ == LIST:
        return [] if not s else [x.strip() for x in s.split(",")]
    return s


def _table(keys: Iterable[ConfigKey]) -> dict[str, ConfigKey]:
    return {k.name: k for k in keys}


K = ConfigKey
_POS, _NONNEG = at_least(1), at_least(0)
_UNUSED = "Kafka's; kafkafast has no counterpart (accepted and validated, not used)."
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

BROKER_CONFIGS: dict[str, ConfigKey] = _table([
    # -- identity and listeners --
    K("node.id", INT, None, _NONNEG, "The broker's id; broker.id when unset."),
    K("broker.id", INT, "0", at_least(-1), "The broker's id (node.id takes precedence)."),
    K("listeners", LIST, "PLAINTEXT://127.0.0.1:9092", None,
      "NAME://host:port of each listener (an empty host: every interface)."),
    K("advertised.listeners", LIST, None, None, "The listeners clients are told to use; listeners when unset."),
    K("listener.security.protocol.map", LIST,
      "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", None,
      "NAME:PROTOCOL for each listener name."),
    K("inter.broker.listener.name", STRING, None, None, "The listener brokers talk to each other on."),
    K("security.inter.broker.protocol", STRING, "PLAINTEXT", one_of(*SECURITY_PROTOCOLS),
      "Security protocol between brokers when inter.broker.listener.name is unset."),
    K("cluster.id", STRING, None, None, "The cluster id of a single node (cluster mode: ZooKeeper's)."),
    K("broker.rack", STRING, None, None, "The broker's rack, for rack-aware replica placement."),
    K("num.workers", INT, None, _NONNEG, "Worker processes (--workers; 0: one process; unset: one per CPU)."),
    # -- log dirs and logs --
    K("log.dirs", LIST, None, None, "Directories holding the partition logs; log.dir when unset."),
    K("log.dir", STRING, "/tmp/kafka-logs", None, "The log directory when log.dirs is unset."),
    K("num.partitions", INT, "1", _POS, "Partitions of an auto-created topic."),
    K("default.replication.factor", INT, "1", _POS, "Replication factor of an auto-created topic."),
    K("auto.create.topics.enable", BOOLEAN, "true", None, "Create a topic when a client asks for a missing one."),
    K("delete.topic.enable", BOOLEAN, "true", None, "Allow DeleteTopics."),
    K("message.max.bytes", INT, "1048588", _NONNEG, "Largest record batch accepted (topic: max.message.bytes)."),
    K("message.max.decompressed.bytes", LONG, None, _POS,
      "Bound on the records of one compressed batch once decompressed; unset: 64 x the batch bound."),
    K("socket.request.max.bytes", INT, "104857600", _POS, "Largest request accepted."),
    K("log.segment.bytes", INT, "1073741824", at_least(14), "Size of a log segment before a new one is rolled."),
    K("log.roll.ms", LONG, None, _POS, "Time before a new segment is rolled; log.roll.hours when unset."),
    K("log.roll.hours", INT, "168", _POS, "Time before a new segment is rolled, in hours."),
    K("log.retention.ms", LONG, None, at_least(-1), "Time a segment is kept (-1: forever); minutes/hours when unset."),
    K("log.retention.minutes", INT, None, at_least(-1), "Retention in minutes when log.retention.ms is unset."),
    K("log.retention.hours", INT, "168", at_least(-1), "Retention in hours when ms and minutes are unset."),
    K("log.retention.bytes", LONG, "-1", None, "Size a partition's log is trimmed to (-1: no limit)."),
    K("log.retention.check.interval.ms", LONG, "300000", _POS, "How often retention is applied."),
    K("log.flush.interval.messages", LONG, str(LONG_MAX), _POS, "Messages appended before a log is flushed."),
    K("log.flush.interval.ms", LONG, None, _NONNEG, "Time before a log is flushed; the scheduler interval when unset."),
    K("log.flush.scheduler.interval.ms", LONG, str(LONG_MAX), None, "How often logs are checked for a time flush."),
    K("log.flush.offset.checkpoint.interval.ms", INT, "60000", _POS, "How often the recovery points are written."),
    K("log.flush.start.offset.checkpoint.interval.ms", INT, "60000", _POS,
      "How often the log start offsets are written."),
    K("log.index.interval.bytes", INT, "4096", _POS, "Bytes appended between two offset index entries."),
    K("log.index.size.max.bytes", INT, "10485760", at_least(4), "Largest offset index of a segment."),
    K("log.cleanup.policy", LIST, "delete", list_of("compact", "delete", non_empty=True),
      "delete, compact or both: what happens to old segments."),
    K("log.message.timestamp.type", STRING, "CreateTime", one_of("CreateTime", "LogAppendTime"),
      "The timestamp a record keeps: the producer's or the broker's append time."),
    K("log.message.timestamp.before.max.ms", LONG, str(LONG_MAX), _NONNEG,
      "How far before the broker's clock a CreateTime record's timestamp may be (unset: the difference)."),
    K("log.message.timestamp.after.max.ms", LONG, str(LONG_MAX), _NONNEG,
      "How far after the broker's clock a CreateTime record's timestamp may be (unset: the difference)."),
    K("log.message.timestamp.difference.max.ms", LONG, str(LONG_MAX), _NONNEG,
      "Deprecated: both of the above, where they are unset."),
    K("log.message.format.version", STRING, "3.0-IV1", known_version,
      "Deprecated since Kafka 3.0: accepted and ignored (the log holds v2 batches)."),
    K("log.message.downconversion.enable", BOOLEAN, "true", None, "Convert records for old fetchers."),
    K("log.segment.delete.delay.ms", LONG, "60000", _NONNEG, "Time before a deleted segment's files go."),
    K("min.insync.replicas", INT, "1", _POS, "In-sync replicas an acks=all produce needs."),
    K("compression.type", STRING, "producer", one_of(*COMPRESSION_TYPES),
      "The compression a topic's batches are stored with (producer: as they came)."),
    # -- log cleaner --
    K("log.cleaner.enable", BOOLEAN, "true", None, "Run the log cleaner (compacted topics)."),
    K("log.cleaner.delete.retention.ms", LONG, "86400000", _NONNEG, "Time a tombstone is kept after cleaning."),
    K("log.cleaner.min.cleanable.ratio", DOUBLE, "0.5", between(0, 1), "Dirty ratio a log is cleaned at."),
    K("log.cleaner.min.compaction.lag.ms", LONG, "0", _NONNEG, "Age before a record may be compacted."),
    K("log.cleaner.backoff.ms", LONG, "15000", _NONNEG, "Sleep of the cleaner when nothing is to clean."),
    K("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308", None,
      "The cleaner's I/O rate (the default: unthrottled)."),
    K("log.cleaner.dedupe.buffer.size", LONG, "134217728", None, "Bound on the keys of one cleaning."),
    # -- offsets and groups --
    K("offsets.topic.num.partitions", INT, "50", _POS, "Partitions of __consumer_offsets."),
    K("offsets.topic.replication.factor", SHORT, "1", _POS, "Replication factor of __consumer_offsets."),
    K("offsets.topic.segment.bytes", INT, "104857600", _POS, "Segment size of __consumer_offsets."),
    K("offsets.retention.minutes", INT, "10080", _POS, "Time committed offsets of an empty group are kept."),
    K("offsets.retention.check.interval.ms", LONG, "600000", _POS, "How often stale offsets are removed."),
    K("offsets.load.buffer.size", INT, "5242880", _POS, "Read size when the offsets are loaded."),
    K("offsets.commit.timeout.ms", INT, "5000", _POS, "Time an offset commit waits for its write."),
    K("offset.metadata.max.bytes", INT, "4096", None, "Largest metadata string of an offset commit."),
    K("inter.broker.protocol.version", STRING, LATEST_PRODUCTION_IBP, known_version,
      "Kafka's inter-broker protocol version: the versions of the __consumer_offsets records "
      "written (below 2.3 a group's without group.instance.id, and static members are refused; below 2.1 "
      "offsets without a leader epoch), for tools that read that topic; below 0.11.0 refused (batches v2)."),
    K("group.initial.rebalance.delay.ms", INT, "3000", None, "Wait for more members before the first rebalance."),
    K("group.min.session.timeout.ms", INT, "6000", None, "Smallest session timeout a member may ask for."),
    K("group.max.session.timeout.ms", INT, "1800000", None, "Largest session timeout a member may ask for."),
    K("group.max.size", INT, str(INT_MAX), _POS, "Members a classic group may have."),
    K("group.coordinator.rebalance.protocols", LIST, "classic,consumer", list_of("classic", "consumer", non_empty=True),
      "Group protocols served (consumer: KIP-848)."),
    K("group.consumer.session.timeout.ms", INT, "45000", _POS, "KIP-848 groups: session timeout."),
    K("group.consumer.min.session.timeout.ms", INT, "45000", _POS, "KIP-848 groups: smallest session timeout."),
    K("group.consumer.max.session.timeout.ms", INT, "60000", _POS, "KIP-848 groups: largest session timeout."),
    K("group.consumer.heartbeat.interval.ms", INT, "5000", _POS, "KIP-848 groups: heartbeat interval."),
    K("group.consumer.min.heartbeat.interval.ms", INT, "5000", _POS, "KIP-848 groups: smallest heartbeat interval."),
    K("group.consumer.max.heartbeat.interval.ms", INT, "15000", _POS, "KIP-848 groups: largest heartbeat interval."),
    K("group.consumer.max.size", INT, str(INT_MAX), _POS, "KIP-848 groups: members a group may have."),
    K("group.consumer.assignors", LIST, "uniform,range", None, "KIP-848 groups: server-side assignors."),
    K("group.consumer.migration.policy", STRING, "bidirectional",
      one_of("disabled", "upgrade", "downgrade", "bidirectional", case_sensitive=False),
      "KIP-848 groups: conversions between classic and consumer groups."),
    # -- share groups (KIP-932; Kafka 4.2's names and defaults) --
    K("group.share.session.timeout.ms", INT, "45000", _POS, "Share group member session timeout."),
    K("group.share.min.session.timeout.ms", INT, "45000", _POS, "Lowest session timeout a share group may set."),
    K("group.share.max.session.timeout.ms", INT, "60000", _POS, "Highest session timeout a share group may set."),
    K("group.share.heartbeat.interval.ms", INT, "5000", _POS, "Share group heartbeat interval."),
    K("group.share.min.heartbeat.interval.ms", INT, "5000", _POS, "Lowest heartbeat interval a share group may set."),
    K("group.share.max.heartbeat.interval.ms", INT, "15000", _POS, "Highest heartbeat interval a share group may set."),
    K("group.share.max.size", INT, "200", _POS, "Members of one share group at most."),
    K("group.share.record.lock.duration.ms", INT, "30000", _POS, "How long an acquired record stays locked."),
    K("group.share.min.record.lock.duration.ms", INT, "15000", _POS, "Lowest lock duration a share group may set."),
    K("group.share.max.record.lock.duration.ms", INT, "60000", _POS, "Highest lock duration a share group may set."),
    K("group.share.partition.max.record.locks", INT, "2000", _POS, "Records of one share-partition acquired at once."),
    K("group.share.delivery.count.limit", INT, "5", _POS, "Deliveries of a record before it is archived."),
    K("group.share.min.delivery.count.limit", INT, "2", _POS, "Lowest delivery limit a share group may set."),
    K("group.share.max.delivery.count.limit", INT, "10", _POS, "Highest delivery limit a share group may set."),
    K("share.coordinator.state.topic.num.partitions", INT, "50", _POS, "Partitions of __share_group_state."),
    K("share.coordinator.state.topic.replication.factor", SHORT, "3", _POS,
      "Replication factor of __share_group_state."),
    K("share.coordinator.state.topic.min.isr", SHORT, "2", _POS, "min.insync.replicas of __share_group_state."),
    K("share.coordinator.snapshot.update.records.per.snapshot", INT, "500", _POS,
      "ShareUpdate records between two ShareSnapshot records of a share-partition."),
    # -- transactions and producer ids --
    K("transactional.id.expiration.ms", INT, "604800000", _POS, "Time an idle transactional id is kept."),
    K("transaction.state.log.num.partitions", INT, "50", _POS, "Partitions of __transaction_state."),
    K("transaction.state.log.replication.factor", SHORT, "1", _POS, "Replication factor of __transaction_state."),
    K("transaction.state.log.min.isr", INT, "1", _POS, "min.insync.replicas of __transaction_state."),
    K("transaction.state.log.segment.bytes", INT, "104857600", _POS, "Segment size of __transaction_state."),
    K("transaction.max.timeout.ms", INT, "900000", _POS, "Largest transaction timeout a producer may ask for."),
    K("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000", _POS,
      "How often timed-out transactions are aborted."),
    K("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000", _POS,
      "How often expired transactional ids are removed."),
    K("producer.id.expiration.ms", INT, "86400000", _NONNEG, "Time an idle producer id's state is kept."),
    # -- ZooKeeper and replication (cluster mode) --
    K("zookeeper.connect", STRING, None, None, "host:port[,host:port][/chroot]: cluster mode when set."),
    K("zookeeper.session.timeout.ms", INT, "18000", _POS, "ZooKeeper session timeout."),
    K("zookeeper.connection.timeout.ms", INT, None, _POS,
      "Time allowed to connect to ZooKeeper; the session timeout when unset."),
    K("broker.id.generation.enable", BOOLEAN, "true", None, "Generate a broker id when none is set."),
    K("reserved.broker.max.id", INT, "1000", _NONNEG, "Largest configured broker id; generated ids are above."),
    K("replica.lag.time.max.ms", LONG, "30000", _POS, "Time a follower may lag before it leaves the ISR."),
    K("replica.fetch.wait.max.ms", INT, "500", _NONNEG, "Longest wait of a follower fetch."),
    K("replica.fetch.min.bytes", INT, "1", _POS, "Bytes a follower fetch waits for."),
    K("replica.fetch.max.bytes", INT, "1048576", _NONNEG, "Bytes fetched per partition by a follower."),
    K("replica.fetch.response.max.bytes", INT, "10485760", _NONNEG, "Bytes of one follower fetch response."),
    K("replica.fetch.backoff.ms", INT, "1000", _NONNEG,
      "Longest wait before a follower fetches a partition again after an error (50 ms after "
      "the first error in a row, doubling with each next one)."),
    K("replica.socket.timeout.ms", INT, "30000", None, "Socket timeout of follower fetches."),
    K("num.replica.fetchers", INT, "1", _POS, "Fetcher connections per source broker."),
    K("replica.selector.class", STRING, None, one_of(RACK_AWARE_REPLICA_SELECTOR),
      "Where a leader sends consumers that name their client.rack (KIP-392): unset, to itself; "
      "RackAwareReplicaSelector, to an in-sync replica in the consumer's rack."),
    K("unclean.leader.election.enable", BOOLEAN, "false", None, "Elect an out-of-sync replica when no ISR is left."),
    K("controller.socket.timeout.ms", INT, "30000", None, "Socket timeout of controller requests."),
    K("controlled.shutdown.enable", BOOLEAN, "true", None, "Move leaderships away before stopping."),
    K("controlled.shutdown.max.retries", INT, "3", None, "Attempts of a controlled shutdown."),
    K("controlled.shutdown.retry.backoff.ms", LONG, "5000", None, "Sleep between controlled-shutdown attempts."),
    K("auto.leader.rebalance.enable", BOOLEAN, "true", None, "Move leaderships back to preferred replicas."),
    K("leader.imbalance.per.broker.percentage", INT, "10", None, "Imbalance a preferred election is run at."),
    K("leader.imbalance.check.interval.seconds", LONG, "300", _POS, "How often the imbalance is checked."),
    K("leader.replication.throttled.rate", LONG, str(LONG_MAX), _NONNEG, "Throttle of leaders' replication, B/s."),
    K("follower.replication.throttled.rate", LONG, str(LONG_MAX), _NONNEG, "Throttle of followers' replication, B/s."),
    # -- security --
    K("ssl.keystore.type", STRING, "PEM", None, "Key store format (PEM only)."),
    K("ssl.keystore.location", STRING, None, None, "Key store file: private key and certificate chain."),
    K("ssl.keystore.password", PASSWORD, None, None, "Password of the key store."),
    K("ssl.keystore.key", PASSWORD, None, None, "The private key in PEM, inline."),
    K("ssl.keystore.certificate.chain", PASSWORD, None, None, "The certificate chain in PEM, inline."),
    K("ssl.key.password", PASSWORD, None, None, "Password of the private key."),
    K("ssl.truststore.type", STRING, "PEM", None, "Trust store format (PEM only)."),
    K("ssl.truststore.location", STRING, None, None, "Trust store file (CA certificates)."),
    K("ssl.truststore.password", PASSWORD, None, None, "Password of the trust store."),
    K("ssl.truststore.certificates", PASSWORD, None, None, "The trusted certificates in PEM, inline."),
    K("ssl.client.auth", STRING, "none", one_of("required", "requested", "none"), "Client certificates: asked for?"),
    K("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", None, "TLS versions served."),
    K("ssl.cipher.suites", LIST, None, None, "Cipher suites served (unset: the defaults)."),
    K("ssl.endpoint.identification.algorithm", STRING, "https", None, "Host name verification of peers."),
    K("ssl.principal.mapping.rules", STRING, "DEFAULT", None, "Rules mapping a certificate subject to a principal."),
    K("ssl.allow.dn.changes", BOOLEAN, "false", None, "May a dynamic key store change the certificate's subject."),
    K("ssl.allow.san.changes", BOOLEAN, "false", None, "May a dynamic key store change the subject alt names."),
    K("sasl.enabled.mechanisms", LIST, "GSSAPI", None, "SASL mechanisms served."),
    K("sasl.jaas.config", PASSWORD, None, None, "JAAS login configuration."),
    K("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", None, "SASL mechanism between brokers."),
    K("connections.max.reauth.ms", LONG, "0", None, "Session lifetime before re-authentication (0: none)."),
    K("connection.failed.authentication.delay.ms", INT, "100", _NONNEG, "Delay before a failed login is closed."),
    K("authorizer.class.name", STRING, "", None, "The authorizer (empty: no ACLs checked)."),
    K("super.users", STRING, None, None, "Principals allowed everything, ;-separated."),
    K("allow.everyone.if.no.acl.found", BOOLEAN, "false", None, "Allow access to a resource without ACLs."),
    K("max.connections", INT, str(INT_MAX), _NONNEG, "Connections of the broker."),
    K("max.connections.per.ip", INT, str(INT_MAX), _NONNEG, "Connections from one address."),
    K("max.connections.per.ip.overrides", STRING, "", None, "host:count overrides of max.connections.per.ip."),
    K("connections.max.idle.ms", LONG, "600000", None, "Time an idle connection is kept."),
    K("queued.max.requests", INT, "500", _POS, "Requests of one connection read ahead."),
    K("max.incremental.fetch.session.cache.slots", INT, "1000", _NONNEG,
      "Incremental fetch sessions (KIP-227) the broker keeps (split over its workers)."),
    K("queued.max.request.bytes", LONG, "-1", None, "Bytes of requests read ahead (-1: no bound)."),
    K("quota.window.num", INT, "11", _POS, "Samples a client quota is measured over."),
    K("quota.window.size.seconds", INT, "1", _POS, "Length of one quota sample."),
    # -- kafkafast's own --
    K("kafkafast.produce.shared.append", BOOLEAN, "true", None,
      "Workers append produces for partitions other workers own through shared memory."),
    K("kafkafast.produce.shared.append.cluster", BOOLEAN, "true", None, "The same in cluster mode."),
    K("kafkafast.replica.fetch.hw.delay.ms", INT, "20", _NONNEG,
      "Longest a leader holds a follower Fetch whose answer carries only a new high watermark, "
      "for records to send it with (0: at once)."),
    K("kafkafast.max.pending.connections", INT, "512", _POS, "Connections in TLS handshake or SASL login."),
    K("kafkafast.connection.setup.timeout.ms", INT, "10000", _POS, "Time a connection has to log in."),
    K("kafkafast.shm.ip.entries", INT, "8192", _POS, "Addresses the shared connection counters hold."),
    K("kafkafast.shm.quota.entities", INT, "1024", _POS, "Quota entities the shared counters hold."),
    K("kafkafast.shm.partition.slots", INT, "16384", _POS, "Partitions the shared partition table holds."),
    K("kafkafast.as.kafka", STRING, None, None, "Serve only the API versions Kafka X.Y served (--as-kafka)."),
    K("kafkafast.testing.control", STRING, None, None, "Directory of the test hooks (tests only)."),
    K("metrics.port", INT, None, between(-1, 65535), "Port of the Prometheus /metrics endpoint (unset, 0, -1: off)."),
    K("metrics.host", STRING, "0.0.0.0", None, "Address of the /metrics endpoint."),
    # -- Kafka's, without a counterpart here --
    *(K(name, type_, default, check, _UNUSED) for name, type_, default, check in (
        ("num.network.threads", INT, "3", _POS), ("num.io.threads", INT, "8", _POS),
        ("background.threads", INT, "10", _POS), ("num.recovery.threads.per.data.dir", INT, "2", _POS),
        ("socket.send.buffer.bytes", INT, "102400", None), ("socket.receive.buffer.bytes", INT, "102400", None),
        ("socket.listen.backlog.size", INT, "50", _POS),
        ("log.cleaner.threads", INT, "1", _NONNEG), ("log.cleaner.io.buffer.size", INT, "524288", _NONNEG),
        ("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", None),
        ("log.preallocate", BOOLEAN, "false", None),
        ("replica.high.watermark.checkpoint.interval.ms", LONG, "5000", None),
        ("zookeeper.set.acl", BOOLEAN, "false", None), ("zookeeper.max.in.flight.requests", INT, "10", _POS),
        ("metric.reporters", LIST, "", None), ("request.timeout.ms", INT, "30000", None))),
])

# Prefixed keys Kafka accepts per listener (listener.name.<listener>.<config>) or per mechanism.
KNOWN_PREFIXES = ("listener.name.",)


def is_known(name: str) -> bool:
    return name in BROKER_CONFIGS or name.startswith(KNOWN_PREFIXES)


def help_text() -> str:
    """The table as `kafkafast broker --help-configs` prints it."""
    lines = []
    for k in sorted(BROKER_CONFIGS.values(), key=lambda k: k.name):
        default = "null" if k.default is None else (k.default or '""')
        lines.append(f"{k.name}\n    {k.doc}\n    Type: {k.type.lower()}  Default: {default}")
    return "\n".join(lines)
