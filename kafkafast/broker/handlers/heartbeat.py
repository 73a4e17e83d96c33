"""Heartbeat (key 12), versions 0-4.

Keeps a member's session alive. REBALANCE_IN_PROGRESS tells it to rejoin; ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID and (v3+, static members) FENCED_INSTANCE_ID as Kafka returns them; a static
member gets UNSUPPORTED_VERSION below inter.broker.protocol.version 2.3.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.heartbeat import HeartbeatRequest, HeartbeatResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(HeartbeatRequest, 0, 4)
async def handle(broker, ctx, req: HeartbeatRequest, version: int) -> HeartbeatResponse:
    if version >= 3 and req.group_instance_id is not None and not broker.group_coordinator.static_membership:
        return HeartbeatResponse(throttle_time_ms=0, error_code=E.ErrorCode.UNSUPPORTED_VERSION)
    if denied(broker, ctx, acl.READ, acl.GROUP, req.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED)
    err = broker.group_coordinator.heartbeat(req.group_id, req.member_id,
                                             req.group_instance_id if version >= 3 else None, req.generation_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=err)
