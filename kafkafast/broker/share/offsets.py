"""What DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets share:
the group's checks and its share-partitions' stored start offsets."""
from __future__ import annotations

from typing import Any

from kafkafast.broker.groups.group import GroupState
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

EC = E.ErrorCode


def group_error(broker: Any, ctx: Any, group_id: str, operation: int, api: str, *, must_be_empty: bool) -> int:
    """The group-level error of an offsets request, or NONE: the ACL, the coordinator, a group
    id used by another kind of group, and for changes a group with members (NON_EMPTY_GROUP)."""
    if denied(broker, ctx, operation, acl.GROUP, group_id):
        return EC.GROUP_AUTHORIZATION_FAILED
    err = broker.group_coordinator.status(group_id, api)
    if err:
        return err
    other = broker.group_coordinator.groups.get(group_id)
    if other is not None and broker.share.groups.get(group_id) is None and not other.is_(GroupState.DEAD):
        return EC.GROUP_ID_NOT_FOUND
    group = broker.share.groups.get(group_id)
    if must_be_empty and group is not None and group.members:
        return EC.NON_EMPTY_GROUP
    return 0


def stored_topics(broker: Any, group_id: str) -> dict[str, list[int]]:
    """Topic name -> partitions the group has share-partition state for in this process's store
    (in a cluster: only the keys whose share coordinator is this broker)."""
    out: dict[str, list[int]] = {}
    for (g, tid, p) in broker.share.store.keys:
        meta = broker.topics.by_id.get(tid)
        if g == group_id and meta is not None:
            out.setdefault(meta.name, []).append(p)
    return {t: sorted(ps) for t, ps in sorted(out.items())}
