"""JoinGroup (key 11), versions 0-7.

Joins a member to a classic group and answers when the join phase completes: the
generation, the protocol chosen (the one every member supports, by member votes), the
leader, and for the leader every member's metadata. From v4 a member without an id first
gets MEMBER_ID_REQUIRED with its new id (KIP-394); from v5 `group_instance_id` makes a
static member (KIP-345; FENCED_INSTANCE_ID for a replaced one; UNSUPPORTED_VERSION below
inter.broker.protocol.version 2.3, as in Kafka, here and in SyncGroup, Heartbeat and
OffsetCommit: the group records of those versions have no instance id). v0 has no rebalance
timeout (the session timeout is used); v7 returns the protocol type and a nullable
protocol name. The state machine is in `GroupCoordinator`.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.join_group import JoinGroupRequest, JoinGroupResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


def client_host(ctx) -> str:
    peer = getattr(ctx.conn, "peer", None)
    return f"/{peer[0]}" if peer else ""


@handles(JoinGroupRequest, 0, 7)
async def handle(broker, ctx, req: JoinGroupRequest, version: int) -> JoinGroupResponse:
    if version >= 5 and req.group_instance_id is not None and not broker.group_coordinator.static_membership:
        return JoinGroupResponse(throttle_time_ms=0, error_code=E.ErrorCode.UNSUPPORTED_VERSION, generation_id=-1,
                                 protocol_name="" if version < 7 else None, leader="", member_id="", members=[])
    if denied(broker, ctx, acl.READ, acl.GROUP, req.group_id):
        return JoinGroupResponse(throttle_time_ms=0, error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1, protocol_name="" if version < 7 else None, leader="", member_id=req.member_id, members=[])
    rebalance_timeout = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    res = await broker.group_coordinator.join_group(
        req.group_id, req.member_id, req.group_instance_id if version >= 5 else None, ctx.client_id or "",
        client_host(ctx), req.session_timeout_ms, rebalance_timeout, req.protocol_type,
        [(p.name, p.metadata) for p in req.protocols], require_known_member_id=version >= 4)
    name = res.protocol_name
    if name is None and version < 7:
        name = ""
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=res.error, generation_id=res.generation,
        protocol_type=res.protocol_type if version >= 7 else None, protocol_name=name,
        leader=res.leader, member_id=res.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in res.members])
