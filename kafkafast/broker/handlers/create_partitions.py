"""CreatePartitions (key 37), versions 0-3.

Raises a topic's partition count (never lowers it: INVALID_PARTITIONS). Assignments, when
given, place the new partitions' replicas: one list per new partition, as long as the topic's
replication factor, of registered brokers without repeats (a single node: only itself), as many
as the new partitions, else INVALID_REPLICA_ASSIGNMENT; without them they are placed over the
live brokers. One path in every mode: `broker.topic_admin` (kafkafast/broker/topic_admin.py)."""
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
            assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            admin = broker.topic_admin
            await admin.run(admin.add_partitions, t.name, t.count, assignments, validate_only=req.validate_only)
        except E.KafkaError as exc:
            out.append(Result(name=t.name, error_code=exc.code, error_message=exc.message))
            continue
        out.append(Result(name=t.name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=out)
