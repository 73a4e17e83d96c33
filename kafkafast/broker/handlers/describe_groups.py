"""DescribeGroups (key 15), versions 0-5.

State, protocol type, and members of each group. The chosen protocol and each member's
metadata and assignment are only filled in Stable (as Kafka does). An unknown group is
described as state "Dead" with no error. A consumer group of the KIP-848 protocol is
described as Kafka 4.0 does: protocol type "consumer", its state (Empty, Assigning,
Reconciling, Stable), the assignor as the protocol, each member's subscription and
current assignment in the consumer protocol's formats. v3+ authorized operations: not computed
(INT32_MIN) unless asked, then the group operations (READ, DELETE, DESCRIBE) the principal's
ACLs allow (all three without an authorizer). A share group answers GROUP_ID_NOT_FOUND (it is
described by ShareGroupDescribe).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafkafast.security import acl
from kafkafast.security.context import authorized_operations, denied

AUTH_OPS_UNSET = -2147483648


@handles(DescribeGroupsRequest, 0, 5)
async def handle(broker, ctx, req: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
    out = []
    for gid in req.groups:
        if denied(broker, ctx, acl.DESCRIBE, acl.GROUP, gid):
            out.append(DescribeGroupsResponse.DescribedGroup(
                error_code=30, group_id=gid, group_state="", protocol_type="", protocol_data="", members=[],
                authorized_operations=AUTH_OPS_UNSET))  # GROUP_AUTHORIZATION_FAILED
            continue
        if broker.share.groups.get(gid) is not None:  # as Kafka: DescribeGroups describes classic and consumer groups
            out.append(DescribeGroupsResponse.DescribedGroup(
                error_code=69, group_id=gid, group_state="",
                protocol_type="", protocol_data="", members=[], authorized_operations=AUTH_OPS_UNSET))  # GROUP_ID_NOT_FOUND
            continue
        s = broker.group_coordinator.describe_group(gid)
        out.append(DescribeGroupsResponse.DescribedGroup(
            error_code=s.error, group_id=gid, group_state=s.state, protocol_type=s.protocol_type,
            protocol_data=s.protocol,
            members=[DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in s.members],
            authorized_operations=authorized_operations(broker, ctx, acl.GROUP, gid)
            if version >= 3 and req.include_authorized_operations else AUTH_OPS_UNSET))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)
