"""CreatePartitions (key 37), versions 0-3.

Raises a topic's partition count (never lowers it: INVALID_PARTITIONS); assignments, when
given, must name only this broker (INVALID_REPLICA_ASSIGNMENT)."""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import require

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


@handles(CreatePartitionsRequest, 0, 3)
async def handle(broker, ctx, req: CreatePartitionsRequest, version: int) -> CreatePartitionsResponse:
    out = []
    for t in req.topics:
        try:
            require(broker, ctx, acl.ALTER, acl.TOPIC, t.name)
            for a in t.assignments or []:
                if getattr(broker, "cluster", None) is not None:
                    raise E.InvalidReplicaAssignmentError("manual assignments are not supported in cluster mode yet")
                if list(a.broker_ids) != [broker.node_id]:
                    raise E.InvalidReplicaAssignmentError(f"unknown broker in {list(a.broker_ids)}")
            broker.add_partitions(t.name, t.count, validate_only=req.validate_only)
        except E.KafkaError as exc:
            out.append(Result(name=t.name, error_code=exc.code, error_message=exc.message))
            continue
        out.append(Result(name=t.name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=out)
