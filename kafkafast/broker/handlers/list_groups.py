"""ListGroups (key 16), versions 0-5.

Every group this coordinator holds (groups in partitions still loading are left out, as
Kafka does). v4 filters by state names (KIP-518), v5 by group types (KIP-848: "classic",
"consumer", "share"), both case-insensitively; an empty filter lists all. Groups of the
consumer protocol (KIP-848) are listed with type "consumer", protocol type "consumer" and
their state as Kafka names it (Empty, Assigning, Reconciling, Stable); share groups (KIP-932)
with type "share", protocol type "share" and state Empty or Stable.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.list_groups import ListGroupsRequest, ListGroupsResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(ListGroupsRequest, 0, 5)
async def handle(broker, ctx, req: ListGroupsRequest, version: int) -> ListGroupsResponse:
    coordinator = broker.group_coordinator
    err = E.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading else 0
    groups = coordinator.list_groups(req.states_filter if version >= 4 else None)
    wanted = {s.lower() for s in req.states_filter} if version >= 4 and req.states_filter else None
    groups += [(g.group_id, "share", g.state, "share") for g in broker.share.groups.groups.values()
               if not g.dead and (wanted is None or g.state.lower() in wanted)]
    if version >= 5 and req.types_filter:
        types = {t.lower() for t in req.types_filter}
        groups = [g for g in groups if g[3] in types]
    if denied(broker, ctx, acl.DESCRIBE, acl.CLUSTER):  # then only the groups it may describe
        groups = [g for g in groups if not denied(broker, ctx, acl.DESCRIBE, acl.GROUP, g[0])]
    return ListGroupsResponse(throttle_time_ms=0, error_code=err, groups=[
        ListGroupsResponse.ListedGroup(group_id=g, protocol_type=pt, group_state=st, group_type=kind)
        for g, pt, st, kind in groups])
