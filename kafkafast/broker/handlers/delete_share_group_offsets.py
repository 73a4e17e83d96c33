"""DeleteShareGroupOffsets (key 92), version 0: deletes the share-partition state of an empty
share group for whole topics (kafka-share-groups.sh --delete-offsets), served by the group's
coordinator (NOT_COORDINATOR elsewhere) and deleted by each key's share coordinator (in a
cluster, possibly another broker: DeleteShareGroupState); the partitions that had state are
answered. The next share session at the partition's leader starts where
share.auto.offset.reset says. DELETE on the group (top-level GROUP_AUTHORIZATION_FAILED),
READ on each topic; NON_EMPTY_GROUP while the group has members; UNKNOWN_TOPIC_OR_PARTITION for
a topic that does not exist.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.offsets import group_error
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.delete_share_group_offsets import (DeleteShareGroupOffsetsRequest,
                                                                       DeleteShareGroupOffsetsResponse)
from kafkafast.security import acl
from kafkafast.security.context import denied

R = DeleteShareGroupOffsetsResponse
EC = E.ErrorCode


@handles(DeleteShareGroupOffsetsRequest, 0, 0)
async def handle(broker, ctx, req: DeleteShareGroupOffsetsRequest, version: int) -> DeleteShareGroupOffsetsResponse:
    err = group_error(broker, ctx, req.group_id, acl.DELETE, "delete_share_group_offsets", must_be_empty=True)
    if err:
        return R(throttle_time_ms=0, error_code=err, responses=[])
    out = []
    for t in req.topics:
        meta = broker.topics.get(t.topic_name)
        refused = denied(broker, ctx, acl.READ, acl.TOPIC, t.topic_name)
        parts = []
        for p in range(meta.partitions) if meta is not None and not refused else []:
            code, msg = 0, None
            try:  # at each key's share coordinator (in a cluster, possibly another broker)
                if not await broker.share.store.remove((req.group_id, meta.topic_id, p)):
                    continue
            except E.KafkaError as exc:
                code, msg = exc.code, exc.message
            broker.share.forget_share_partition(req.group_id, meta.topic_id, p)
            parts.append(R.DeleteShareGroupOffsetsResponsePartition(partition_index=p, error_code=code, error_message=msg))
        if meta is None or refused:
            parts = [R.DeleteShareGroupOffsetsResponsePartition(
                partition_index=0, error_code=EC.TOPIC_AUTHORIZATION_FAILED if refused else EC.UNKNOWN_TOPIC_OR_PARTITION)]
        out.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name,
                                                          topic_id=meta.topic_id if meta is not None else bytes(16),
                                                          partitions=parts))
    err = await broker.share.store.settled()
    return R(throttle_time_ms=0, error_code=err, responses=out)
