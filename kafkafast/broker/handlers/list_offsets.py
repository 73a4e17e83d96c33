"""ListOffsets (key 2), versions 0-9.

v8: timestamp -4 (earliest local, KIP-405) is the log start offset (no tiered storage: the
local log is the whole log). v9: -5 (earliest pending upload, KIP-1005) finds nothing
(offset -1), as Kafka answers when remote storage is off.

v0 answers `old_style_offsets`: a list holding the one offset found (empty when none), as
Kafka 3.x does (it no longer lists segment base offsets).

timestamp -2 (earliest): the log start offset; -1 (latest): the high watermark (the last
stable offset for READ_COMMITTED); -3 (max timestamp, v7): the offset of the
record with the largest timestamp; otherwise the first offset whose timestamp is at least
the target, found through the time index (offset -1 and timestamp -1 when there is none).
An offline partition (its log could not be opened) answers KAFKA_STORAGE_ERROR, one still
loading at its owner worker NOT_LEADER_OR_FOLLOWER (`Partition.unavailable_error`).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

PartResp = ListOffsetsResponse.ListOffsetsPartitionResponse
TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -2, -1, -3, -4, -5


def latest_offset(part, isolation_level: int) -> int:
    """"latest": the high watermark, or the last stable offset for READ_COMMITTED (1)."""
    if isolation_level == 1:
        return min(part.state.last_stable_offset, part.high_watermark)
    return part.high_watermark


@handles(ListOffsetsRequest, 0, 9)
async def handle(broker, ctx, req: ListOffsetsRequest, version: int) -> ListOffsetsResponse:
    topics = []
    for t in req.topics:
        tr = TopicResp(name=t.name, partitions=[])
        topics.append(tr)
        for p in t.partitions:
            part = broker.get_partition(t.name, p.partition_index)
            if part is None or denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t.name):
                tr.partitions.append(PartResp(partition_index=p.partition_index,
                                              error_code=denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t.name)
                                              or E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            code = part.unavailable_error()
            if code:
                tr.partitions.append(PartResp(partition_index=p.partition_index, error_code=code,
                                              timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            if not part.is_leader:
                tr.partitions.append(PartResp(partition_index=p.partition_index,
                                              error_code=E.ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                              timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            if version >= 4 and p.current_leader_epoch >= 0 and p.current_leader_epoch != part.leader_epoch:
                code = (E.ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < part.leader_epoch
                        else E.ErrorCode.UNKNOWN_LEADER_EPOCH)
                tr.partitions.append(PartResp(partition_index=p.partition_index, error_code=code,
                                              timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            ts, off = -1, -1
            if p.timestamp == EARLIEST or (p.timestamp == EARLIEST_LOCAL and version >= 8):
                off = part.log_start_offset
            elif p.timestamp == LATEST:
                off = latest_offset(part, req.isolation_level if version >= 2 else 0)
            elif p.timestamp == MAX_TIMESTAMP:
                found = part.log.max_timestamp_offset()
                if found is not None:
                    ts, off = found
            elif p.timestamp == EARLIEST_PENDING_UPLOAD and version >= 9:
                pass  # nothing is uploaded: offset -1
            elif p.timestamp < 0:
                tr.partitions.append(PartResp(partition_index=p.partition_index,
                                              error_code=E.ErrorCode.INVALID_REQUEST,
                                              timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            else:
                found = part.log.offset_for_timestamp(p.timestamp)
                if found is not None and found[0] < part.high_watermark:
                    off, ts = found
            tr.partitions.append(PartResp(partition_index=p.partition_index, error_code=0,
                                          timestamp=ts, offset=off,
                                          old_style_offsets=[off] if off >= 0 and version == 0 else [],
                                          leader_epoch=part.leader_epoch if off >= 0 else -1))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
