"""Replica assignment for new topics and partitions, as Kafka's `AdminUtils` does it.

Rack-unaware: brokers sorted by id; partition p's first replica is broker
`(p + start) % n` (random start), followers follow it shifted by `1 + (shift + j) % (n - 1)`,
where the shift (random start) grows by one every n partitions, so leaders and followers
spread evenly. Rack-aware (every broker has a rack): the same walk over the brokers listed
alternately by rack, skipping a broker whose rack (or itself) already holds a replica until
every rack (every broker) does.
"""
from __future__ import annotations

import random

from kafkafast.protocol import errors as E


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: dict[int, str]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    order = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        rack_brokers = by_rack[order[i % len(order)]]
        k = i // len(order)
        if k < len(rack_brokers):
            out.append(rack_brokers[k])
        i += 1
    return out


def assign_replicas(brokers: dict[int, str | None], partitions: int, replication_factor: int, *,
                    start_partition: int = 0, fixed_start: int = -1,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """`brokers`: live broker id -> rack (None when unset). Raises InvalidReplicationFactorError
    when there are fewer brokers than replicas, InvalidRequestError for partly set racks."""
    if partitions <= 0:
        raise E.InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise E.InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise E.InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    racked = [b for b, r in brokers.items() if r is not None]
    if racked and len(racked) != len(brokers):
        raise E.InvalidRequestError("Not all brokers have rack information for replica rack aware assignment.")
    if racked:
        racks = {b: str(r) for b, r in brokers.items()}
        order = rack_alternated(racks)
        num_racks = len(set(racks.values()))
    else:
        order = sorted(brokers)
        racks = {}
        num_racks = 0
    n = len(order)
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    for p in range(max(0, start_partition), max(0, start_partition) + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [order[first]]
        if not racked:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            used_racks = {racks[order[first]]}
            k = 0
            while len(replicas) < replication_factor:
                b = order[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                if ((racks[b] not in used_racks or len(used_racks) == num_racks)
                        and (b not in replicas or len(replicas) == n)):
                    replicas.append(b)
                    used_racks.add(racks[b])
        out[p] = replicas
    return out
