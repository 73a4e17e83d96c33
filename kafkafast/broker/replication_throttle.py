"""Replication throttle (Kafka's `ReplicationQuotaManager`, both sides).

Follower side: a replica is throttled when its topic's `follower.replication.throttled.replicas`
lists `<partition>:<this broker>` (or is `*`); kafka-reassign-partitions.sh --throttle sets it
for the replicas a reassignment adds. All throttled replicas of a broker share
`follower.replication.throttled.rate` bytes/s (a token bucket holding at most one second of
bytes): while it is in deficit, the fetchers leave throttled partitions out of their fetch
requests, so the moving replicas catch up at that rate and the others are not held back.

Leader side: `leader.replication.throttled.replicas` (`<partition>:<leader broker>`; the tool
lists the current replicas) and `leader.replication.throttled.rate`: follower fetches of those
partitions are answered without records while the leader's bucket is in deficit, and the
bytes they do get are counted.
"""
from __future__ import annotations

import time

UNLIMITED = 2**63 - 1


def throttled(replicas_config: str, partition: int, broker_id: int) -> bool:
    """`*` or a comma list of `partition:broker` entries naming this replica."""
    value = replicas_config.strip()
    if not value:
        return False
    if value == "*":
        return True
    want = f"{partition}:{broker_id}"
    return any(entry.strip() == want for entry in value.split(","))


class ReplicationQuota:
    __slots__ = ("rate", "tokens", "stamp")

    def __init__(self, rate_bytes_per_s: int) -> None:
        self.rate = rate_bytes_per_s
        self.tokens = float(rate_bytes_per_s)
        self.stamp = time.monotonic()

    @property
    def unlimited(self) -> bool:
        return self.rate >= UNLIMITED

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(float(self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def exceeded(self) -> bool:
        if self.unlimited:
            return False
        self._refill()
        return self.tokens < 0

    def record(self, nbytes: int) -> None:
        if not self.unlimited:
            self._refill()
            self.tokens -= nbytes

    def wait_s(self) -> float:
        """Seconds until the deficit is paid back."""
        if self.unlimited or self.rate <= 0:
            return 0.1
        self._refill()
        return max(0.0, -self.tokens / self.rate)
