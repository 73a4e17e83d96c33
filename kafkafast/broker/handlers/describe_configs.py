"""DescribeConfigs (key 32), versions 0-4.

Topics (resource type 2): every topic-level config with its effective value and source —
DYNAMIC_TOPIC_CONFIG for the topic's overrides, STATIC_BROKER_CONFIG when the broker's
property sets it, DEFAULT_CONFIG otherwise — with synonyms when asked (v1+) and types (v3+).
Brokers (type 4): for this node id the broker properties in effect, a dynamic config
(`kafkafast/broker/dynamic_configs.py`) with source DYNAMIC_BROKER_CONFIG or
DYNAMIC_DEFAULT_BROKER_CONFIG and the lower layers as synonyms, the dynamically changeable
ones not read-only; for the empty name (the cluster-wide default resource) only the dynamic
cluster-wide defaults, as Kafka answers. A secret (Kafka's PASSWORD-type configs:
`security/tls.py: is_sensitive`, e.g. ssl.key.password, sasl.jaas.config) is answered as
Kafka does: sensitive, with a null value, in its synonyms too. A broker config's type (v3+)
and documentation (when asked) come from the table of known configs (`kafkafast/config_def.py`).
Groups (type 32; DESCRIBE_CONFIGS on the group): the share group configs
(`broker/share/group_configs.py`), GROUP_CONFIG for the group's own, DEFAULT_CONFIG (the
broker's group.share.* setting or Kafka's default) otherwise, as Kafka 4 answers; an empty
name is INVALID_REQUEST.
"""
from dataclasses import dataclass

from kafkafast.broker.dynamic_configs import ACCEPTED_WITHOUT_USE, is_dynamic_broker_config
from kafkafast.broker.registry import handles
from kafkafast.broker.share.group_configs import RESOURCE_GROUP
from kafkafast.config import DEFAULTS, TOPIC_SYNONYMS
from kafkafast.config_def import BROKER_CONFIGS
from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafkafast.protocol import errors as E
from kafkafast.storage.config import TOPIC_ALIASES, TOPIC_CONFIG_DEFAULTS
from kafkafast.security import acl
from kafkafast.security.context import require
from kafkafast.security.tls import is_sensitive

TOPIC, BROKER = 2, 4
SRC_TOPIC, SRC_DYNAMIC_BROKER, SRC_DYNAMIC_DEFAULT, SRC_STATIC_BROKER, SRC_DEFAULT = 1, 2, 3, 4, 5
SRC_GROUP = 8
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST, TYPE_PASSWORD = 1, 2, 3, 5, 6, 7, 9
# Kafka's ConfigType codes by ConfigDef type name (broker configs: the type in their table)
_WIRE_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
               "PASSWORD": 9}
_TYPES = {
    "cleanup.policy": TYPE_LIST, "compression.type": TYPE_STRING, "message.timestamp.type": TYPE_STRING,
    "min.cleanable.dirty.ratio": TYPE_DOUBLE, "max.message.bytes": TYPE_INT, "segment.bytes": TYPE_INT,
    "segment.index.bytes": TYPE_INT, "index.interval.bytes": TYPE_INT, "min.insync.replicas": TYPE_INT,
    "share.record.lock.duration.ms": TYPE_INT, "share.delivery.count.limit": TYPE_INT,
    "share.session.timeout.ms": TYPE_INT, "share.heartbeat.interval.ms": TYPE_INT,
    "consumer.session.timeout.ms": TYPE_INT, "consumer.heartbeat.interval.ms": TYPE_INT,
}

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    synonyms: list


def config_type(name: str, value: str | None) -> int:
    if is_sensitive(name):
        return TYPE_PASSWORD
    if name in _TYPES:
        return _TYPES[name]
    if name in BROKER_CONFIGS:
        return _WIRE_TYPES[BROKER_CONFIGS[name].type]
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    if name.endswith((".ms", ".bytes", ".messages")):
        return TYPE_LONG
    return TYPE_STRING


def broker_doc(resource_type: int, name: str) -> str | None:
    """A broker config's documentation, from the table `--help-configs` prints."""
    key = BROKER_CONFIGS.get(name) if resource_type == BROKER else None
    return key.doc if key is not None else None


def topic_config_entries(broker, meta, version: int) -> list[ConfigEntry]:
    dynamic = getattr(broker, "dynamic", None)
    broker_defaults = broker.effective_topic_defaults() if dynamic is not None else broker.config.topic_defaults()
    dyn_layers = [] if dynamic is None else [(dynamic.broker_configs(str(broker.node_id)), SRC_DYNAMIC_BROKER),
                                             (dynamic.broker_configs(""), SRC_DYNAMIC_DEFAULT)]
    explicit = {k for k, v in broker.config.props.items() if v is not None and DEFAULTS.get(k) != v}
    out = []
    overrides = {TOPIC_ALIASES.get(k, k): v for k, v in meta.configs.items()}
    for name in sorted(TOPIC_CONFIG_DEFAULTS):
        synonyms = []
        broker_key = broker.config.topic_config_source(name)
        dyn = [(layer[broker_key], src) for layer, src in dyn_layers if broker_key in layer]
        if name in overrides:
            value, source = overrides[name], SRC_TOPIC
            synonyms.append(Synonym(name=name, value=value, source=SRC_TOPIC))
        elif dyn:
            value, source = dyn[0]
        elif broker_key is not None and broker_key in explicit:
            value, source = broker_defaults.get(name, TOPIC_CONFIG_DEFAULTS[name]), SRC_STATIC_BROKER
        else:
            value, source = broker_defaults.get(name, TOPIC_CONFIG_DEFAULTS[name]), SRC_DEFAULT
        synonyms += [Synonym(name=broker_key, value=v, source=src) for v, src in dyn]
        if broker_key is not None and broker_key in explicit:
            synonyms.append(Synonym(name=broker_key, value=broker.config.props[broker_key], source=SRC_STATIC_BROKER))
        synonyms.append(Synonym(name=broker_key or name, value=TOPIC_CONFIG_DEFAULTS[name], source=SRC_DEFAULT))
        out.append(ConfigEntry(name, value, False, source, synonyms))
    return out


def broker_config_entries(broker, resource_name: str = "") -> list[ConfigEntry]:
    dynamic = getattr(broker, "dynamic", None)
    default_dyn = dynamic.broker_configs("") if dynamic is not None else {}
    if resource_name == "":
        return [ConfigEntry(n, v, False, SRC_DYNAMIC_DEFAULT, [Synonym(name=n, value=v, source=SRC_DYNAMIC_DEFAULT)])
                for n, v in sorted(default_dyn.items())]
    node_dyn = dynamic.broker_configs(resource_name) if dynamic is not None else {}
    out = []
    for name in sorted(set(broker.config.props) | set(default_dyn) | set(node_dyn) | set(ACCEPTED_WITHOUT_USE)):
        layers = []
        if name in node_dyn:
            layers.append((node_dyn[name], SRC_DYNAMIC_BROKER))
        if name in default_dyn:
            layers.append((default_dyn[name], SRC_DYNAMIC_DEFAULT))
        if name in broker.config.props:
            static = broker.config.props[name]
            layers.append((static, SRC_DEFAULT if DEFAULTS.get(name) == static else SRC_STATIC_BROKER))
        elif name in ACCEPTED_WITHOUT_USE:
            layers.append((ACCEPTED_WITHOUT_USE[name][0], SRC_DEFAULT))
        value, source = layers[0]
        syn = [Synonym(name=name, value=v, source=s) for v, s in layers]
        out.append(ConfigEntry(name, value, not is_dynamic_broker_config(name), source, syn))
    return out


def group_config_entries(broker, group_id: str) -> list[ConfigEntry]:
    if not group_id:
        raise E.InvalidRequestError("Group name must not be empty")
    out = []
    for name, value, own in broker.share.configs.effective(group_id):
        source = SRC_GROUP if own else SRC_DEFAULT
        out.append(ConfigEntry(name, value, False, source, [Synonym(name=name, value=value, source=source)]))
    return out


@handles(DescribeConfigsRequest, 0, 4)
async def handle(broker, ctx, req: DescribeConfigsRequest, version: int) -> DescribeConfigsResponse:
    broker.refresh_topics()
    results = []
    for res in req.resources:
        try:
            if res.resource_type == TOPIC:
                require(broker, ctx, acl.DESCRIBE_CONFIGS, acl.TOPIC, res.resource_name)
                meta = broker.topics.get(res.resource_name)
                if meta is None:
                    raise E.UnknownTopicOrPartitionError(f"Topic {res.resource_name} does not exist")
                entries = topic_config_entries(broker, meta, version)
            elif res.resource_type == BROKER:
                require(broker, ctx, acl.DESCRIBE_CONFIGS, acl.CLUSTER)
                if res.resource_name not in ("", str(broker.node_id)):
                    raise E.InvalidRequestError(f"Unexpected broker id, expected {broker.node_id} or empty string, "
                                                f"but received {res.resource_name}")
                entries = broker_config_entries(broker, res.resource_name)
            elif res.resource_type == RESOURCE_GROUP:
                require(broker, ctx, acl.DESCRIBE_CONFIGS, acl.GROUP, res.resource_name)
                entries = group_config_entries(broker, res.resource_name)
            else:
                raise E.InvalidRequestError(f"unsupported resource type {res.resource_type}")
        except E.KafkaError as exc:
            results.append(Result(error_code=exc.code, error_message=exc.message, resource_type=res.resource_type,
                                  resource_name=res.resource_name, configs=[]))
            continue
        if res.configuration_keys is not None:
            keys = set(res.configuration_keys)
            entries = [e for e in entries if e.name in keys]
        configs = [Entry(name=e.name, value=None if is_sensitive(e.name) else e.value, read_only=e.read_only,
                         is_default=e.config_source == SRC_DEFAULT, config_source=e.config_source,
                         is_sensitive=is_sensitive(e.name),
                         synonyms=([Synonym(name=y.name, value=None, source=y.source) for y in e.synonyms]
                                   if is_sensitive(e.name) else e.synonyms) if req.include_synonyms else [],
                         config_type=config_type(e.name, e.value),
                         documentation=broker_doc(res.resource_type, e.name) if req.include_documentation else None)
                   for e in entries]
        results.append(Result(error_code=0, error_message=None, resource_type=res.resource_type,
                              resource_name=res.resource_name, configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
