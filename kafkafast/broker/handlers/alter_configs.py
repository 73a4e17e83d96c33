"""AlterConfigs (key 33), versions 0-2.

Replaces a topic's whole set of config overrides (the non-incremental semantics: names
left out return to their defaults). Broker resources (type 4; name "" for the cluster-wide
default, else this broker's node id) take the configs Kafka can change at run time
(`kafkafast/broker/dynamic_configs.py`: the log-level defaults, the connection quotas, a TLS
listener's key and trust stores), persisted in the log dir and
applied to every topic without its own override; any other broker config answers
INVALID_REQUEST ("Cannot update these configs dynamically"). In cluster mode they live in
ZooKeeper (`kafkafast/cluster/dynamic_configs.py`) and any broker changes the cluster-wide
default or the entry of any live broker."""
from kafkafast.broker.dynamic_configs import check_dynamic_broker_configs, check_listener_stores
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import require

Resp = AlterConfigsResponse.AlterConfigsResourceResponse
TOPIC, BROKER = 2, 4


def broker_scope(broker, name: str) -> str:
    """The dynamic-config scope a broker resource names: "", this node's id or the id of
    another live broker (a cluster's; Kafka's messages for the others)."""
    if name in ("", str(broker.node_id)):
        return name
    if not name.strip().lstrip("-").isdigit():
        raise E.InvalidRequestError(f"Broker id must be an integer, but it is: {name}")
    if broker.control.endpoint_of(int(name)) is not None:  # another broker the metadata image names
        return str(int(name))
    raise E.InvalidRequestError(f"Unexpected broker id, expected {broker.node_id} or empty string, "
                                f"but received {name}")


def alter_broker(broker, name: str, configs: dict, validate_only: bool) -> None:
    """Replaces the dynamic configs of the broker resource `name`."""
    scope = broker_scope(broker, name)
    check_dynamic_broker_configs(configs, scope)
    check_listener_stores(broker, scope, configs)
    if not validate_only:
        broker.dynamic.set_broker_configs(scope, configs)
        broker.apply_dynamic_configs()


async def alter_topic(broker, name: str, configs: dict, validate_only: bool) -> None:
    broker.refresh_topics()
    if broker.topics.get(name) is None:
        raise E.UnknownTopicOrPartitionError(f"Topic {name} does not exist")
    admin = broker.topic_admin
    await admin.run(admin.set_configs, name, configs, validate_only=validate_only)


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
                await alter_topic(broker, res.resource_name, configs, req.validate_only)
        except E.KafkaError as exc:
            out.append(Resp(error_code=exc.code, error_message=exc.message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
            continue
        out.append(Resp(error_code=0, error_message=None, resource_type=res.resource_type,
                        resource_name=res.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=out)
