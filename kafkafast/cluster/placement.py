"""The replica side of a placement: what a ZooKeeper-mode broker leaves to the processes it runs in
(issue 24: processes are a placement, not a subclass; see broker/placement.py).

Besides the `Placement` hooks every broker calls (the replica manager's among them: roles,
ISR changes, deleted replicas), a cluster broker asks its placement for its ZooKeeper session
(`make_node`) and share-state store, opens the replicas the controller names (`new_replica`),
and runs the start, the controlled shutdown and a new registration in the process that holds
the broker's registration.

`ClusterLocalPlacement`: one process holds every replica and the registration; each hook is
the broker's own path. `cluster/worker_placement.py:ClusterWorkerPlacement` is the same over N
pre-forked workers (worker 0 registers; replica state in the shared-memory slots)."""
from __future__ import annotations

from typing import Any, Protocol

from kafkafast.broker.partition import Partition
from kafkafast.broker.placement import LocalPlacement, Placement
from kafkafast.cluster.node import ClusterNode
from kafkafast.cluster.share_state import ClusterShareStateStore


class ReplicaPlacement(Placement, Protocol):
    """The hooks a ZooKeeper-mode broker (its `ZkControl`) calls on its placement (besides `Placement`'s)."""

    def make_node(self, config: Any, log_dir: str) -> ClusterNode:
        """This process's ZooKeeper session (the broker's identity and registration)."""

    def make_share_store(self) -> Any:
        """The store of the share groups' state (`__share_group_state`)."""

    def before_start(self) -> None:
        """First thing of the broker's start."""

    def after_start(self) -> None:
        """Last thing of the broker's start (before it listens and registers)."""

    async def controlled_shutdown(self) -> None:
        """SIGTERM, before any listener closes: the broker's leaderships move away."""

    def request_reregistration(self) -> None:
        """Registers the broker again (a new broker epoch), in the process holding its registration."""

    async def new_replica(self, topic: str, topic_id: bytes, index: int) -> Partition:
        """The replica the controller just named this broker's, as this process holds it."""


class ClusterLocalPlacement(LocalPlacement):
    """One process holds every replica and the broker's registration."""

    def make_node(self, config: Any, log_dir: str) -> ClusterNode:
        return ClusterNode(config, log_dir)

    def make_share_store(self) -> ClusterShareStateStore:
        return ClusterShareStateStore(self.broker)

    def before_start(self) -> None:
        pass

    def after_start(self) -> None:
        pass

    async def controlled_shutdown(self) -> None:
        await self.broker.control.run_controlled_shutdown()

    def request_reregistration(self) -> None:
        self.broker.control.register_again()

    async def new_replica(self, topic: str, topic_id: bytes, index: int) -> Partition:
        return Partition(topic, index, await self.broker.replica_log(topic, index))
