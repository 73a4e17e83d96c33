"""ShareGroupDescribe (key 77), version 1: share groups with their epochs, members, each
member's subscription and assignment (topic ids and names). DESCRIBE on the group is required
(GROUP_AUTHORIZATION_FAILED for that group); a group id that is no share group answers
GROUP_ID_NOT_FOUND, as Kafka does; authorized operations on request (KIP-430).
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.groups import ASSIGNOR
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from kafkafast.security import acl
from kafkafast.security.context import authorized_operations, denied

R = ShareGroupDescribeResponse
EC = E.ErrorCode


def _assignment(broker, assignment) -> ShareGroupDescribeResponse.Assignment:
    out = []
    for tid, parts in sorted(assignment.items()):
        meta = broker.topics.by_id.get(tid)
        if meta is not None and parts:
            out.append(R.TopicPartitions(topic_id=tid, topic_name=meta.name, partitions=list(parts)))
    return R.Assignment(topic_partitions=out)


def describe(broker, ctx, group_id: str, include_ops: bool) -> ShareGroupDescribeResponse.DescribedGroup:
    if denied(broker, ctx, acl.DESCRIBE, acl.GROUP, group_id):
        return R.DescribedGroup(error_code=EC.GROUP_AUTHORIZATION_FAILED, group_id=group_id)
    err = broker.group_coordinator.status(group_id, "share_group_describe")
    if err:
        return R.DescribedGroup(error_code=err, group_id=group_id)
    group = broker.share.groups.get(group_id)
    if group is None:
        return R.DescribedGroup(error_code=EC.GROUP_ID_NOT_FOUND, group_id=group_id,
                                error_message=f"Group {group_id} not found.")
    members = [R.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                        client_host=m.client_host, subscribed_topic_names=sorted(m.subscribed_topics),
                        assignment=_assignment(broker, m.assignment))
               for m in group.members.values()]
    return R.DescribedGroup(error_code=0, group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
                            assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR, members=members,
                            authorized_operations=authorized_operations(broker, ctx, acl.GROUP, group_id)
                            if include_ops else -2147483648)


@handles(ShareGroupDescribeRequest, 1, 1)
async def handle(broker, ctx, req: ShareGroupDescribeRequest, version: int) -> ShareGroupDescribeResponse:
    return R(throttle_time_ms=0, groups=[describe(broker, ctx, gid, req.include_authorized_operations)
                                         for gid in req.group_ids])
