"""LeaveGroup (key 13), versions 0-4.

Removes members and rebalances the rest. v0-v2: one member id, its error at the top level.
v3+: a batch of (member id, group instance id) with an error each (a static member may
leave by instance id alone; FENCED_INSTANCE_ID when the ids disagree).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.leave_group import LeaveGroupRequest, LeaveGroupResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(LeaveGroupRequest, 0, 4)
async def handle(broker, ctx, req: LeaveGroupRequest, version: int) -> LeaveGroupResponse:
    if denied(broker, ctx, acl.READ, acl.GROUP, req.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        leaving = [(req.member_id, None)]
    top, errors = broker.group_coordinator.leave_group(req.group_id, leaving)
    if version < 3:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=top or (errors[0] if errors else 0))
    return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=[
        LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid, error_code=err)
        for (mid, iid), err in zip(leaving, errors)])
