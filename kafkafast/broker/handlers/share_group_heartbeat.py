"""ShareGroupHeartbeat (key 76), version 1: membership of a share group (KIP-932, Kafka 4.1+).

The member makes up its member id, joins with epoch 0 and its subscribed topic names, then
heartbeats with its epoch; it leaves with -1. The answer carries its epoch, the heartbeat
interval and, when it changed (or on a join), the partitions it may fetch from: the `simple`
share assignor's, computed by the server (`kafkafast/broker/share/groups.py`). Routed like the
other group APIs (the worker, or broker, of the group's `__consumer_offsets` partition; else
NOT_COORDINATOR), and answered once the records written for it are in every ISR member (else
COORDINATOR_NOT_AVAILABLE after offsets.commit.timeout.ms), as ConsumerGroupHeartbeat: a new
coordinator after a failover knows the epoch a member was told. READ on the group is required
(GROUP_AUTHORIZATION_FAILED), DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED).
Version 0 (Kafka 4.0's early access) is not served, as Kafka 4.1 no longer does.
"""
from kafkafast.broker.handlers.join_group import client_host
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = ShareGroupHeartbeatResponse


@handles(ShareGroupHeartbeatRequest, 1, 1)
async def handle(broker, ctx, req: ShareGroupHeartbeatRequest, version: int) -> ShareGroupHeartbeatResponse:
    if denied(broker, ctx, acl.READ, acl.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if any(denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, t) for t in req.subscribed_topic_names or []):
        return R(throttle_time_ms=0, error_code=E.ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    status = broker.group_coordinator.status(req.group_id, "share_group_heartbeat")
    res = broker.share.groups.heartbeat(req.group_id, req.member_id, req.member_epoch, req.rack_id,
                                        req.subscribed_topic_names, ctx.client_id or "", client_host(ctx), status)
    if not res.error:
        res.error = await broker.group_coordinator.wait_replicated(req.group_id)
    if res.error:
        return R(throttle_time_ms=0, error_code=res.error, error_message=res.message)
    assignment = None
    if res.assignment is not None:
        assignment = R.Assignment(topic_partitions=[R.TopicPartitions(topic_id=tid, partitions=parts)
                                                    for tid, parts in sorted(res.assignment.items()) if parts])
    return R(throttle_time_ms=0, error_code=0, member_id=res.member_id, member_epoch=res.member_epoch,
             heartbeat_interval_ms=res.heartbeat_interval_ms, assignment=assignment)
