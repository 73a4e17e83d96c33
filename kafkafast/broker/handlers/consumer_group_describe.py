"""ConsumerGroupDescribe (key 69), versions 0-1 (KIP-848; v1 adds each member's type,
1: a member of the consumer protocol, the only kind a consumer group has here).

Each named group of the consumer protocol: state, group epoch, assignment epoch, assignor,
and per member its epoch, subscription, current and target assignment (topic id and name).
GROUP_ID_NOT_FOUND for an unknown group or a classic one (as Kafka), GROUP_AUTHORIZATION_FAILED
without DESCRIBE on the group; authorized operations when asked.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from kafkafast.security import acl
from kafkafast.security.context import authorized_operations, denied

R = ConsumerGroupDescribeResponse
AUTH_OPS_UNSET = -2147483648
CONSUMER_MEMBER = 1
CLASSIC_MEMBER = 0  # MemberType (v1): a classic-protocol member of a consumer group


def _assignment(consumer, assignment) -> R.Assignment:
    return R.Assignment(topic_partitions=[
        R.TopicPartitions(topic_id=tid, topic_name=consumer.topic_name(tid), partitions=sorted(parts))
        for tid, parts in sorted(assignment.items()) if parts])


@handles(ConsumerGroupDescribeRequest, 0, 1)
async def handle(broker, ctx, req: ConsumerGroupDescribeRequest, version: int) -> ConsumerGroupDescribeResponse:
    consumer = broker.group_coordinator.consumer
    out = []
    for gid in req.group_ids:
        if denied(broker, ctx, acl.DESCRIBE, acl.GROUP, gid):
            out.append(R.DescribedGroup(error_code=E.ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid))
            continue
        err, message, group = consumer.describe(gid)
        if err:
            out.append(R.DescribedGroup(error_code=err, error_message=message, group_id=gid))
            continue
        out.append(R.DescribedGroup(
            error_code=0, group_id=gid, group_state=group.state_name, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name or consumer.assignors[0],
            members=[R.Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topics),
                subscribed_topic_regex=m.subscribed_regex,
                assignment=_assignment(consumer, m.assigned),
                target_assignment=_assignment(consumer, group.target.get(m.member_id, {})),
                member_type=CONSUMER_MEMBER if m.classic is None else CLASSIC_MEMBER)
                for m in group.members.values()],
            authorized_operations=authorized_operations(broker, ctx, acl.GROUP, gid)
            if req.include_authorized_operations else AUTH_OPS_UNSET))
    return R(throttle_time_ms=0, groups=out)
