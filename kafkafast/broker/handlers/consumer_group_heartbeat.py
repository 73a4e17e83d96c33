"""ConsumerGroupHeartbeat (key 68), versions 0-1: the consumer group protocol (KIP-848).

A member joins (epoch 0), heartbeats with its epoch and the partitions it owns, and gets
its member id, epoch, heartbeat interval and (when it changed, or on a full request) the
partitions it may use now; it leaves with epoch -1 (a static member for now with -2). In
cluster mode the answer waits until what the heartbeat wrote to `__consumer_offsets` is in
every ISR member (else COORDINATOR_NOT_AVAILABLE), as OffsetCommit's does.
READ on the group is required (GROUP_AUTHORIZATION_FAILED), DESCRIBE on every subscribed
topic name (TOPIC_AUTHORIZATION_FAILED); a regex matches only topics the member may
DESCRIBE. v1 (Kafka 4.0): the member makes
up its own member id (KIP-1082; an empty one is INVALID_REQUEST) and may subscribe by
regular expression (SubscribedTopicRegex, RE2 syntax, matched against whole topic names;
INVALID_REGULAR_EXPRESSION when it does not compile). The group logic is in
`kafkafast/broker/consumer_coordinator.py`.
"""
from kafkafast.broker.consumer_coordinator import HeartbeatRequest, owned_from_request
from kafkafast.broker.handlers.join_group import client_host
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kafkafast.security import acl
from kafkafast.security.context import authorizer_enabled, denied

R = ConsumerGroupHeartbeatResponse


@handles(ConsumerGroupHeartbeatRequest, 0, 1)
async def handle(broker, ctx, req: ConsumerGroupHeartbeatRequest, version: int) -> ConsumerGroupHeartbeatResponse:
    if denied(broker, ctx, acl.READ, acl.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if version >= 1 and not req.member_id:
        return R(throttle_time_ms=0, error_code=E.ErrorCode.INVALID_REQUEST, error_message="MemberId can't be empty.")
    names = req.subscribed_topic_names or []
    if any(denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t) for t in names):  # as Kafka 4.0 (KAFKA-18813)
        return R(throttle_time_ms=0, error_code=E.ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    allowed = (lambda t: not denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t)) if authorizer_enabled(broker) else None
    res = broker.group_coordinator.consumer.heartbeat(HeartbeatRequest(
        req.group_id, req.member_id, req.member_epoch, req.instance_id, req.rack_id, req.rebalance_timeout_ms,
        req.subscribed_topic_names, req.subscribed_topic_regex if version >= 1 else None, req.server_assignor, owned_from_request(req.topic_partitions),
        ctx.client_id or "", client_host(ctx), allowed))
    if not res.error:
        # Answer only what the ISR holds: a new coordinator after a failover knows this assignment.
        res.error = await broker.group_coordinator.wait_replicated(req.group_id)
    if res.error:
        return R(throttle_time_ms=0, error_code=res.error, error_message=res.message)
    assignment = None
    if res.assignment is not None:
        assignment = R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=tid, partitions=sorted(parts))
            for tid, parts in sorted(res.assignment.items()) if parts])
    return R(throttle_time_ms=0, error_code=0, member_id=res.member_id, member_epoch=res.member_epoch,
             heartbeat_interval_ms=res.heartbeat_interval_ms, assignment=assignment)
