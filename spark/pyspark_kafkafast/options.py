"""The options of the `kafkafast` source and sink, parsed once on the driver.

Names and meanings follow Spark's built-in Kafka source (Structured Streaming + Kafka
integration guide), so a job written for `format("kafka")` runs unchanged with
`format("kafkafast")`. Option names are case-insensitive, as in Spark.

Offset JSON uses Spark's layout: `{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}`,
where -2 means earliest and -1 latest; by-timestamp JSON maps partitions to epoch
milliseconds: `{"topicA": {"0": 1700000000000}}`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkafast.security.client import ClientSecurity

EARLIEST = -2
LATEST = -1
# Rows per Arrow batch a task hands to Spark (option maxRecordsPerBatch); Spark's own
# spark.sql.execution.arrow.maxRecordsPerBatch has the same default.
DEFAULT_MAX_RECORDS_PER_BATCH = 10_000

TopicPartition = tuple[str, int]


class KafkaFastOptionError(ValueError):
    """An option is missing, malformed, or not allowed for this kind of query."""


# ---------------------------------------------------------------- what to read
@dataclass(frozen=True)
class Assign:
    """`assign`: exactly these partitions."""

    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Subscribe:
    """`subscribe`: every partition of these topics, re-resolved on each planning."""

    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    """`subscribePattern`: every partition of every topic whose whole name matches."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


Subscription = Assign | Subscribe | SubscribePattern


# ---------------------------------------------------------------- where to start / stop
@dataclass(frozen=True)
class EarliestOffsets:
    pass


@dataclass(frozen=True)
class LatestOffsets:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """Per-partition offsets; -2 earliest, -1 latest. Must name every subscribed partition."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class SpecificTimestamps:
    """Per-partition timestamps: the first offset whose timestamp is >= the given one."""

    timestamps: Mapping[TopicPartition, int]
    no_match_latest: bool = False


@dataclass(frozen=True)
class GlobalTimestamp:
    """One timestamp for every partition."""

    timestamp: int
    no_match_latest: bool = False


OffsetSpec = EarliestOffsets | LatestOffsets | SpecificOffsets | SpecificTimestamps | GlobalTimestamp


# ---------------------------------------------------------------- parsed options
@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    fetch_max_bytes: int = 8 * 1024 * 1024
    max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH
    kafka_params: Mapping[str, str] = field(default_factory=dict)
    # fetchOffset.numRetries / fetchOffset.retryIntervalMs: attempts of each planning call
    fetch_offset_attempts: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    # kafka.request.timeout.ms: the bound of each request planning makes
    request_timeout_ms: int = 30000
    # kafkaConsumer.pollTimeoutMs: how long a task waits for records of its range to arrive
    poll_timeout_ms: int = 60000
    # shareGroup: streaming through this share group (KIP-932) instead of offset ranges of the log
    share_group: str | None = None

    @property
    def security(self) -> ClientSecurity:
        return client_security(self.kafka_params)


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    acks: str = "all"
    compression: str = "none"
    linger_ms: int = 5
    batch_size: int = 1024 * 1024
    kafka_params: Mapping[str, str] = field(default_factory=dict)
    # exactlyOnce=true: each task writes in a Kafka transaction that the driver commits once
    # every task of the micro-batch succeeded (spark/README.md, "Exactly-once writes").
    exactly_once: bool = False
    transactional_id_prefix: str = "kafkafast-spark"
    transaction_timeout_ms: int = 900000

    @property
    def security(self) -> ClientSecurity:
        return client_security(self.kafka_params)


# Kafka consumer settings the source decides itself; Spark rejects them too.
_UNSUPPORTED_SOURCE_PARAMS = {
    "auto.offset.reset": "Use startingOffsets instead",
    "key.deserializer": "Keys are always read as binary",
    "value.deserializer": "Values are always read as binary",
    "enable.auto.commit": "The source never commits offsets to Kafka",
    "interceptor.classes": "Not supported",
}
_UNSUPPORTED_SINK_PARAMS = {
    "key.serializer": "Cast the key column to string or binary",
    "value.serializer": "Cast the value column to string or binary",
}

# Every option the source and the sink read (lower case); any other one is refused by name, so
# nothing a job sets is accepted and then left unused. `path` and `checkpointLocation` are
# Spark's own (DataFrameReader.load(path), DataStreamWriter's checkpoint) and mean nothing here.
_SPARK_OWN = {"path", "checkpointlocation"}
_SOURCE_OPTIONS = _SPARK_OWN | {
    "kafka.bootstrap.servers", "assign", "subscribe", "subscribepattern", "startingoffsets", "endingoffsets",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestampstrategy", "failondataloss", "minpartitions", "maxoffsetspertrigger",
    "minoffsetspertrigger", "maxtriggerdelay", "includeheaders", "maxrecordsperbatch", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "kafkaconsumer.polltimeoutms", "sharegroup"}
_SINK_OPTIONS = _SPARK_OWN | {"kafka.bootstrap.servers", "topic", "includeheaders", "exactlyonce",
                              "transactionalidprefix"}
# kafka.* settings the source / sink pass on; security.protocol, ssl.* and sasl.* go to
# kafkafast.security.client.ClientSecurity, which refuses what it cannot honour.
_SOURCE_KAFKA_PARAMS = {"bootstrap.servers", "isolation.level", "request.timeout.ms", "max.partition.fetch.bytes"}
_SINK_KAFKA_PARAMS = {"bootstrap.servers", "acks", "compression.type", "linger.ms", "batch.size",
                      "transaction.timeout.ms"}
_NO_GROUP = ("the kafkafast source never joins a consumer group nor commits offsets (progress is kept in "
             "Spark's checkpoint, each task reads its offset range from the partition leader), so a group id "
             "would have no effect; remove the option")
_REFUSED = {
    "kafka.group.id": _NO_GROUP,
    "groupidprefix": _NO_GROUP,
}


def client_security(kafka_params: Mapping[str, str]) -> ClientSecurity:
    """The TLS context and SASL login of the `kafka.security.protocol`, `kafka.ssl.*` and
    `kafka.sasl.*` options (built where a connection is made: it does not pickle). A setting
    it cannot honour is a KafkaFastOptionError naming the option."""
    props = {k: v for k, v in kafka_params.items() if k.split(".", 1)[0] in ("security", "ssl", "sasl")}
    try:
        return ClientSecurity(props)
    except (ValueError, OSError) as exc:
        # ClientSecurity's messages begin with the setting they are about
        raise KafkaFastOptionError(f"option kafka.{exc}" if str(exc).startswith(("ssl.", "sasl.", "security."))
                                   else f"options kafka.security.protocol, kafka.ssl.*, kafka.sasl.*: {exc}") from None


def _check_known(options: Mapping[str, str], known: set[str], kafka_known: set[str], refused_later: Mapping[str, str],
                 what: str) -> None:
    """Refuses, by its given name, every option not in `known` and every `kafka.*` one not in
    `kafka_known` (nor a security one); those in `refused_later` are refused by the caller
    with Spark's own reason."""
    for given in sorted(str(k) for k in options):
        name = given.lower()
        if name in _REFUSED:
            raise KafkaFastOptionError(f"option {given} is not supported: {_REFUSED[name]}")
        if name.startswith("kafka."):
            key = name[len("kafka."):]
            if key in kafka_known or key.split(".", 1)[0] in ("security", "ssl", "sasl"):
                continue
            if key in refused_later:
                continue
            raise KafkaFastOptionError(f"option {given} is not supported by the kafkafast {what} (it passes on "
                                       f"kafka.{', kafka.'.join(sorted(kafka_known))} and kafka.security.protocol, "
                                       "kafka.ssl.*, kafka.sasl.*)")
        elif name not in known:
            raise KafkaFastOptionError(f"unknown option {given} for the kafkafast {what}")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _kafka_params(opts: Mapping[str, str]) -> dict[str, str]:
    return {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaFastOptionError(f"option {name} must be true or false, got {raw!r}")


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise KafkaFastOptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaFastOptionError(f"option {name} must be positive, got {value}")
    return value


def _non_negative_int(opts: Mapping[str, str], name: str, default: int) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if not raw.strip().isdigit():
        raise KafkaFastOptionError(f"option {name} must be a non-negative integer, got {raw!r}")
    return int(raw)


def _duration_ms(raw: str) -> int:
    """Spark time strings: '15m', '30s', '500ms', '2h', or plain milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if not m:
        raise KafkaFastOptionError(f"not a duration: {raw!r}")
    scale = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
    return int(m.group(1)) * scale[m.group(2)]


def _bootstrap(opts: Mapping[str, str]) -> str:
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise KafkaFastOptionError("option kafka.bootstrap.servers must be specified")
    return bootstrap


def parse_partition_map(raw: str, what: str) -> dict[TopicPartition, int]:
    """`{"t": {"0": 5}}` -> `{("t", 0): 5}`."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KafkaFastOptionError(f"{what}: expected JSON like {{\"topic\":{{\"0\":23}}}}, got {raw!r}") from exc
    if not isinstance(doc, dict):
        raise KafkaFastOptionError(f"{what}: expected a JSON object, got {raw!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise KafkaFastOptionError(f"{what}: expected an object of partitions for topic {topic!r}")
        for p, value in parts.items():
            try:
                out[(topic, int(p))] = int(value)
            except (TypeError, ValueError):
                raise KafkaFastOptionError(f"{what}: bad entry {topic}[{p!r}] = {value!r}") from None
    return out


def parse_assign(raw: str) -> tuple[TopicPartition, ...]:
    """`{"topicA":[0,1],"topicB":[2,4]}` -> ((topicA, 0), (topicA, 1), ...)."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KafkaFastOptionError(f"assign: expected JSON like {{\"topicA\":[0,1]}}, got {raw!r}") from exc
    if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
        raise KafkaFastOptionError(f"assign: expected JSON like {{\"topicA\":[0,1]}}, got {raw!r}")
    return tuple((t, int(p)) for t, parts in doc.items() for p in parts)


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
    if len(given) != 1:
        raise KafkaFastOptionError(
            "exactly one of the options assign, subscribe, subscribePattern must be specified"
            + (f" (got {', '.join(given)})" if given else ""))
    kind = given[0]
    raw = opts[kind].strip()
    if kind == "assign":
        parts = parse_assign(raw)
        if not parts:
            raise KafkaFastOptionError("assign: no topic-partitions specified")
        return Assign(parts)
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise KafkaFastOptionError("subscribe: no topics specified")
        return Subscribe(topics)
    if not raw:
        raise KafkaFastOptionError("subscribePattern: pattern is empty")
    try:
        re.compile(raw)
    except re.error as exc:
        raise KafkaFastOptionError(f"subscribePattern: bad pattern {raw!r}: {exc}") from None
    return SubscribePattern(raw)


def _offset_spec(opts: Mapping[str, str], which: str, default: OffsetSpec) -> OffsetSpec:
    """Spark's precedence: <which>Timestamp, then <which>OffsetsByTimestamp, then <which>Offsets."""
    no_match_latest = False
    if which == "starting":
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise KafkaFastOptionError(
                f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
        no_match_latest = strategy == "latest"
    else:
        no_match_latest = True  # an ending timestamp past the data means "up to latest"
    if f"{which}timestamp" in opts:
        raw = opts[f"{which}timestamp"]
        try:
            return GlobalTimestamp(int(raw), no_match_latest)
        except ValueError:
            raise KafkaFastOptionError(f"{which}Timestamp must be epoch milliseconds, got {raw!r}") from None
    if f"{which}offsetsbytimestamp" in opts:
        return SpecificTimestamps(parse_partition_map(opts[f"{which}offsetsbytimestamp"],
                                                      f"{which}OffsetsByTimestamp"), no_match_latest)
    raw = opts.get(f"{which}offsets")
    if raw is None:
        return default
    word = raw.strip().lower()
    if word == "earliest":
        return EarliestOffsets()
    if word == "latest":
        return LatestOffsets()
    return SpecificOffsets(parse_partition_map(raw, f"{which}Offsets"))


# Options that choose where reading starts and stops, or pace micro-batches by the log's backlog:
# with shareGroup the share group's state decides which records a micro-batch gets.
_NOT_WITH_SHARE_GROUP = {
    "assign": "a share group subscribes to whole topics; use subscribe",
    "subscribepattern": "a share group subscribes to topic names; use subscribe",
    "startingoffsets": "where a share group starts is its share.auto.offset.reset group config (or "
                       "kafkafast share-groups --reset-offsets)",
    "startingoffsetsbytimestamp": "where a share group starts is its share.auto.offset.reset group config",
    "startingtimestamp": "where a share group starts is its share.auto.offset.reset group config",
    "startingoffsetsbytimestampstrategy": "where a share group starts is its share.auto.offset.reset group config",
    "minoffsetspertrigger": "a share group's backlog is not known before its records are acquired",
    "maxtriggerdelay": "a share group's backlog is not known before its records are acquired",
    "kafka.isolation.level": "a share group reads with its share.isolation.level group config",
}


def _share_group(opts: Mapping[str, str], streaming: bool) -> str | None:
    """The shareGroup option, refused for batch reads and beside options it makes meaningless."""
    if "sharegroup" not in opts:
        return None
    group = opts["sharegroup"].strip()
    if not group:
        raise KafkaFastOptionError("option shareGroup must name a share group")
    if not streaming:
        raise KafkaFastOptionError("option shareGroup is for streaming reads only: a batch read has no commit "
                                   "at which to acknowledge the records it acquired; use readStream (with "
                                   "trigger(availableNow=True) to read what the group has and stop)")
    for name, why in _NOT_WITH_SHARE_GROUP.items():
        if name in opts:
            raise KafkaFastOptionError(f"option {name} cannot be used with shareGroup: {why}")
    return group


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = _lower(options)
    _check_known(options, _SOURCE_OPTIONS, _SOURCE_KAFKA_PARAMS, _UNSUPPORTED_SOURCE_PARAMS, "source")
    share_group = _share_group(opts, streaming)
    kafka_params = _kafka_params(opts)
    client_security(kafka_params)
    isolation = kafka_params.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise KafkaFastOptionError(f"kafka.isolation.level must be read_uncommitted or read_committed, "
                                   f"got {isolation!r}")
    for name, why in _UNSUPPORTED_SOURCE_PARAMS.items():
        if name in kafka_params:
            raise KafkaFastOptionError(f"Kafka option '{name}' is not supported: {why}")
    starting = _offset_spec(opts, "starting", LatestOffsets() if streaming else EarliestOffsets())
    ending = _offset_spec(opts, "ending", LatestOffsets())
    if streaming:
        for name in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"):
            if name in opts:
                raise KafkaFastOptionError(f"option {name} is not valid in streaming queries")
    else:
        if isinstance(starting, LatestOffsets):
            raise KafkaFastOptionError("starting offset can't be latest for batch queries on Kafka")
        if isinstance(starting, SpecificOffsets):
            for tp, off in starting.offsets.items():
                if off == LATEST:
                    raise KafkaFastOptionError(f"startingOffsets for {tp} can't be latest for batch queries")
        if isinstance(ending, EarliestOffsets):
            raise KafkaFastOptionError("ending offset can't be earliest for batch queries on Kafka")
        if isinstance(ending, SpecificOffsets):
            for tp, off in ending.offsets.items():
                if off == EARLIEST:
                    raise KafkaFastOptionError(f"endingOffsets for {tp} can't be earliest for batch queries")
    fetch_max_bytes = kafka_params.get("max.partition.fetch.bytes")
    delay = opts.get("maxtriggerdelay")
    return SourceOptions(
        bootstrap=_bootstrap(opts),
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive_int(opts, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(delay) if delay is not None else 15 * 60 * 1000,
        fetch_max_bytes=int(fetch_max_bytes) if fetch_max_bytes else 8 * 1024 * 1024,
        max_records_per_batch=_positive_int(opts, "maxRecordsPerBatch") or DEFAULT_MAX_RECORDS_PER_BATCH,
        kafka_params=kafka_params,
        fetch_offset_attempts=_positive_int(opts, "fetchOffset.numRetries") or 3,
        fetch_offset_retry_interval_ms=_non_negative_int(opts, "fetchOffset.retryIntervalMs", 1000),
        request_timeout_ms=_positive_int(opts, "kafka.request.timeout.ms") or 30000,
        poll_timeout_ms=(_positive_int(opts, "kafkaConsumer.pollTimeoutMs")
                         or _positive_int(opts, "kafka.request.timeout.ms") or 60000),
        share_group=share_group,
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    _check_known(options, _SINK_OPTIONS, _SINK_KAFKA_PARAMS,
                 {**_UNSUPPORTED_SINK_PARAMS, "transactional.id": ""}, "sink")
    kafka_params = _kafka_params(opts)
    client_security(kafka_params)
    for name, why in _UNSUPPORTED_SINK_PARAMS.items():
        if name in kafka_params:
            raise KafkaFastOptionError(f"Kafka option '{name}' is not supported: {why}")
    acks = kafka_params.get("acks", "all").strip().lower()
    if acks not in ("all", "-1", "0", "1"):
        raise KafkaFastOptionError(f"kafka.acks must be all, -1, 0 or 1, got {acks!r}")
    compression = kafka_params.get("compression.type", "none").strip().lower()
    if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise KafkaFastOptionError(f"kafka.compression.type must be none, gzip, snappy, lz4 or zstd, got {compression!r}")
    topic = opts.get("topic")
    exactly_once = opts.get("exactlyonce", "false").strip().lower()
    if exactly_once not in ("true", "false"):
        raise KafkaFastOptionError(f"exactlyOnce must be true or false, got {exactly_once!r}")
    exactly_once = exactly_once == "true"
    if exactly_once and acks not in ("all", "-1"):
        raise KafkaFastOptionError("exactlyOnce=true needs kafka.acks=all (a transactional producer is idempotent)")
    if "transactional.id" in kafka_params:
        raise KafkaFastOptionError("Kafka option 'transactional.id' is not supported: with exactlyOnce=true each task "
                                   "derives its own from transactionalIdPrefix, the query id and the partition id")
    return SinkOptions(
        bootstrap=_bootstrap(opts),
        topic=topic.strip() if topic and topic.strip() else None,
        acks=acks,
        compression=compression,
        linger_ms=int(kafka_params.get("linger.ms", 5)),
        batch_size=int(kafka_params.get("batch.size", 1024 * 1024)),
        kafka_params=kafka_params,
        exactly_once=exactly_once,
        transactional_id_prefix=opts.get("transactionalidprefix", "kafkafast-spark").strip() or "kafkafast-spark",
        transaction_timeout_ms=_positive_int(kafka_params, "transaction.timeout.ms") or 900000,
    )
