"""Group requests that name groups owned by different workers, or all groups.

Each group lives in the worker owning its `__consumer_offsets` partition. A request for
one group (or several with one owner) is forwarded whole (`WorkerBroker.handle_frame`).
These requests are split instead, each part answered by its owner (locally or over the
forwarding link), and the answers merged in request order:

- ListGroups (16), ListTransactions (66): asked of every worker; the lists are concatenated
  (each worker coordinates the transactional ids of its `__transaction_state` partitions).
- DescribeGroups (15), DeleteGroups (42), ConsumerGroupDescribe (69), ShareGroupDescribe (77),
  OffsetFetch v8+ with several groups (9): the groups are split by owner.
"""
from __future__ import annotations

import asyncio
import copy
from typing import Any

from kafkafast.broker.broker import RequestContext
from kafkafast.protocol import api
from kafkafast.security.context import FORWARDED_PRINCIPAL, trailer_bytes

LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_FETCH, LIST_TRANSACTIONS = 16, 15, 42, 9, 66
CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE = 69, 77
LISTED = {LIST_GROUPS: "groups", LIST_TRANSACTIONS: "transaction_states"}  # asked of every worker
FANOUT_KEYS = frozenset({LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_FETCH, LIST_TRANSACTIONS,
                         CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE})


def _groups_of(api_key: int, req: Any) -> list:
    if api_key == DESCRIBE_GROUPS:
        return list(req.groups or [])
    if api_key == DELETE_GROUPS:
        return list(req.groups_names or [])
    if api_key in (CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE):
        return list(req.group_ids or [])
    return list(req.groups or [])  # OffsetFetch v8+


def _with_groups(api_key: int, req: Any, groups: list) -> Any:
    sub = copy.copy(req)
    if api_key == DESCRIBE_GROUPS:
        sub.groups = groups
    elif api_key == DELETE_GROUPS:
        sub.groups_names = groups
    elif api_key in (CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE):
        sub.group_ids = groups
    else:
        sub.groups = groups
    return sub


def _group_id(api_key: int, g: Any) -> str:
    return g.group_id if api_key == OFFSET_FETCH else g


def _answers_of(api_key: int, resp: Any) -> list:
    if api_key == DELETE_GROUPS:
        return list(resp.results)
    return list(resp.groups)


async def _ask(broker: Any, owner: int, header: Any, req: Any, version: int) -> Any:
    if owner == broker.placement.index:
        spec = broker.handlers[req.API_KEY]
        ctx = RequestContext(header, version, header.client_id, None, True)
        return await spec.func(broker, ctx, req, version)
    return await broker.placement.forwarder.request(owner, req, version,
                                                    trailer=trailer_bytes(FORWARDED_PRINCIPAL.get()))


async def maybe_fan_out(broker: Any, frame: Any) -> list | None:
    """Response parts when the request had to be split; None when it needs no fan-out."""
    api_key, version, correlation_id = api.peek_api(frame)
    if api_key not in FANOUT_KEYS:
        return None
    try:
        header, req = api.decode_request(frame)
    except Exception:
        return None  # the normal path answers (or closes on) a malformed request
    if api_key in LISTED:
        workers = range(broker.placement.workers)
        answers = await asyncio.gather(*(_ask(broker, w, header, req, version) for w in workers))
        merged = answers[0]
        field = LISTED[api_key]
        setattr(merged, field, [item for a in answers for item in getattr(a, field)])
        merged.error_code = next((a.error_code for a in answers if a.error_code), 0)
        return api.encode_response(api_key, version, correlation_id, merged)
    if api_key == OFFSET_FETCH and version < 8:
        return None
    groups = _groups_of(api_key, req)
    owner_of = {}
    for g in groups:
        gid = _group_id(api_key, g)
        owner_of[gid] = broker.placement.owner_of("__consumer_offsets", broker.group_coordinator.partition_for(gid))
    owners = sorted(set(owner_of.values()))
    if len(owners) <= 1:
        return None
    by_owner = {o: [g for g in groups if owner_of[_group_id(api_key, g)] == o] for o in owners}
    answers = await asyncio.gather(*(_ask(broker, o, header, _with_groups(api_key, req, gs), version)
                                     for o, gs in by_owner.items()))
    by_id = {}
    for a in answers:
        for item in _answers_of(api_key, a):
            by_id[item.group_id] = item
    merged = answers[0]
    ordered = [by_id[_group_id(api_key, g)] for g in groups if _group_id(api_key, g) in by_id]
    if api_key == DELETE_GROUPS:
        merged.results = ordered
    else:
        merged.groups = ordered
    return api.encode_response(api_key, version, correlation_id, merged)
