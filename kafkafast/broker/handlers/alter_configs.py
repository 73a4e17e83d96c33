"""AlterConfigs (key 33), versions 0-2.

Replaces a topic's whole set of config overrides (the non-incremental semantics: names
left out return to their defaults). Broker configs are static in kafkafast (set in the
properties file): altering them answers INVALID_REQUEST."""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import require

Resp = AlterConfigsResponse.AlterConfigsResourceResponse
TOPIC = 2


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
            if res.resource_type != TOPIC:
                raise E.InvalidRequestError("only topic configs can be altered; broker configs are static")
            configs = {}
            for c in res.configs:
                if c.value is None:
                    raise E.InvalidConfigError(f"null value for {c.name}")
                configs[c.name] = c.value
            alter_topic(broker, res.resource_name, configs, req.validate_only)
        except E.KafkaError as exc:
            out.append(Resp(error_code=exc.code, error_message=exc.message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
            continue
        out.append(Resp(error_code=0, error_message=None, resource_type=res.resource_type,
                        resource_name=res.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=out)
