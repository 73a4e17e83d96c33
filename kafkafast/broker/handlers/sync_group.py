"""SyncGroup (key 14), versions 0-5.

The leader sends the assignment of every member; each member waits until the leader's
assignment is stored and gets its own. In Stable a member gets its current assignment;
during a join phase REBALANCE_IN_PROGRESS; wrong generation ILLEGAL_GENERATION. v5 checks
the protocol type and name against the group's (INCONSISTENT_GROUP_PROTOCOL) and returns
them. A static member gets UNSUPPORTED_VERSION below inter.broker.protocol.version 2.3.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.sync_group import SyncGroupRequest, SyncGroupResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(SyncGroupRequest, 0, 5)
async def handle(broker, ctx, req: SyncGroupRequest, version: int) -> SyncGroupResponse:
    if version >= 3 and req.group_instance_id is not None and not broker.group_coordinator.static_membership:
        return SyncGroupResponse(throttle_time_ms=0, error_code=E.ErrorCode.UNSUPPORTED_VERSION, assignment=b"")
    if denied(broker, ctx, acl.READ, acl.GROUP, req.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    res = await broker.group_coordinator.sync_group(
        req.group_id, req.generation_id, req.member_id, req.group_instance_id if version >= 3 else None,
        req.protocol_type if version >= 5 else None, req.protocol_name if version >= 5 else None,
        [(a.member_id, a.assignment) for a in req.assignments])
    return SyncGroupResponse(throttle_time_ms=0, error_code=res.error,
                             protocol_type=res.protocol_type if version >= 5 else None,
                             protocol_name=res.protocol_name if version >= 5 else None,
                             assignment=res.assignment)
