"""OffsetDelete (key 47), version 0.

Deletes committed offsets of a group (tombstones). An Empty group: any partition. A
consumer group with members: partitions of topics it subscribes to get
GROUP_SUBSCRIBED_TO_TOPIC, others are deleted. GROUP_ID_NOT_FOUND for unknown groups,
NON_EMPTY_GROUP for active non-consumer groups; UNKNOWN_TOPIC_OR_PARTITION per partition
of topics that do not exist.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

R = OffsetDeleteResponse


@handles(OffsetDeleteRequest, 0, 0)
async def handle(broker, ctx, req: OffsetDeleteRequest, version: int) -> OffsetDeleteResponse:
    errors: dict[tuple[str, int], int] = {}
    wanted = []
    if denied(broker, ctx, acl.DELETE, acl.GROUP, req.group_id):
        return OffsetDeleteResponse(error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    for t in req.topics:
        for p in t.partitions:
            if denied(broker, ctx, acl.READ, acl.TOPIC, t.name):
                errors[(t.name, p.partition_index)] = E.ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not broker.partition_exists(t.name, p.partition_index):
                errors[(t.name, p.partition_index)] = E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append((t.name, p.partition_index))
    top, result = broker.group_coordinator.delete_offsets(req.group_id, wanted)
    if top:
        return OffsetDeleteResponse(error_code=top, throttle_time_ms=0, topics=[])
    errors.update(result)
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=[
        R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                            error_code=errors.get((t.name, p.partition_index), 0))
            for p in t.partitions])
        for t in req.topics])
