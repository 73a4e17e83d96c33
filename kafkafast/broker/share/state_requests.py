"""What the share coordinator APIs (Read/Write/Initialize/DeleteShareGroupState and
ReadShareGroupStateSummary) have in common: CLUSTER_ACTION on the cluster (they are
inter-broker APIs), the key's `__share_group_state` partition served here, and one result per
(topic id, partition) in request order."""
from __future__ import annotations

from typing import Any, Callable

from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

EC = E.ErrorCode


async def per_partition(broker: Any, ctx: Any, group_id: str, topics: list[Any],
                  action: Callable[[tuple[str, bytes, int], Any], Any]) -> list[tuple[bytes, list[tuple[Any, int, str | None, Any]]]]:
    """[(topic id, [(request partition, error, message, action's result)])]; `action(key,
    partition)` runs only for partitions without an error, and may raise KafkaError."""
    store = broker.share.store
    refused = denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER)
    out = []
    served: set[tuple[str, bytes, int]] = set()
    for t in topics:
        tid = bytes(t.topic_id)
        results = []
        for p in t.partitions:
            key = (group_id, tid, p.partition)
            err = EC.CLUSTER_AUTHORIZATION_FAILED if refused else store.coordinator_error(key)
            if err:
                results.append((p, err, None, None))
                continue
            served.add(key)
            try:
                results.append((p, 0, None, action(key, p)))
            except E.KafkaError as exc:
                results.append((p, exc.code, exc.message, None))
            broker.share.forget_share_partition(*key)
        out.append((tid, results))
    # The writes of the keys served (forwarded to another worker, waiting for the ISR), not this
    # broker's own writes to other share coordinators: one of those waiting for a coordinator that
    # waits for this one would be a cycle (each handles an inter-broker connection's requests in turn).
    err = await store.settled([(key, fut) for key, fut in store.pending if key in served])
    if err:
        out = [(tid, [(p, e or err, m, r) for p, e, m, r in results]) for tid, results in out]
    return out
