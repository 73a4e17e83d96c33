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
go to them as WriteTxnMarkers over the internal sockets). The other workers know leadership and epochs from the fanned-out LeaderAndIsr and
read the ISR from the slot, where the owner writes it. A replica is a plain `Partition` whose
home, a `ClusterSlotResidence`, says which of the two this worker is. A follower's Fetch served by any
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

from kafkafast.broker.broker import now_ms
from kafkafast.broker.partition import Partition
from kafkafast.broker.share import SHARE_STATE_API_KEYS
from kafkafast.broker.share.state_store import STATE_TOPIC
from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.node import ClusterNode
from kafkafast.cluster.share_state import ClusterWorkerShareStateStore
from kafkafast.protocol import api
from kafkafast.protocol import errors as E
from kafkafast.runtime import shm
from kafkafast.runtime.placement import RemoteLog, SlotResidence, WorkerPlacement
from kafkafast.runtime.worker import controlled_shutdown_budget
from kafkafast.security.context import principal_trailer

log = logging.getLogger("kafkafast.replica_manager")
EC = E.ErrorCode
CONTROLLER_REQUESTS = frozenset({4, 5, 6})  # LeaderAndIsr, StopReplica, UpdateMetadata: every worker applies them
TO_CONTROLLER = frozenset({7, 43, 45, 46, 56})  # ControlledShutdown, ElectLeaders, Alter/ListPartitionReassignments, AlterPartition: worker 0 runs the controller
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


class ClusterSlotResidence(SlotResidence):
    """Where a cluster worker's replica lives (its `Partition`'s `home`): the owner worker keeps
    its replica state and publishes it in the slot; on another worker (`remote`) the ISR and the
    high watermark are read there, and on the owner (`announcing`) a wake-up of the requests
    parked on it wakes the other workers' too."""

    __slots__ = ("placement", "remote", "announcing")

    def __init__(self, slot: int, owner: int, placement: ClusterWorkerPlacement) -> None:
        super().__init__(slot, owner, placement.table, known_at_load=False)  # (LeaderAndIsr: its owner has it)
        self.placement = placement
        self.remote = owner != placement.index
        self.announcing = not self.remote

    def isr(self) -> list[int]:
        """The owner's ISR, from the slot (a remote home's)."""
        return self.table.isr(self.slot)

    def announce(self, part: Partition) -> None:
        """The owner woke the requests parked on it: fetches and acks=all produces parked in
        other workers re-check too."""
        self.placement.on_append(part)

    async def wait_for_hw(self, part: Partition, offset: int, timeout_s: float) -> int:
        """An acks=all produce appended by this non-owner waits on the slot, parked like a
        fetch, until the owner's high watermark passes it (`Partition.wait_for_hw`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not part.is_leader:
                return EC.NOT_LEADER_OR_FOLLOWER
            if part.high_watermark >= offset:
                return 0
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return EC.REQUEST_TIMED_OUT
            await self.placement.wait_for_data([part], remaining)


class ClusterWorkerPlacement(WorkerPlacement):
    """A worker's placement in cluster mode (`cluster/placement.py:ReplicaPlacement`): the
    owner worker holds each replica, worker 0 the broker's registration; replica state in the
    partition's slot too."""

    hw_follows_end = False  # the owner's replica bookkeeping publishes a replicated partition's HW

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._topic_ids: dict[str, bytes] = {}  # from LeaderAndIsr (new_replica), UpdateMetadata or ZooKeeper

    @staticmethod
    def shared_append_enabled(config: Any) -> bool:
        """Shared append in cluster mode only with its own setting too (true by default)."""
        return config.get_bool("kafkafast.produce.shared.append") and config.get_bool(
            "kafkafast.produce.shared.append.cluster")

    def group_owner(self, frame: Any, api_key: int) -> int | None:
        """The share coordinator APIs go to the worker owning the key's `__share_group_state`
        partition (it loaded them as its leader); the other group APIs to the group's worker."""
        if api_key not in SHARE_STATE_API_KEYS:
            return super().group_owner(frame, api_key)
        try:
            _, req = api.decode_request(frame)
            partition_for = self.broker.share.store.partition_for
            owners = {self.owner_of(STATE_TOPIC, partition_for((req.group_id, bytes(t.topic_id), p.partition)))
                      for t in req.topics for p in t.partitions}
        except Exception:
            return None  # the normal path answers a malformed request
        return owners.pop() if len(owners) == 1 else None

    def topic_id_of(self, topic: str) -> bytes | None:
        """From LeaderAndIsr, UpdateMetadata or the topic's znode (the slots of a shared-append
        handle, `kafkafast.produce.shared.append.cluster`, too)."""
        topic_id = self._topic_ids.get(topic) or self.broker.metadata.topic_ids.get(topic) or self._zk_topic_id(topic)
        if topic_id is not None:
            self._topic_ids[topic] = topic_id
        return topic_id

    def _zk_topic_id(self, topic: str) -> bytes | None:
        try:
            data, _ = self.broker.node.zk.get(Z.topic_path(topic))  # type: ignore[union-attr]
        except Exception:
            return None
        topic_id, _ = Z.parse_topic_assignment(data)
        return topic_id

    def shared_writer(self, part: Any) -> Any:
        lg = super().shared_writer(part)
        if lg.shared.guard is None:
            slot, table, node_id = part.slot, self.table, self.broker.node_id

            def guard(epoch: int) -> None:  # under the append lock
                if table.leading_epoch(slot) != epoch:
                    raise E.NotLeaderOrFollowerError(
                        f"{part.topic}-{part.index} is not led at epoch {epoch} by broker {node_id}")

            lg.shared.guard = guard
        return lg

    def appends_here(self, part: Any, transactional_id: str | None) -> bool:
        """The owner appends; any worker too, with shared append in cluster mode, while this
        broker leads the partition at the epoch the owner published (not transactional)."""
        if self.owns(part):
            return True
        return (self.shared_append and part.is_leader and transactional_id is None
                and self.table.leading_epoch(part.slot) == part.leader_epoch
                and super().appends_here(part, transactional_id))

    async def handle_frame(self, frame: Any, conn: Any = None, *, internal: bool = False) -> list | None:
        """Controller requests: LeaderAndIsr, UpdateMetadata and StopReplica applied by every
        worker (sent on to the others first), the controller's own APIs forwarded to worker 0."""
        if not internal and len(frame) >= 8:
            api_key = int.from_bytes(frame[0:2], "big", signed=True)
            if api_key in TO_CONTROLLER and self.index != 0:
                return await self.forwarder.frame(0, principal_trailer(frame, conn))
            if api_key in CONTROLLER_REQUESTS:  # authorized on every worker as the controller's principal
                others = [w for w in range(self.workers) if w != self.index]
                copies = [bytearray(principal_trailer(frame, conn)) for _ in others]  # each gets its correlation id
                answers = await asyncio.gather(
                    *(self.forwarder.frame(w, c) for w, c in zip(others, copies)),
                    return_exceptions=True)
                for w, a in zip(others, answers):
                    if isinstance(a, BaseException):
                        log.warning("worker %d did not apply controller request %d: %r", w, api_key, a)
        return await super().handle_frame(frame, conn, internal=internal)

    def on_wake_pipe(self, fd: int) -> None:
        super().on_wake_pipe(fd)
        broker = self.broker
        if self.index == 0 and self.table.header_word(shm.H_REREGISTER) and broker.node.controller is not None:
            self.table.set_header_word(shm.H_REREGISTER, 0)
            broker.control.register_again()
        for part in list(broker.partitions.values()):
            if self.owns(part) and part.is_leader:
                # (the log end from the slot: no catch-up, so no append lock taken on a wake-up)
                part.maybe_increment_hw(broker.node_id)
                for r, f in list(part.followers.items()):  # only followers that fetched since the last look
                    if part.fetches_seen.get(r) != f.last_fetch_ms:
                        part.fetches_seen[r] = f.last_fetch_ms
                        broker.replicas.maybe_expand_isr(part, r, f.leo)

    def _should_wake(self, part: Any) -> bool:
        # Compared with what the parked requests were last woken at, not with what the last
        # reader saw: several requests (fetches, acks=all produces) park on one partition,
        # and a reader between the owner's wake-up byte and this check must not swallow it.
        st = part.log.state
        now = (st.high_watermark, st.log_end_offset)
        if now == part.notified:
            return False
        part.notified = now
        return True

    def _moved(self, part: Any) -> bool:
        st = part.log.state
        return st.high_watermark != part.seen_hw or st.log_end_offset != part.seen_leo

    # -- the broker's session, start and stop (worker 0 holds the registration) ---------------
    def make_node(self, config: Any, log_dir: str) -> ClusterNode:
        return WorkerClusterNode(config, log_dir, self.table, self.index)

    def make_share_store(self) -> ClusterWorkerShareStateStore:
        return ClusterWorkerShareStateStore(self.broker)

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

    # -- shared append of a leader's client produce by any worker --------------------------------
    def append(self, part: Any, records: Any, *, allow_control: bool = False) -> Any:
        broker = self.broker
        if self.owns(part) or not self.shared_append:
            return broker.replicas.append(part, part.log, records, allow_control=allow_control)
        if not part.is_leader:
            raise E.NotLeaderOrFollowerError(f"broker {broker.node_id} does not lead {part.topic}-{part.index}")
        broker.replicas.check_fence(part)
        lg = self.shared_writer(part)
        try:
            result = lg.append(records, part.leader_epoch, now_ms=now_ms(), allow_control=allow_control)
        except OSError as exc:
            raise E.KafkaStorageError(f"{part.topic}-{part.index}: {exc}") from exc
        part.wake()  # fetches parked here
        broker.on_append(part)  # fetches parked in other workers (a follower's waits for the log end)
        self.wake_owner(part)  # the owner moves the high watermark, which wakes acks=all waits
        broker.replicas.check_fence(part)  # as in ReplicaManager.append: written, never acknowledged
        return result

    # -- controller requests: applied by every worker -------------------------------------------
    async def new_replica(self, topic: str, topic_id: bytes, index: int) -> Partition:
        """The owner's replica over its log; another worker's over a `RemoteLog` of the owner's
        files and slot."""
        self._topic_ids[topic] = topic_id  # (the owner's new log takes the slot of this topic id)
        broker = self.broker
        owner = self.owner_of(topic, index)
        if owner == self.index:
            lg = await broker.replica_log(topic, index)
            slot = self.table.allocate(topic_id, index, owner)
        else:
            slot = self.table.allocate(topic_id, index, owner)
            lg = RemoteLog(broker.log_dirs, topic, index, self.table.state(slot), await broker.replica_config(topic))
        return Partition(topic, index, lg, ClusterSlotResidence(slot, owner, self), topic_id)

    def become_leader(self, part: Any, ps: Any) -> None:
        if not self.owns(part):  # the owner leads; this worker learns the role and epoch
            super().become_leader(part, ps)
            return
        if self.shared_append:
            part.log.catch_up()  # other workers' appends of an earlier leadership
        self.broker.replicas.make_leader(part, ps)
        self.table.set_isr(part.slot, part.isr)
        self.table.set_leading_epoch(part.slot, ps.leader_epoch)  # other workers may append now

    def become_follower(self, part: Any, ps: Any) -> None:
        if not self.owns(part):
            super().become_follower(part, ps)
            return
        self.table.set_leading_epoch(part.slot, -1)  # no other worker's append passes the lock after this
        if self.shared_append:
            part.log.catch_up()  # waits for an append in flight: the fetcher starts from the true log end
        self.broker.replicas.make_follower(part, ps)

    def replica_removed(self, part: Any) -> None:
        if self.owns(part):  # (the broker deleted the files)
            self.table.set_leading_epoch(part.slot, -1)
            self.table.release(part.slot)  # the topic is gone; a re-created one has a new id
        else:
            self.close_shared_log(part)
            part.log.close()

    def on_isr_changed(self, part: Any) -> None:
        if part.is_leader:
            self.table.set_isr(part.slot, part.isr)
