"""FindCoordinator (key 10), versions 0-4.

Key type 0 (group) and 1 (transaction), after the DESCRIBE check on the group or the
transactional id: the control plane names the coordinator (`broker.control.find_coordinator`:
on a single node this broker, in a cluster the leader of the key's `__consumer_offsets` or
`__transaction_state` partition; the topic is created on first use). Where no transaction
coordinator runs the answer is TRANSACTIONAL_ID_AUTHORIZATION_FAILED with a message, the code
clients treat as fatal. Other key types: INVALID_REQUEST. v4 batches several keys in `coordinator_keys` and answers each
in `coordinators`; v0-v3 answer one key at the top level (error_message from v1).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

GROUP, TRANSACTION = 0, 1


async def _find(broker, ctx, key: str, key_type: int) -> tuple[int, str, int, int, str | None]:
    """(node, host, port, error, message) for one key."""
    if key_type not in (GROUP, TRANSACTION):
        return -1, "", -1, E.ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}"
    refused = denied(broker, ctx, acl.DESCRIBE, acl.GROUP if key_type == GROUP else acl.TRANSACTIONAL_ID, key)
    if refused:
        return -1, "", -1, refused, None
    return await broker.control.find_coordinator(key, key_type, ctx)


@handles(FindCoordinatorRequest, 0, 4)
async def handle(broker, ctx, req: FindCoordinatorRequest, version: int) -> FindCoordinatorResponse:
    if version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            node, host, port, err, msg = await _find(broker, ctx, key, req.key_type)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=err, error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    node, host, port, err, msg = await _find(broker, ctx, req.key, req.key_type if version >= 1 else GROUP)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg, node_id=node, host=host,
                                   port=port)
