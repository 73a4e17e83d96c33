"""CreateTopics (key 19), versions 0-7.

num_partitions / replication_factor of -1 take `num.partitions` /
`default.replication.factor`. One path in every mode (`broker.topic_admin`,
kafkafast/broker/topic_admin.py) places the replicas over the live brokers: a replication factor
above their count is INVALID_REPLICATION_FACTOR ("Replication factor: 3 larger than available
brokers: 1." on a single node), a manual assignment naming an unknown broker or one broker
twice INVALID_REPLICA_ASSIGNMENT (a single node: only itself). Configs are
validated (INVALID_CONFIG); `validate_only` checks without creating. v5+ answers with the
partition count, replication factor and the topic's effective configs; v7 with the topic id.
As in Kafka, the answer waits (up to the request's timeout_ms; none when it is 0 or less, or for
`validate_only`) until every new partition has a leader in this broker's metadata (a cluster
broker learns it from the controller): REQUEST_TIMED_OUT for a topic without them then, which
stays created.
"""
from kafkafast.broker.control import until_in_image
from kafkafast.broker.registry import handles
from kafkafast.broker.handlers.describe_configs import topic_config_entries
from kafkafast.protocol._generated.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kafkafast.protocol import errors as E
from kafkafast.protocol.primitives import ZERO_UUID
from kafkafast.security import acl
from kafkafast.security.context import denied, require

Result = CreateTopicsResponse.CreatableTopicResult
ConfigOut = CreateTopicsResponse.CreatableTopicConfigs


def _fail(name, exc):
    return Result(name=name, topic_id=ZERO_UUID, error_code=exc.code, error_message=exc.message,
                  num_partitions=-1, replication_factor=-1, configs=None)


@handles(CreateTopicsRequest, 0, 7)
async def handle(broker, ctx, req: CreateTopicsRequest, version: int) -> CreateTopicsResponse:
    out = []
    seen = set()
    for t in req.topics:
        if t.name in seen:
            out.append(_fail(t.name, E.InvalidRequestError("duplicate topic in request")))
            continue
        seen.add(t.name)
        try:
            if denied(broker, ctx, acl.CREATE, acl.CLUSTER):
                require(broker, ctx, acl.CREATE, acl.TOPIC, t.name)
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise E.InvalidRequestError("both assignments and a partition count/replication factor given")
                indexes = sorted(a.partition_index for a in t.assignments)
                if indexes != list(range(len(indexes))):
                    raise E.InvalidReplicaAssignmentError("partitions must be numbered 0..n-1")
                partitions, rf = len(indexes), len(t.assignments[0].broker_ids)
            else:
                partitions = t.num_partitions if t.num_partitions != -1 else broker.config.get_int("num.partitions")
                rf = t.replication_factor if t.replication_factor != -1 else broker.config.get_int("default.replication.factor")
            configs = {}
            for c in t.configs:
                if c.value is None:
                    raise E.InvalidConfigError(f"null value for config {c.name}")
                configs[c.name] = c.value
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments} if t.assignments else None
            admin = broker.topic_admin
            meta = await admin.run(admin.create, t.name, partitions, configs, replication_factor=rf,
                                   assignment=assignment, validate_only=req.validate_only)
        except E.KafkaError as exc:
            out.append(_fail(t.name, exc))
            continue
        cfgs = None
        if version >= 5:
            cfgs = [ConfigOut(name=e.name, value=e.value, read_only=e.read_only, config_source=e.config_source,
                              is_sensitive=False) for e in topic_config_entries(broker, meta, 1)]
        out.append(Result(name=t.name, topic_id=meta.topic_id, error_code=0, error_message=None,
                          num_partitions=partitions, replication_factor=rf, configs=cfgs))
    created = [r.name for r in out if r.error_code == 0]
    if created and req.timeout_ms > 0 and not req.validate_only:
        control = broker.control

        def led(name: str) -> bool:
            views = control.partitions_of(name)
            return bool(views) and all(v.leader >= 0 for v in views)

        for r in out:
            if r.name in await until_in_image(control, led, created, req.timeout_ms):
                r.error_code, r.error_message = E.ErrorCode.REQUEST_TIMED_OUT, "the topic's partitions have no leader yet"
    return CreateTopicsResponse(throttle_time_ms=0, topics=out)
