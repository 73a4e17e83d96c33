"""What a ZooKeeper-mode broker (its `ZkControl`) still asks its placement for besides the
`Placement` hooks (issue 24: processes are a placement, not a subclass; see broker/placement.py):
its ZooKeeper session (`make_node`), which in the pre-fork runtime shares the broker's identity,
epoch and session state among the workers. Opening the replicas the controller names
(`new_replica`), the start, the controlled shutdown and a new registration are every
placement's hooks (`LocalPlacement`'s in one process).

`ClusterLocalPlacement`: one process holds every replica and the session.
`cluster/worker_placement.py:ClusterWorkerPlacement` is the same over N pre-forked workers
(worker 0 registers; replica state in the shared-memory slots)."""
from __future__ import annotations

from typing import Any, Protocol

from kafkafast.broker.placement import LocalPlacement, Placement
from kafkafast.cluster.node import ClusterNode


class ReplicaPlacement(Placement, Protocol):
    """The hook a ZooKeeper-mode broker (its `ZkControl`) calls on its placement (besides `Placement`'s)."""

    def make_node(self, config: Any, log_dir: str) -> ClusterNode:
        """This process's ZooKeeper session (the broker's identity and registration)."""


class ClusterLocalPlacement(LocalPlacement):
    """One process holds every replica and the broker's ZooKeeper session."""

    def make_node(self, config: Any, log_dir: str) -> ClusterNode:
        return ClusterNode(config, log_dir)
