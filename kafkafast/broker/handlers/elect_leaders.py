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
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

Result = ElectLeadersResponse.ReplicaElectionResult
PartResult = ElectLeadersResponse.PartitionResult


def _everywhere(req: ElectLeadersRequest, code: int) -> ElectLeadersResponse:
    """The same code for every partition asked about (and as the top-level error, v1+,
    unless it is ELECTION_NOT_NEEDED, which is no error)."""
    results = [Result(topic=t.topic, partition_result=[PartResult(partition_id=p, error_code=code, error_message=None)
                                                       for p in t.partitions])
               for t in req.topic_partitions or []]
    top = 0 if code == E.ErrorCode.ELECTION_NOT_NEEDED else code
    return ElectLeadersResponse(error_code=top, replica_election_results=results)


def _single_node(broker, req: ElectLeadersRequest) -> ElectLeadersResponse:
    broker.refresh_topics()
    results = []
    for t in req.topic_partitions or []:
        meta = broker.topics.get(t.topic)
        results.append(Result(topic=t.topic, partition_result=[PartResult(
            partition_id=p, error_message=None,
            error_code=E.ErrorCode.ELECTION_NOT_NEEDED if meta is not None and 0 <= p < meta.partitions
            else E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in t.partitions]))
    return ElectLeadersResponse(error_code=0, replica_election_results=results)


@handles(ElectLeadersRequest, 0, 2)
async def handle(broker, ctx, req: ElectLeadersRequest, version: int) -> ElectLeadersResponse:
    code = denied(broker, ctx, acl.ALTER, acl.CLUSTER)
    if code:
        return _everywhere(req, code)
    if req.election_type not in (0, 1):
        return _everywhere(req, E.ErrorCode.INVALID_REQUEST)
    node = getattr(broker, "cluster", None)
    if node is None:
        return _single_node(broker, req)
    if node.controller is None or not node.controller.active:
        return _everywhere(req, E.ErrorCode.NOT_CONTROLLER)
    tps = None
    if req.topic_partitions is not None:
        tps = [(t.topic, p) for t in req.topic_partitions for p in t.partitions]
    return await broker.ask_controller("elect_leaders", req.election_type == 1, tps)
