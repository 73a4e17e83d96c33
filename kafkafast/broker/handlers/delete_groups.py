"""DeleteGroups (key 42), versions 0-2.

Deletes Empty groups with their committed offsets (tombstones in `__consumer_offsets`).
GROUP_ID_NOT_FOUND for unknown groups, NON_EMPTY_GROUP for groups with members. An empty share
group's share-partition state is deleted first, at each key's share coordinator (in a cluster,
DeleteShareGroupState to other brokers), then the group; an error deleting the state is the
group's answer and the group stays.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from kafkafast.security import acl
from kafkafast.security.context import denied


@handles(DeleteGroupsRequest, 0, 2)
async def handle(broker, ctx, req: DeleteGroupsRequest, version: int) -> DeleteGroupsResponse:
    refused = {g: 30 for g in req.groups_names if denied(broker, ctx, acl.DELETE, acl.GROUP, g)}
    share = {g for g in req.groups_names if g not in refused and broker.share.groups.get(g) is not None}
    results = broker.group_coordinator.delete_groups([g for g in req.groups_names if g not in refused and g not in share])
    for g in share:  # their share-partition state first, at every share coordinator
        results[g] = broker.group_coordinator.status(g, "delete_groups") or await broker.share.delete_group(g)
    results.update(refused)  # GROUP_AUTHORIZATION_FAILED
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g]) for g in req.groups_names])
