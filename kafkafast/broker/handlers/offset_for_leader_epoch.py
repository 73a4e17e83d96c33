"""OffsetForLeaderEpoch (key 23), versions 0-4.

For each partition: the largest leader epoch at or below the requested one and the offset
where the next epoch starts (the log end offset for the current epoch), from the
partition's leader-epoch checkpoint, as Kafka answers it. Consumers use it to validate
their position after a leader change; an epoch newer than any known gives -1/-1.
`current_leader_epoch` (v2+) is checked: older is FENCED_LEADER_EPOCH, newer
UNKNOWN_LEADER_EPOCH. Partitions appended to by another worker are answered from the
checkpoint file they share, once their owner has loaded them (NOT_LEADER_OR_FOLLOWER before;
an offline log KAFKA_STORAGE_ERROR). A principal with ClusterAction on the cluster (a follower
broker) may ask about every topic; others need Describe on each, as in Kafka.
"""
import os

from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.offset_for_leader_epoch import (OffsetForLeaderEpochRequest,
                                                                   OffsetForLeaderEpochResponse)
from kafkafast.protocol import errors as E
from kafkafast.storage.leader_epoch import LeaderEpochCache
from kafkafast.security import acl
from kafkafast.security.context import denied

Result = OffsetForLeaderEpochResponse.EpochEndOffset
TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult


def end_offset_for_epoch(part, epoch: int) -> tuple[int, int]:
    lg = part.log
    if hasattr(lg, "end_offset_for_epoch"):
        return lg.end_offset_for_epoch(epoch)
    cache = LeaderEpochCache(os.path.join(lg.reader.dir, "leader-epoch-checkpoint"))
    return cache.end_offset_for(epoch, lg.state.log_end_offset)


@handles(OffsetForLeaderEpochRequest, 0, 4)
async def handle(broker, ctx, req: OffsetForLeaderEpochRequest, version: int) -> OffsetForLeaderEpochResponse:
    topics = []
    replica = not denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER) if version >= 3 and req.replica_id >= 0 else False
    for t in req.topics:
        tr = TopicResult(topic=t.topic, partitions=[])
        topics.append(tr)
        for p in t.partitions:
            part = broker.get_partition(t.topic, p.partition)
            refused = 0 if replica else denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t.topic)
            if part is None or refused:
                tr.partitions.append(Result(error_code=refused
                                            or E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, partition=p.partition,
                                            leader_epoch=-1, end_offset=-1))
                continue
            code = part.unavailable_error()
            if code:
                tr.partitions.append(Result(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            if not part.is_leader:
                tr.partitions.append(Result(error_code=E.ErrorCode.NOT_LEADER_OR_FOLLOWER, partition=p.partition,
                                            leader_epoch=-1, end_offset=-1))
                continue
            if version >= 2 and p.current_leader_epoch >= 0 and p.current_leader_epoch != part.leader_epoch:
                code = (E.ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < part.leader_epoch
                        else E.ErrorCode.UNKNOWN_LEADER_EPOCH)
                tr.partitions.append(Result(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            epoch, end = end_offset_for_epoch(part, p.leader_epoch)
            tr.partitions.append(Result(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
