"""ElectLeaders (key 43), versions 0-2 (admin: kafka-leader-election.sh, sent to the controller).

election_type 0 (preferred; the only one before v1): the first replica of the assignment
leads if it is live and in the ISR (ELECTION_NOT_NEEDED if it already does,
PREFERRED_LEADER_NOT_AVAILABLE if it cannot). 1 (unclean): only for partitions without a
live leader, an in-sync replica if one is live, else any live replica
(ELIGIBLE_LEADERS_NOT_AVAILABLE if none; ELECTION_NOT_NEEDED while the leader lives).
topic_partitions null: every partition. Unknown partitions: UNKNOWN_TOPIC_OR_PARTITION.
A broker that is not the controller answers NOT_CONTROLLER (v1+: top-level error; v0: per
partition). Needs ALTER on the cluster when an authorizer is configured; without
`zookeeper.connect` there is nothing to elect: every partition of a known topic answers
ELECTION_NOT_NEEDED, any other UNKNOWN_TOPIC_OR_PARTITION (as the controller answers).
"""
from kafkafast.broker.control import election_everywhere as _everywhere
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

@handles(ElectLeadersRequest, 0, 2)
async def handle(broker, ctx, req: ElectLeadersRequest, version: int) -> ElectLeadersResponse:
    code = denied(broker, ctx, acl.ALTER, acl.CLUSTER)
    if code:
        return _everywhere(req, code)
    if req.election_type not in (0, 1):
        return _everywhere(req, E.ErrorCode.INVALID_REQUEST)
    return await broker.control.elect_leaders(req)
