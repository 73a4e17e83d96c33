"""IncrementalAlterConfigs (key 44), versions 0-1.

Per topic config: SET (0), DELETE (1, back to the default), APPEND (2) and SUBTRACT (3)
for list configs (cleanup.policy, log.cleanup.policy). Broker resources: the dynamic broker
configs, as AlterConfigs (`alter_configs.alter_broker`) takes them. Group resources (32): the
share group configs (`broker/share/group_configs.py`; ALTER_CONFIGS on the group), SET and DELETE."""
from kafkafast.broker.registry import handles
from kafkafast.broker.handlers.alter_configs import BROKER, TOPIC, alter_broker, alter_topic, broker_scope
from kafkafast.broker.share.group_configs import RESOURCE_GROUP
from kafkafast.protocol._generated.incremental_alter_configs import (
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse)
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import require

Resp = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = {"cleanup.policy", "log.cleanup.policy"}


@handles(IncrementalAlterConfigsRequest, 0, 1)
async def handle(broker, ctx, req: IncrementalAlterConfigsRequest, version: int):
    out = []
    for res in req.resources:
        try:
            if res.resource_type == RESOURCE_GROUP:
                require(broker, ctx, acl.ALTER_CONFIGS, acl.GROUP, res.resource_name)
                await broker.share.configs.alter(res.resource_name, [(c.name, c.config_operation, c.value)
                                                                     for c in res.configs], req.validate_only)
                out.append(Resp(error_code=0, resource_type=res.resource_type, resource_name=res.resource_name))
                continue
            require(broker, ctx, acl.ALTER_CONFIGS, *((acl.TOPIC, res.resource_name) if res.resource_type == TOPIC
                                                      else (acl.CLUSTER,)))
            if res.resource_type == BROKER:
                configs = broker.dynamic.stored_broker_configs(broker_scope(broker, res.resource_name))
            elif res.resource_type == TOPIC:
                broker.refresh_topics()
                meta = broker.topics.get(res.resource_name)
                if meta is None:
                    raise E.UnknownTopicOrPartitionError(f"Topic {res.resource_name} does not exist")
                configs = dict(meta.configs)
            else:
                raise E.InvalidRequestError(f"unsupported resource type {res.resource_type}")
            for c in res.configs:
                op = c.config_operation
                if op == SET:
                    if c.value is None:
                        raise E.InvalidConfigError(f"null value for {c.name}")
                    configs[c.name] = c.value
                elif op == DELETE:
                    configs.pop(c.name, None)
                elif op in (APPEND, SUBTRACT):
                    if c.name not in LIST_CONFIGS:
                        raise E.InvalidConfigError(f"{c.name} is not a list config")
                    default = (broker.config.topic_defaults().get(c.name, "") if res.resource_type == TOPIC
                               else broker.effective_topic_defaults().get("cleanup.policy", ""))
                    current = [v for v in configs.get(c.name, default).split(",") if v]
                    items = [v.strip() for v in (c.value or "").split(",") if v.strip()]
                    if op == APPEND:
                        current += [v for v in items if v not in current]
                    else:
                        current = [v for v in current if v not in items]
                    configs[c.name] = ",".join(current)
                else:
                    raise E.InvalidRequestError(f"unknown config operation {op}")
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
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)
