"""Where this broker's partitions live and how a request reaches the process that holds one
(issue 24: processes are a placement, not a subclass).

The broker holds one placement (`Broker.placement`). `LocalPlacement`: one process holds every
partition. The pre-fork runtime's `runtime/placement.py:WorkerPlacement` spreads them over N
worker processes: the owner worker of each partition, its shared-memory slot, the wake-up
pipes and the internal links between workers. Either control plane (the local one, ZooKeeper's)
runs over either placement."""
from __future__ import annotations

from typing import Protocol


class Placement(Protocol):
    index: int  # this process among the broker's processes
    workers: int  # how many processes serve the broker
    incarnation: int  # 1 for this process's first start, +1 for each replacement

    def owner_of(self, topic: str, partition: int) -> int:
        """The process (worker index) that holds the partition's log writer."""

    def owns_key(self, topic: str, partition: int) -> bool:
        """Whether this process holds the partition's log writer."""


class LocalPlacement:
    """One process: it holds every partition."""

    index = 0
    workers = 1
    incarnation = 1

    def owner_of(self, topic: str, partition: int) -> int:
        return 0

    def owns_key(self, topic: str, partition: int) -> bool:
        return True
