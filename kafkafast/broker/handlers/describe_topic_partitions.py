"""DescribeTopicPartitions (key 75), version 0 (KIP-966).

The partitions of the requested topics (every topic the principal may describe when the
list is empty), sorted by topic name and partition, as Metadata v12 describes them (the
same code answers: `metadata.describe`), with each topic's authorized operations. At most
`response_partition_limit` partitions (capped at 2000, as Kafka's default) are answered;
`next_cursor` then names the first partition left out and a request with it as `cursor`
continues there. No partition has eligible leader replicas (ELR needs KRaft's controller):
those lists are empty. Unknown topics answer UNKNOWN_TOPIC_OR_PARTITION (never created),
topics the principal may not describe TOPIC_AUTHORIZATION_FAILED.
"""
from kafkafast.broker.handlers import metadata
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from kafkafast.protocol._generated.metadata import MetadataRequest

R = DescribeTopicPartitionsResponse
MAX_PARTITION_LIMIT = 2000


@handles(DescribeTopicPartitionsRequest, 0, 0)
async def handle(broker, ctx, req: DescribeTopicPartitionsRequest, version: int) -> DescribeTopicPartitionsResponse:
    names = sorted({t.name for t in req.topics})
    cursor = req.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name] if names else None
    meta_req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names] if names else None,
                               allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    meta = await metadata.handle(broker, ctx, meta_req, 12)
    budget = max(1, min(req.response_partition_limit, MAX_PARTITION_LIMIT))
    topics, next_cursor = [], None
    for t in sorted(meta.topics, key=lambda t: t.name or ""):
        if cursor is not None and t.name < cursor.topic_name:
            continue
        first = cursor.partition_index if cursor is not None and t.name == cursor.topic_name else 0
        parts = [p for p in sorted(t.partitions, key=lambda p: p.partition_index) if p.partition_index >= first]
        if len(parts) > budget:
            next_cursor = R.Cursor(topic_name=t.name, partition_index=parts[budget].partition_index)
            parts = parts[:budget]
        budget -= len(parts)
        topics.append(R.DescribeTopicPartitionsResponseTopic(
            error_code=t.error_code, name=t.name, topic_id=t.topic_id, is_internal=t.is_internal,
            topic_authorized_operations=t.topic_authorized_operations, partitions=[
                R.DescribeTopicPartitionsResponsePartition(
                    error_code=p.error_code, partition_index=p.partition_index, leader_id=p.leader_id,
                    leader_epoch=p.leader_epoch, replica_nodes=p.replica_nodes, isr_nodes=p.isr_nodes,
                    eligible_leader_replicas=[], last_known_elr=[], offline_replicas=p.offline_replicas)
                for p in parts]))
        if next_cursor is not None:
            break
        if budget == 0:
            rest = [x for x in meta.topics if (x.name or "") > (t.name or "")]
            if rest:
                nxt = min(rest, key=lambda x: x.name or "")
                next_cursor = R.Cursor(topic_name=nxt.name, partition_index=0)
            break
    return R(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
