"""Cluster mode inside a pre-forked broker: the `Broker` with a `ZkControl` over each worker's
`ClusterWorkerPlacement` (the worker placement's partition ownership, with the replica hooks
of `cluster/placement.py:ReplicaPlacement`), made by `runtime/worker.py` from the classes
`cli/main.py` chose when `zookeeper.connect` is set.

Processes. Every worker opens its own kazoo session after the fork (topic znodes, configs,
producer-id blocks); only worker 0 registers `/brokers/ids/<id>` and runs the `Controller`,
so the broker is one cluster member with one broker epoch. Worker 0 establishes the broker
id (config, `meta.properties` or `/brokers/seqid`) and publishes it with the broker epoch in
the shared-memory header; the other workers wait for it.

Controller requests. The controller's connection lands on any worker. That worker applies
LeaderAndIsr, UpdateMetadata and StopReplica and sends the same frame to every other worker
over the internal Unix sockets, answering the controller once all have applied it (the
controller sends one request at a time per broker, so every worker applies them in the
same order). AlterPartition (and ControlledShutdown) are forwarded to worker 0, where the
controller runs.

After a session expiry only worker 0's new session registers the broker again (the
others' register nothing), so the broker epoch in shared memory is the registration's.
A replaced worker (its predecessor died) knows no replica state: it asks worker 0, through
the shared-memory header and worker 0's wake-up pipe, to register the broker again (delete
and re-create `/brokers/ids/<id>` in the same session); so does a worker whose AlterPartition
the controller keeps refusing with STALE_BROKER_EPOCH. The controller sees a new broker
epoch, as for a restarted broker: leaderships move to other ISR members and every worker
gets LeaderAndIsr for all of the broker's replicas and a full UpdateMetadata.

Partitions. The owner worker (`shm.owner_for`) of a partition is where everything of the
replica lives: its `Log`, its follower fetcher, the leader's ISR bookkeeping (shrink and
expand through AlterPartition), the high watermark, and, for `__consumer_offsets`, the
groups, for `__transaction_state`, the transactional ids (the transaction APIs are
forwarded to that worker as on a single node; its markers for partitions other workers own
go to them as WriteTxnMarkers over the internal sockets). The other workers know leadership
and epochs from the fanned-out LeaderAndIsr and read the ISR from the slot, where the owner
writes it. A replica is a plain `Partition` whose home, a `runtime/placement.py:SlotResidence`,
says which of the two this worker is. (All of this is `WorkerPlacement`'s, the same for a
single node's lone replicas; this module adds what is ZooKeeper's.) A follower's Fetch served by any
worker records the follower's position in the slot (`shm.SlotFollower`) and pokes the
owner's wake-up pipe; the owner recomputes the high watermark and the ISR from the slot.
Produce on a non-owner is appended by that worker through the partition's append lock (shared
append, `kafkafast.produce.shared.append.cluster`, the default); with that setting false, or a
transactional produce, it goes to the owner with acks=1 (forwarding). For acks=all the
non-owner then parks on the slot like a fetch (waiter byte, wake-up pipe) until the high
watermark passes the batch, so no acks=all request holds the owner's forwarding link.
A wake-up byte wakes the requests parked on a partition whenever the slot's (high
watermark, log end) differs from the pair they were last woken at.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.node import ClusterNode
from kafkafast.runtime import shm
from kafkafast.runtime.placement import WorkerPlacement
from kafkafast.runtime.worker import controlled_shutdown_budget

log = logging.getLogger("kafkafast.replica_manager")
IDENTITY_WAIT_S = 120.0


class WorkerClusterNode(ClusterNode):
    """The session of one worker; the broker id and epoch live in shared memory, written by
    worker 0 (which registers) and read by the others."""

    def __init__(self, config: Any, log_dir: str, table: shm.PartitionTable, index: int) -> None:
        self.table = table
        self.index = index
        previous = table.header_word(shm.H_SESSION)
        super().__init__(config, log_dir)
        if index == 0:  # a new worker 0 (a respawn too): what a predecessor confirmed is void
            table.set_header_word(shm.H_SESSION, ((previous >> 2) + 1) << 2)

    # The fence follows worker 0's session (the registration's), published in the header.
    @property  # type: ignore[override]
    def session_word(self) -> int:
        return self.table.header_word(shm.H_SESSION)

    @session_word.setter
    def session_word(self, value: int) -> None:
        if self.index == 0:
            self.table.set_header_word(shm.H_SESSION, value)

    @property  # type: ignore[override]
    def lease_end_ms(self) -> int:
        return self.table.header_word(shm.H_LEASE_END)

    @lease_end_ms.setter
    def lease_end_ms(self, value: int) -> None:
        if self.index == 0:
            self.table.set_header_word(shm.H_LEASE_END, value)

    @property  # type: ignore[override]
    def broker_epoch(self) -> int:
        return self.table.header_word(shm.H_BROKER_EPOCH)

    @broker_epoch.setter
    def broker_epoch(self, value: int) -> None:
        if self.index == 0:
            self.table.set_header_word(shm.H_BROKER_EPOCH, value)

    def establish_identity(self, configured_cluster_id: str | None) -> tuple[str, int]:
        if self.index == 0:
            cluster_id, broker_id = super().establish_identity(configured_cluster_id)
            self.table.set_header_word(shm.H_BROKER_ID, broker_id + 1)
            return cluster_id, broker_id
        deadline = time.monotonic() + IDENTITY_WAIT_S
        while self.table.header_word(shm.H_BROKER_ID) == 0:
            if time.monotonic() > deadline:
                raise SystemExit("worker 0 did not establish the broker id")
            time.sleep(0.05)
        assert self.zk is not None
        data, _ = self.zk.get(Z.CLUSTER_ID)
        self.cluster_id = Z.loads(data)["id"]
        self.broker_id = self.table.header_word(shm.H_BROKER_ID) - 1
        return self.cluster_id, self.broker_id


class ClusterWorkerPlacement(WorkerPlacement):
    """A worker's placement in cluster mode: the worker placement (the owner worker holds each
    replica and publishes its state in the slot) with what ZooKeeper's broker needs besides
    (`cluster/placement.py:ReplicaPlacement`): worker 0 holds the broker's registration."""

    def on_wake_pipe(self, fd: int) -> None:
        super().on_wake_pipe(fd)
        if self.index == 0 and self.table.header_word(shm.H_REREGISTER) and self.broker.node.controller is not None:
            self.table.set_header_word(shm.H_REREGISTER, 0)
            self.broker.control.register_again()

    # -- the broker's session, start and stop (worker 0 holds the registration) ---------------
    def make_node(self, config: Any, log_dir: str) -> ClusterNode:
        return WorkerClusterNode(config, log_dir, self.table, self.index)

    def before_start(self) -> None:
        if self.index == 0:
            self.table.set_header_word(shm.H_REREGISTER, 0)  # registering now gives everyone everything

    def after_start(self) -> None:
        if self.incarnation > 1 and self.index != 0:
            log.warning("worker %d replaced: registering broker %d again to receive its replica states",
                        self.index, self.broker.node_id)
            self.request_reregistration()

    async def controlled_shutdown(self) -> None:
        """SIGTERM, before any worker stops serving. Worker 0 (the registration's holder) runs
        the controlled shutdown: one ControlledShutdown names the broker, and the controller
        moves every partition the broker leads, whichever worker owns it; worker 0 returns
        once its own view (the fanned-out LeaderAndIsr) shows no replicated partition led
        here, and then drops its ready word. The other workers keep serving clients,
        forwarded requests and the LeaderAndIsr fan-out until then (or until the controlled
        shutdown's time is up), so no worker closes the log of a partition the broker still
        leads."""
        broker = self.broker
        if self.index == 0:
            await broker.control.run_controlled_shutdown()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + controlled_shutdown_budget(broker.config)
        while self.table.worker_word(0, shm.W_READY) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        led = sorted(tp for tp, p in broker.partitions.items()
                     if self.owns(p) and p.is_leader and len(p.replicas) > 1)
        log.info("worker %d: stopping after the controlled shutdown (still leading %d replicated partitions%s)",
                 self.index, len(led), f": {led[:5]}" if led else "")

    def request_reregistration(self) -> None:
        """Worker 0 holds the registration: another worker asks it through the header word."""
        if self.index == 0:
            self.broker.control.register_again()
            return
        self.table.set_header_word(shm.H_REREGISTER, 1)
        self.poke(0)
