"""A leader's record of one follower's fetch position (Kafka's `Replica` on the leader side).

A follower's log end offset is what it last asked to fetch from; it is caught up when that
reaches the leader's log end, and its `last_caught_up_ms` is when it last did (or, if it
fetched up to where the log ended at its previous fetch, the time of that fetch). Kept below
the runtime so the shared-memory slot of a partition served by several workers
(`runtime/shm.py: SlotFollower`) applies the same rule.
"""
from __future__ import annotations


class FollowerState:
    __slots__ = ("leo", "last_fetch_ms", "leo_at_last_fetch", "last_caught_up_ms")

    def __init__(self, now_ms: int) -> None:
        self.leo = -1
        self.last_fetch_ms = now_ms
        self.leo_at_last_fetch = -1
        self.last_caught_up_ms = now_ms

    def on_fetch(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = now_ms
        elif fetch_offset >= self.leo_at_last_fetch >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.leo = fetch_offset
        self.last_fetch_ms = now_ms
        self.leo_at_last_fetch = leader_leo
