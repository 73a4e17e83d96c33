"""LeaderAndIsr (key 4), versions 5-6 (inter-broker: from the controller, cluster mode).

Makes this broker leader or follower of each listed partition it is a replica of (creating
the local log on first sight). An older controller epoch than the last one seen is refused
with STALE_CONTROLLER_EPOCH (top level), an older broker epoch with STALE_BROKER_EPOCH;
a partition state whose leader epoch (or, at the same leader epoch, partition epoch) is
not newer than the one applied gets STALE_CONTROLLER_EPOCH, as Kafka answers. Without
`zookeeper.connect` the broker is no cluster member and answers BROKER_NOT_AVAILABLE. With
an authorizer, the sender needs ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

TopicError = LeaderAndIsrResponse.LeaderAndIsrTopicError
PartError = LeaderAndIsrResponse.LeaderAndIsrPartitionError


@handles(LeaderAndIsrRequest, 5, 6)
async def handle(broker, ctx, req: LeaderAndIsrRequest, version: int) -> LeaderAndIsrResponse:
    if denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER):
        return LeaderAndIsrResponse(error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    err, results = await broker.control.leader_and_isr(req)
    by_topic: dict[bytes, list] = {}
    for _topic, topic_id, index, code in results:
        by_topic.setdefault(topic_id, []).append(PartError(partition_index=index, error_code=code))
    return LeaderAndIsrResponse(error_code=err, topics=[TopicError(topic_id=tid, partition_errors=errs)
                                                        for tid, errs in by_topic.items()])
