"""AlterConfigs (key 33), versions 0-2.

Replaces a topic's whole set of config overrides (the non-incremental semantics: names
left out return to their defaults). Broker resources (type 4; name "" for the cluster-wide
default, else this broker's node id) take the configs Kafka can change at run time
(`kafkafast/broker/dynamic_configs.py`: the log-level defaults, the connection quotas, a TLS
listener's key and trust stores), persisted in the log dir and
applied to every topic without its own override; any other broker config answers
INVALID_REQUEST ("Cannot update these configs dynamically"). In cluster mode broker configs
stay static (INVALID_REQUEST)."""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import require

Resp = AlterConfigsResponse.AlterConfigsResourceResponse
TOPIC, BROKER = 2, 4


def broker_scope(broker, name: str) -> str:
    """The dynamic-config scope a broker resource names: "" or this node's id."""
    if getattr(broker, "cluster", None) is not None:
        raise E.InvalidRequestError("broker configs are static in cluster mode")
    if name not in ("", str(broker.node_id)):
        raise E.InvalidRequestError(f"unknown broker {name!r}")
    return name


def alter_broker(broker, name: str, configs: dict, validate_only: bool) -> None:
    """Replaces the dynamic configs of the broker resource `name`."""
    from kafkafast.broker.dynamic_configs import check_dynamic_broker_configs, check_listener_stores

    scope = broker_scope(broker, name)
    check_dynamic_broker_configs(configs)
    check_listener_stores(broker, scope, configs)
    if not validate_only:
        broker.dynamic.set_broker_configs(scope, configs)
        broker.apply_dynamic_configs()


def alter_topic(broker, name: str, configs: dict, validate_only: bool) -> None:
    broker.refresh_topics()
    if broker.topics.get(name) is None:
        raise E.UnknownTopicOrPartitionError(f"Topic {name} does not exist")
    broker.set_topic_configs(name, configs, validate_only=validate_only)


@handles(AlterConfigsRequest, 0, 2)
async def handle(broker, ctx, req: AlterConfigsRequest, version: int) -> AlterConfigsResponse:
    out = []
    for res in req.resources:
        try:
            require(broker, ctx, acl.ALTER_CONFIGS, *((acl.TOPIC, res.resource_name) if res.resource_type == TOPIC
                                                      else (acl.CLUSTER,)))
            if res.resource_type not in (TOPIC, BROKER):
                raise E.InvalidRequestError(f"unsupported resource type {res.resource_type}")
            configs = {}
            for c in res.configs:
                if c.value is None:
                    raise E.InvalidConfigError(f"null value for {c.name}")
                configs[c.name] = c.value
            if res.resource_type == BROKER:
                alter_broker(broker, res.resource_name, configs, req.validate_only)
            else:
                alter_topic(broker, res.resource_name, configs, req.validate_only)
        except E.KafkaError as exc:
            out.append(Resp(error_code=exc.code, error_message=exc.message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
            continue
        out.append(Resp(error_code=0, error_message=None, resource_type=res.resource_type,
                        resource_name=res.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=out)
