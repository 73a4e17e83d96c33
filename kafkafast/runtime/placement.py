"""The placement of a broker over N pre-forked worker processes (see broker/placement.py).

`shm.owner_for(topic, partition, N)` names the one worker that holds a partition's `Log`
writer; the supervisor never changes it, so a replacement worker (a higher incarnation) takes
over exactly its predecessor's partitions. Each partition has a slot in the shared-memory
table (`shm.PartitionTable`) where its owner publishes its state; a worker wakes the requests
parked in another one by a byte on that worker's wake-up pipe; requests travel between
workers over the internal Unix sockets (`forwarding.Forwarder`).

`WorkerPlacement` is this worker's part of that, and the hooks through which the broker
(`Broker`, with cluster mode's control plane or not) runs in a worker:

* logs: `OwnedLogManager` opens only owned partitions (recovering them after a crash:
  the replacement of a SIGKILLed worker runs the recovery scan for its partitions),
  merges its entries into the shared checkpoint files under the table lock, and never
  writes the clean-shutdown marker (the supervisor does, once every worker exited 0).
  Every `Log` publishes into the partition's shared-memory slot; other workers read the
  partition through a `LogReader` over the same files and slot (`RemoteLog`).
* produce for a partition owned elsewhere: appended by this worker itself through shared
  memory (`kafkafast.produce.shared.append`; in cluster mode also `...shared.append.cluster`
  and only while this broker leads it, not transactional there): every worker's
  `Log` of a partition is in shared mode (storage/log.py, runtime/append_lock.py), this
  one opened with `Log.attach` on first use; else (and for transactional produce in
  cluster mode) `forward_produce` (see `forwarding`).
* group/offset requests: forwarded whole to the owner of the group's
  `__consumer_offsets` partition.
* fetch wake-ups: a parked fetch (or acks=all produce) marks its waiter byte in the slot; the owner's append
  writes a byte to the wake-up pipe of every marked worker; the woken worker compares
  the slots' high watermarks with what its fetches saw (no timers involved).
* topic changes bump the metadata generation in shared memory; every request first
  compares it with the generation this worker has loaded and reloads topics if needed.

* replicas: the owner of a partition keeps its replica state (the replica manager's role,
  followers, ISR, high watermark) and publishes the ISR and the leader epoch it leads at in
  the slot (`become_leader`, `on_isr_changed`); the other workers learn the role, read the
  ISR and the high watermark there (`SlotResidence`, `remote`), and append through shared
  memory only while the slot's leader epoch is the one they know. A single node's partitions
  lead alone at epoch 0, so that is a cluster of one; a replicated partition's high watermark
  is the owner's, which recomputes it on a wake-up (`hw_follows_end` false: the control plane
  says whether its replicas are lone ones, `lone_replicas`, and which setting allows shared
  append, `shared_append_enabled`).
* controller requests (LeaderAndIsr, UpdateMetadata, StopReplica) are applied by every worker,
  the controller's own APIs go to worker 0.
* the broker-shared words (`broker_word`: the identity and session a control plane that
  registers the broker keeps, cluster/node.py) are words of the shared-memory header; a
  control plane's wake checks (`add_wake_check`: ZooKeeper's, a new registration another
  worker asked worker 0 for) run on each wake-up. The same class under either control plane:
this package imports nothing of kafkafast/cluster."""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from typing import Any, Awaitable, Callable, Iterable

from kafkafast import clock, native
from kafkafast.broker.broker import OFFSETS_TOPIC, RequestContext
from kafkafast.broker.fetch_sessions import FetchSessionCache
from kafkafast.broker.partition import Partition
from kafkafast.broker.placement import (BROKER_EPOCH_WORD, BROKER_ID_WORD, LEASE_END_WORD, REREGISTER_WORD,
                                        SESSION_WORD, park, unpark)
from kafkafast.broker.quotas import SHARE_FETCH
from kafkafast.broker.share import SHARE_STATE_API_KEYS
from kafkafast.broker.share.manager import CONNECTION_LOST_CLIENT, FINAL_EPOCH
from kafkafast.broker.share.state_store import STATE_TOPIC
from kafkafast.broker.topics import TopicMeta
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.protocol import api
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.delete_records import DeleteRecordsRequest
from kafkafast.protocol._generated.share_acknowledge import ShareAcknowledgeRequest
from kafkafast.protocol._generated.write_txn_markers import WriteTxnMarkersRequest
from kafkafast.records.model import ATTR_TRANSACTIONAL
from kafkafast.runtime import shm
from kafkafast.runtime.append_lock import AppendLock
from kafkafast.runtime.forwarding import Forwarder
from kafkafast.runtime.group_fanout import FANOUT_KEYS, maybe_fan_out
from kafkafast.security.context import carry_principal, principal_trailer, security_of, trailer_bytes
from kafkafast.storage.checkpoint import OffsetCheckpointFile, fsync_dir
from kafkafast.storage.log import Log
from kafkafast.storage.log_manager import DELETE_DIR_SUFFIX, LogManager
from kafkafast.storage.partition_state import PartitionState
from kafkafast.storage.reader import LogReader
from kafkafast.storage.shared_append import SharedAppend

log = logging.getLogger("kafkafast.worker")
_atomic = native.load("shm_atomic")
# The broker-shared words (broker/placement.py) in the shared-memory header.
HEADER_WORDS = {SESSION_WORD: shm.H_SESSION, LEASE_END_WORD: shm.H_LEASE_END, BROKER_EPOCH_WORD: shm.H_BROKER_EPOCH,
                BROKER_ID_WORD: shm.H_BROKER_ID, REREGISTER_WORD: shm.H_REREGISTER}


def _log_share_close_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("telling the group's worker that a share session's connection closed failed: %s",
                    task.exception())

# Group and offset APIs whose requests go whole to the group's coordinator worker.
GROUP_KEYS = {8: "OffsetCommit", 9: "OffsetFetch", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup",
              14: "SyncGroup", 15: "DescribeGroups", 28: "TxnOffsetCommit", 42: "DeleteGroups", 47: "OffsetDelete",
              68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe",
              # Share groups: membership, sessions and share-partition state live with the group.
              76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge",
              83: "InitializeShareGroupState", 84: "ReadShareGroupState", 85: "WriteShareGroupState",
              86: "DeleteShareGroupState", 87: "ReadShareGroupStateSummary", 90: "DescribeShareGroupOffsets",
              91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets"}
SHARE_ACKNOWLEDGE = 79
CONTROLLER_REQUESTS = frozenset({4, 5, 6})  # LeaderAndIsr, StopReplica, UpdateMetadata: every worker applies them
# ControlledShutdown, ElectLeaders, Alter/ListPartitionReassignments, AlterPartition: worker 0 runs the controller
TO_CONTROLLER = frozenset({7, 43, 45, 46, 56})
# Transaction coordinator APIs: forwarded whole to the worker owning the id's __transaction_state partition.
TXN_KEYS = {22: "InitProducerId", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn",
            65: "DescribeTransactions"}
# The keys `handle_frame` may send elsewhere (`_route`); every other request is served by the worker it reached.
ROUTED_KEYS = frozenset(TO_CONTROLLER | CONTROLLER_REQUESTS | FANOUT_KEYS | set(GROUP_KEYS) | set(TXN_KEYS))


def _transactional_ids(api_key: int, req: Any) -> list[str]:
    if api_key == 65:
        return list(req.transactional_ids or [])
    if api_key == 24:
        if getattr(req, "transactions", None):
            return [t.transactional_id for t in req.transactions]
        return [req.v3_and_below_transactional_id] if req.v3_and_below_transactional_id else []
    tid = getattr(req, "transactional_id", None)
    return [tid] if tid else []  # InitProducerId without one: idempotent, answered anywhere


def _group_ids(api_key: int, req: Any) -> list[str]:
    if api_key == 15:
        return list(req.groups or [])
    if api_key == 42:
        return list(req.groups_names or [])
    if api_key in (69, 77):
        return list(req.group_ids or [])
    if api_key in (9, 90) and getattr(req, "groups", None):
        return [g.group_id for g in req.groups]
    gid = getattr(req, "group_id", None)
    return [gid] if gid is not None else []


class OwnedLogManager(LogManager):
    """A LogManager over the partitions one worker owns (see the module docstring)."""

    def __init__(self, log_dirs: list[str], default_config: Any, *, owns: Any, clean: bool,
                 table: shm.PartitionTable, **kw: Any) -> None:
        super().__init__(log_dirs, default_config, **kw)
        self.owns = owns
        self.clean = clean
        self.table = table

    def load_all(self, configs: Any = None) -> None:
        self.last_load_clean = self.clean  # the supervisor's decision (storage.log_manager.clean_start)
        for log_dir in self.log_dirs:
            self._load_dir(log_dir, configs, clean=self.clean, owned=self.owns)

    def _write_checkpoint(self, path: str, entries: dict) -> None:
        """Replaces this worker's entries in the shared checkpoint file (others' stay)."""
        with self.table.locked():
            merged = {k: v for k, v in self._read_checkpoint(path).items() if not self.owns(*k)}
            merged.update(entries)
            OffsetCheckpointFile(path).write(merged)

    def _mark_clean(self, log_dir: str) -> None:
        """The supervisor writes the markers, once every worker stopped with everything written."""

    def forget(self, topic: str, partition: int) -> None:
        """Drops a deleted partition's log (its directory may already be gone)."""
        key = (topic, partition)
        lg = self._logs.pop(key, None) or self.offline.pop(key, None)
        self._dir_of.pop(key, None)
        if lg is not None:
            lg.close(clean=False)
            if os.path.isdir(lg.dir):
                remove_partition_dir(lg.dir)


def remove_partition_dir(path: str) -> None:
    """Rename to `<name>.<uuid>-delete`, then remove (as LogManager.delete does)."""
    parent = os.path.dirname(path)
    doomed = f"{path}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    try:
        os.rename(path, doomed)
    except FileNotFoundError:
        return
    fsync_dir(parent)
    shutil.rmtree(doomed, ignore_errors=True)


def partition_dir(log_dirs: list[str], topic: str, partition: int) -> str:
    """The directory of a partition another worker loaded (the first log dir that has it)."""
    name = f"{topic}-{partition}"
    return next((os.path.join(d, name) for d in log_dirs if os.path.isdir(os.path.join(d, name))),
                os.path.join(log_dirs[0], name))


class RemoteLog:
    """A partition appended to by another worker: reads only, from the files and the slot."""

    __slots__ = ("topic", "partition", "state", "config", "_dirs", "_reader")

    def __init__(self, log_dirs: list[str], topic: str, partition: int, state: shm.SlotState, config: Any) -> None:
        self.topic = topic
        self.partition = partition
        self.state = state
        self.config = config
        self._dirs = log_dirs
        self._reader: LogReader | None = None

    @property
    def reader(self) -> LogReader:
        r = self._reader
        if r is None or (len(self._dirs) > 1 and not os.path.isdir(r.dir)):
            path = partition_dir(self._dirs, self.topic, self.partition)
            if r is not None:
                r.close()
            r = self._reader = LogReader(path, self.state, topic=self.topic, partition=self.partition)
        return r

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.reader.offset_for_timestamp(timestamp)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        return self.reader.max_timestamp_offset()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class SlotResidence:
    """Where a partition lives among the workers (a `Partition`'s `home`): its owner worker, which
    holds its writer and keeps its replica state (role, ISR, high watermark, followers), and its
    slot in the shared partition table, where the owner publishes that state. On another worker
    (`remote`) the ISR and the high watermark are read there; on the owner (`announcing`) a
    wake-up of the requests parked on it wakes the other workers' too (a lone replica's append
    paths wake them themselves: `on_append`)."""

    __slots__ = ("slot", "owner", "table", "known_at_load", "placement", "remote", "announcing")

    def __init__(self, slot: int, owner: int, placement: WorkerPlacement, known_at_load: bool) -> None:
        self.slot = slot
        self.owner = owner
        self.table = placement.table
        self.placement = placement
        self.known_at_load = known_at_load  # its topic was there when this worker loaded: it may hold records
        self.remote = owner != placement.index
        self.announcing = not self.remote

    @property
    def loading(self) -> bool:
        """Until its owner has loaded its partitions in this start, the slot of a partition
        this worker found at its own load holds zeros (the table is new at every start), not
        its state: nothing may be read from it. A partition created after that (or named by a
        LeaderAndIsr, which its owner applies too) is empty until its owner opens it (no append
        happens before: a produce goes to the owner until it has), so its zeros are its state."""
        return self.known_at_load and not self.table.worker_word(self.owner, shm.W_LOADED)

    def leading_epoch(self) -> int:
        """The leader epoch the owner published that it leads the partition at, from the slot
        (-1: none yet; meaningful once not `loading`)."""
        return self.table.leading_epoch(self.slot)

    def isr(self, part: Partition) -> list[int]:
        """The owner's ISR, from the slot (a remote home's); before the owner published one
        (it has not led the partition yet: a produce goes to it), the last partition state's."""
        return self.table.isr(self.slot) or part.isr

    def published_isr(self) -> list[int]:
        """The ISR the owner published in the slot (empty: none yet)."""
        return self.table.isr(self.slot)

    def announce(self, part: Partition) -> None:
        """The owner woke the requests parked on it: fetches and acks=all produces parked in
        other workers re-check too."""
        self.placement.on_append(part)

    def on_hw(self, part: Partition, offset: int, done: Callable[[int], None]) -> None:
        """`Partition.on_hw` of a partition another worker keeps: parked on its slot like a
        fetch (`WorkerPlacement.park_hw`)."""
        self.placement.park_hw(part, offset, done)

    async def wait_for_hw(self, part: Partition, offset: int, timeout_s: float) -> int:
        """An acks=all produce appended by this non-owner waits on the slot, parked like a
        fetch, until the owner's high watermark passes it (`Partition.wait_for_hw`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not part.is_leader:
                return E.ErrorCode.NOT_LEADER_OR_FOLLOWER
            if part.high_watermark >= offset:
                return 0
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return E.ErrorCode.REQUEST_TIMED_OUT
            await self.placement.wait_for_data([part], remaining)


class WorkerPlacement:
    """This worker among the broker's N (the `Placement` interface, the means to reach the
    others, and the broker's worker paths: see the module docstring)."""

    def __init__(self, *, index: int, incarnation: int, table: shm.PartitionTable, wake_fds: list[int],
                 run_dir: str, clean: bool) -> None:
        self.index = index
        self.incarnation = incarnation
        self.table = table
        self.workers = table.workers
        self.wake_fds = wake_fds  # write ends, one per worker
        self.forwarder = Forwarder(run_dir, index)
        self._share_sessions: dict[tuple[str, str], Any] = {}  # share sessions opened through here: their connection
        self.wakeups_sent = 0
        self.wakeups_coalesced = 0  # pokes that found the worker's wake-up still pending: no byte written
        self.clean = clean  # the supervisor's decision: the last stop was clean (no recovery scan)
        self.broker: Any = None
        self.shared_append = False
        # A lone replica's high watermark is its log end, published with each append; a
        # replicated partition's is the owner's replica bookkeeping, moved on a wake-up. Any
        # worker appends a lone replica's transactional produce (see `appends_here`).
        self.hw_follows_end = True
        self.shared_append_transactional = True
        self._seen_generation = -1
        self._seen_acl_generation = 0  # (a respawned worker's first request re-reads the ACLs: harmless)
        self._parked: dict[int, Any] = {}  # slot -> partition with fetches or acks=all produces parked here
        self._hw_parked: dict[int, Any] = {}  # slot -> remote partition with acks=all waits (`park_hw`)
        self._led: dict[tuple[str, int], Any] = {}  # owned partitions led here: a wake-up's recheck (`_recheck_led`)
        self.owner_wakes_skipped = 0  # `wake_owner` calls that could not move the owner's high watermark nor ISR
        self._load_started = 0.0
        self._topic_ids: dict[str, bytes] = {}  # named by the controller (new_replica)
        self._wake_checks: list[Callable[[], None]] = []  # the control plane's, on each wake-up
        # (the per-request and per-append paths read these words and bytes directly: no call each)
        self._q = table.q
        self._waiter_bytes = table.b
        self._others = tuple((w, shm.HEADER_BYTES + shm.WAITERS_AT + w) for w in range(self.workers) if w != index)

    def attach(self, broker: Any) -> None:
        """The broker's worker parts: its fetch sessions are this worker's shard, its logs the owned ones."""
        self.broker = broker
        config = broker.config
        broker.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"),
                                                  shard=self.index, shards=self.workers)
        control = broker.control  # (what its replicas are: a lone broker's, or replicated)
        self.shared_append = broker.shared_append = control.shared_append_enabled(config)
        self.hw_follows_end = self.shared_append_transactional = control.lone_replicas
        broker.log_manager = OwnedLogManager(broker.log_dirs, broker.default_log_config, owns=self.owns_key,
                                             clean=self.clean, table=self.table, state_factory=self._state_for,
                                             shared_factory=self._shared_for if self.shared_append else None,
                                             **broker.log_manager_settings())

    def owner_of(self, topic: str, partition: int) -> int:
        return shm.owner_for(topic, partition, self.workers)

    def owns_key(self, topic: str, partition: int) -> bool:
        return self.owner_of(topic, partition) == self.index

    def poke(self, worker: int) -> None:
        """A byte on the worker's wake-up pipe: it re-checks what its parked requests wait for.
        None when a wake-up is pending there already (its wake-pending word is 1: it has not
        drained its pipe yet, and re-checks after it does; see shm's "Wake-ups")."""
        table = self.table
        if not _atomic.compare_and_swap(table.mm, table.worker_word_offset(worker, shm.W_WAKE_PENDING), 0, 1):
            self.wakeups_coalesced += 1
            return
        self.wakeups_sent += 1
        try:
            os.write(self.wake_fds[worker], b"\x01")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def add_wake_check(self, check: Callable[[], None]) -> None:
        self._wake_checks.append(check)

    def broker_word(self, word: int) -> int:
        return self._q[HEADER_WORDS[word]]

    def set_broker_word(self, word: int, value: int) -> None:
        self.table.set_header_word(HEADER_WORDS[word], value)

    def process_serving(self, index: int) -> bool:
        return bool(self.table.worker_word(index, shm.W_READY))

    def wake_owner(self, part: Any) -> None:
        """Another worker's partition changed here (an append, a follower's fetch): its owner
        re-checks, when what changed can move its high watermark or its ISR (`_owner_may_move`)."""
        if self._owner_may_move(part):
            self.poke(part.owner)
        else:
            self.owner_wakes_skipped += 1

    def _owner_may_move(self, part: Any) -> bool:
        """Whether the owner's recheck (`_recheck_led`) could change anything, from the slot: the
        high watermark the published ISR allows (the smallest log end over its members; the
        owner's own rule takes pending additions too, so never more) is above the published one,
        or a follower is out of the ISR (it may rejoin). Otherwise the owner's wake-up (a pipe
        byte, a loop pass there, a recheck of its led partitions) would find nothing to do: after
        a non-owner's append the followers have not fetched it yet, and most follower fetches
        report a log end that is not the smallest. (A follower's fetch served on the owner moves
        the high watermark there; one served here is checked here after its position is
        written, so the last of two concurrent fetches sees both positions: a read that missed
        the other's store still in its store buffer is retried by the next fetch, within
        replica.fetch.wait.max.ms.)"""
        table, slot = self.table, part.slot
        isr = table.isr(slot)
        if not isr:
            return True
        st = part.log.state
        new_hw = st.log_end_offset
        me = self.broker.node_id
        for r in isr:
            if r == me:
                continue
            f = table.follower(slot, r)
            if f is None:
                return True  # no entry yet: the owner's own record, which this cannot read
            leo = f.leo
            if leo < new_hw:
                new_hw = leo
        if new_hw > st.high_watermark:
            return True
        return any(r != me and r not in isr for r in part.replicas)

    def slot_follower(self, part: Any, replica_id: int) -> Any:
        """The owner's record of a follower of a partition another worker owns, in its slot."""
        return self.table.follower(part.slot, replica_id)

    def claim_slot_follower(self, part: Any, replica_id: int, replicas: set[int]) -> Any:
        """The owner's record of a new follower, in the slot (None: no room, it stays local)."""
        return self.table.follower(part.slot, replica_id, claim_keeping=replicas)

    # -- roles (the replica manager's, broker/replica_manager.py) --------------------------
    def become_leader(self, part: Any, ps: Any) -> None:
        """The owner leads and publishes the ISR and the leader epoch it leads at in the slot
        (from then on other workers may append: `appends_here`); another worker learns the
        role and epoch."""
        if not self.owns(part):
            new = part.new_leadership(ps)
            part.apply_state(ps, is_leader=True)
            part.wake()
            if new and len(ps.replicas) > 1:  # a follower's fetcher not at its home worker parks here
                self.broker.replicas.took_leadership(part, ps.replicas)
            return
        if self.shared_append and not part.state.offline:
            part.log.catch_up()  # other workers' appends of an earlier leadership
        self.broker.replicas.make_leader(part, ps)
        self._led[(part.topic, part.index)] = part
        self.table.set_isr(part.slot, part.isr)
        self.table.set_leading_epoch(part.slot, ps.leader_epoch)

    def become_follower(self, part: Any, ps: Any) -> None:
        if not self.owns(part):
            part.apply_state(ps, is_leader=False)
            part.fail_waiters(E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
            part.wake()
            return
        self.table.set_leading_epoch(part.slot, -1)  # no other worker's append passes the lock after this
        self._led.pop((part.topic, part.index), None)
        if self.shared_append and not part.state.offline:
            part.log.catch_up()  # waits for an append in flight: the fetcher starts from the true log end
        self.broker.replicas.make_follower(part, ps)

    def on_isr_changed(self, part: Any) -> None:
        """After an ISR change of `part` (a leader's AlterPartition, accepted or not): the
        owner publishes it."""
        if part.is_leader:
            self.table.set_isr(part.slot, part.isr)

    def replica_removed(self, part: Any) -> None:
        """StopReplica deleted `part` (the broker deleted the files): its owner frees the slot
        (a re-created topic has a new id), another worker closes what it read or wrote it with."""
        if self.owns(part):
            self._led.pop((part.topic, part.index), None)
            self.table.set_leading_epoch(part.slot, -1)
            self.table.release(part.slot)
        else:
            self.close_shared_log(part)
            part.log.close()

    async def new_replica(self, topic: str, topic_id: bytes, index: int) -> Partition:
        """A replica the controller named this broker's: the owner's over its log; another
        worker's over a `RemoteLog` of the owner's files and slot."""
        self._topic_ids[topic] = topic_id  # (the owner's new log takes the slot of this topic id)
        broker = self.broker
        owner = self.owner_of(topic, index)
        if owner == self.index:
            lg = await broker.replica_log(topic, index)
            slot = self.table.allocate(topic_id, index, owner)
        else:
            slot = self.table.allocate(topic_id, index, owner)
            lg = RemoteLog(broker.log_dirs, topic, index, self.table.state(slot), await broker.replica_config(topic))
        return Partition(topic, index, lg, SlotResidence(slot, owner, self, known_at_load=False), topic_id)

    def wake_others_parked_on(self, slot: int) -> None:
        """Pokes every other worker with requests parked on the slot's partition (its waiter byte)."""
        b, base = self._waiter_bytes, slot * shm.SLOT_BYTES
        for w, at in self._others:  # (the waiter byte of worker w in slot 0)
            if b[base + at]:
                self.poke(w)

    # -- ownership ----------------------------------------------------------------------
    def owns(self, part: Partition) -> bool:
        owner = part.owner  # (-1: at home in this process, not in a slot yet)
        return owner == self.index or owner < 0

    def partition_loaded(self, part: Partition) -> bool:
        """Owned here, or its owner serves (it loaded and published its partitions before that)."""
        return self.broker.owns(part) or \
            self.table.worker_word(part.owner, shm.W_READY) == 1

    def topic_id_of(self, topic: str) -> bytes | None:
        """The id of a topic whose partition gets a slot (None: a leftover of a deleted topic):
        the controller's (new_replica), else the topic store's (the control plane's)."""
        topic_id = self._topic_ids.get(topic)
        return topic_id if topic_id is not None else self.broker.control.stored_topic_id(topic)

    def _shared_for(self, topic: str, partition: int) -> SharedAppend | None:
        """The append lock and slot words every worker's Log of the partition shares."""
        topic_id = self.topic_id_of(topic)
        if topic_id is None:
            return None
        slot = self.table.allocate(topic_id, partition, self.owner_of(topic, partition))
        return self._shared_of_slot(slot)

    def _shared_of_slot(self, slot: int) -> SharedAppend:
        t = self.table
        sh = SharedAppend(AppendLock(t, slot, self.incarnation), t.q,
                          t.slot_word_offset(slot, shm.S_APPEND_GEN) // 8, t.slot_word_offset(slot, shm.S_SHARED) // 8,
                          t.slot_word_offset(slot, shm.S_TAKEOVERS) // 8)
        sh.hw_follows_end = self.hw_follows_end
        return sh

    def _state_for(self, topic: str, partition: int) -> Any:
        topic_id = self.topic_id_of(topic)
        if topic_id is None:
            return PartitionState()  # a leftover directory of a deleted topic
        slot = self.table.allocate(topic_id, partition, self.owner_of(topic, partition))
        self.table.set_incarnation(slot, self.incarnation)
        return self.table.state(slot)

    # -- lifecycle ----------------------------------------------------------------------
    def before_load(self) -> None:
        self._seen_generation = self.table.metadata_generation
        self._load_started = time.monotonic()

    def after_load(self) -> None:
        """Removes what this worker found of deleted topics; its slots hold published state from now on."""
        broker = self.broker
        live = broker.topics.topics
        for lg in broker.log_manager.all_logs():
            meta = live.get(lg.topic)
            if meta is None or lg.partition >= meta.partitions:
                log.info("removing %s-%d: its topic no longer exists", lg.topic, lg.partition)
                broker.log_manager.forget(lg.topic, lg.partition)
        scanned = {k: v for k, v in broker.log_manager.last_load_recovered.items() if v}
        self.table.set_worker_word(self.index, shm.W_RECOVERED, len(scanned))
        self.table.set_worker_word(self.index, shm.W_LOADED, 1)
        log.info("worker %d (incarnation %d): %d owned partitions loaded in %.2fs; recovery scan of %d bytes "
                 "in %d partitions", self.index, self.incarnation, len(broker.log_manager.all_logs()),
                 time.monotonic() - self._load_started, sum(scanned.values()), len(scanned))

    def before_stop(self) -> None:
        for p in self._parked.values():
            self.table.set_waiting(p.slot, self.index, False)
        self._parked.clear()
        self._hw_parked.clear()

    def after_stop(self) -> None:
        self.forwarder.close()
        for p in self.broker.partitions.values():
            if isinstance(p.log, RemoteLog):
                p.log.close()
            self.close_shared_log(p)

    @staticmethod
    def close_shared_log(part: Any) -> None:
        lg = part.shared_log
        if lg is None:
            return
        part.shared_log = None
        try:
            lg.active_segment.flush()  # what this worker appended is on disk before a clean stop
        except OSError as exc:
            log.warning("%s-%d: flushing the shared writer failed: %s", part.topic, part.index, exc)
        lg.close(clean=False)

    # -- topics -------------------------------------------------------------------------
    def open_topic(self, meta: TopicMeta) -> None:
        broker = self.broker
        cfg = broker.topic_log_config(meta)
        for i in range(meta.partitions):
            key = (meta.name, i)
            if key in broker.partitions:
                continue
            owner = self.owner_of(meta.name, i)
            slot = self.table.allocate(meta.topic_id, i, owner)
            if owner == self.index:
                lg = broker.log_manager.get(meta.name, i)
                if lg is None:
                    self.table.set_incarnation(slot, self.incarnation)
                    lg = broker.log_manager.create(meta.name, i, cfg)
            else:
                lg = RemoteLog(broker.log_dirs, meta.name, i, self.table.state(slot), cfg)
            home = SlotResidence(slot, owner, self, known_at_load=not broker.started)
            part = broker.partitions[key] = Partition(meta.name, i, lg, home, meta.topic_id)
            broker.control.partition_opened(part)

    def _drop(self, key: tuple[str, int]) -> None:
        broker = self.broker
        part = broker.partitions.pop(key, None)
        if part is None:
            return
        part.wake()
        self.close_shared_log(part)
        if isinstance(part.log, RemoteLog):
            part.log.close()
        elif broker.owns(part):
            broker.log_manager.forget(*key)

    def refresh_topics(self) -> None:
        broker = self.broker
        self._seen_generation = self.table.metadata_generation
        broker.topics.load()
        if broker.topics.generation != broker._topics_applied:
            broker._apply_topics()

    def apply_topics(self) -> None:
        broker = self.broker
        broker._topics_applied = broker.topics.generation
        live = broker.topics.topics
        for key, part in list(broker.partitions.items()):
            meta = live.get(key[0])
            if meta is None or key[1] >= meta.partitions or meta.topic_id != part.topic_id:
                self._drop(key)
            elif broker.owns(part):
                part.log.config = broker.topic_log_config(meta)
            elif part.shared_log is not None:
                part.shared_log.config = broker.topic_log_config(meta)
        for t in live.values():
            broker._open_topic(t)

    def delete_topic(self, name: str) -> None:
        broker = self.broker
        with broker.topics.change() as topics:
            meta = topics.pop(name, None)
            if meta is None:
                raise E.UnknownTopicOrPartitionError()
        for i in range(meta.partitions):
            self._drop((name, i))
            slot = self.table.find(meta.topic_id, i)
            if slot >= 0:
                self.table.release(slot)
            # The owner (if another worker) drops its writer when it sees the new
            # generation; the files go now so a re-created topic starts empty.
            for d in broker.log_dirs:
                path = os.path.join(d, f"{name}-{i}")
                if os.path.isdir(path):
                    remove_partition_dir(path)
        broker._apply_topics()
        broker.notify_metadata_changed()

    def metadata_changed(self) -> None:
        self._seen_generation = self.table.bump_metadata_generation()

    def acls_changed(self) -> None:
        # (not marked seen here: a change another worker made meanwhile must be read too)
        self.table.bump_acl_generation()

    def _reload_acls(self) -> None:
        self._seen_acl_generation = self.table.acl_generation
        authorizer = security_of(self.broker).authorizer
        if authorizer is not None:
            authorizer.reload()

    # -- data path ----------------------------------------------------------------------
    def appends_here(self, part: Partition, transactional_id: str | None) -> bool:
        """The owner appends; with shared append any worker does while this broker leads the
        partition at the epoch the owner published (it loaded the partition and leads it: the
        slot's append generation moved, its leading epoch is set). A transactional produce too
        where `shared_append_transactional` (the caught-up producer state keeps the open
        transaction's first offset, so the LSO it publishes holds there; markers and
        `.txnindex` stay with the owner)."""
        if self.broker.owns(part):
            return True
        if not self.shared_append or not part.is_leader:
            return False
        if transactional_id is not None and not self.shared_append_transactional:
            return False
        table, slot = self.table, part.slot
        return table.leading_epoch(slot) == part.leader_epoch and \
            table.q[table.slot_word_offset(slot, shm.S_APPEND_GEN) // 8] > 0

    def append(self, part: Partition, records: Any, *, allow_control: bool = False) -> Any:
        """The owner's append is the replica manager's; a non-owner's goes through its
        shared-mode Log under the partition's append lock, then wakes the fetches parked here
        and in other workers, and the owner where the append did not publish the high
        watermark (a replicated partition's is the owner's bookkeeping)."""
        replicas = self.broker.replicas
        if self.broker.owns(part) or not self.shared_append:
            return replicas.append(part, part.log, records, allow_control=allow_control)
        if not part.is_leader:
            raise E.NotLeaderOrFollowerError(f"broker {self.broker.node_id} does not lead {part.topic}-{part.index}")
        fenced = replicas.fence_reason is not None
        if fenced:
            replicas.check_fence(part)
        lg = self.shared_writer(part)
        try:
            res = lg.append(records, part.leader_epoch, now_ms=clock.now_ms(), allow_control=allow_control)
        except OSError as exc:
            raise E.KafkaStorageError(f"{part.topic}-{part.index}: {exc}") from exc
        part.wake()
        self.on_append(part)
        if not lg.publishes_high_watermark:
            self.wake_owner(part)  # the owner moves the high watermark, which wakes acks=all waits
        if fenced:
            replicas.check_fence(part)  # as in ReplicaManager.append: written, never acknowledged
        if not part.shared_txn_logged and len(records) > 22 and records[22] & ATTR_TRANSACTIONAL:  # type: ignore
            part.shared_txn_logged = True
            log.info("worker %d appended a transactional batch to %s-%d (owner: worker %d) through shared memory",
                     self.index, part.topic, part.index, part.owner)
        return res

    def shared_writer(self, part: Any) -> Log:
        """This (non-owner) worker's shared-mode Log of `part`, attached on first use; its
        appends pass the lock only while the owner publishes the epoch they are made at."""
        lg = part.shared_log
        if lg is None:
            try:
                lg = Log.attach(partition_dir(self.broker.log_dirs, part.topic, part.index), part.topic, part.index,
                                part.log.config, self.table.state(part.slot),
                                self._shared_of_slot(part.slot))
            except OSError as exc:
                raise E.KafkaStorageError(f"{part.topic}-{part.index}: {exc}") from exc
            slot, table, node_id = part.slot, self.table, self.broker.node_id

            def guard(epoch: int) -> None:  # under the append lock
                if table.leading_epoch(slot) != epoch:
                    raise E.NotLeaderOrFollowerError(
                        f"{part.topic}-{part.index} is not led at epoch {epoch} by broker {node_id}")

            lg.shared.guard = guard
            part.shared_log = lg
            log.info("worker %d appends to %s-%d (owner: worker %d) through shared memory", self.index,
                     part.topic, part.index, part.owner)
        return lg

    def forward_produce(self, part: Any, records: Any, acks: int, timeout_ms: int) -> Any:
        return self.forwarder.produce(part.owner, part.topic, part.index, records, acks, timeout_ms)

    async def delete_records(self, part: Partition, offset: int, *, internal: bool = False) -> None:
        if self.broker.owns(part) or internal:
            await self.broker.local_delete_records(part, offset)
            return
        T = DeleteRecordsRequest.DeleteRecordsTopic
        P = DeleteRecordsRequest.DeleteRecordsPartition
        req = DeleteRecordsRequest(topics=[T(name=part.topic, partitions=[P(partition_index=part.index, offset=offset)])],
                                   timeout_ms=30000)
        resp = await self.forwarder.request(part.owner, req, 1)
        code = resp.topics[0].partitions[0].error_code
        if code:
            E.raise_for_code(code)

    def on_append(self, part: Partition) -> None:
        self.wake_others_parked_on(part.slot)

    def _hold(self, p: Any) -> None:
        """One more request parked on `p` here: its waiter byte marks this worker (the owner's
        wake-ups reach it)."""
        if p.parked == 0:
            self._waiter_bytes[shm.HEADER_BYTES + shm.WAITERS_AT + self.index + p.slot * shm.SLOT_BYTES] = 1
            self._parked[p.slot] = p
        p.parked += 1

    def _unhold(self, p: Any) -> None:
        p.parked -= 1
        if p.parked == 0:
            self._waiter_bytes[shm.HEADER_BYTES + shm.WAITERS_AT + self.index + p.slot * shm.SLOT_BYTES] = 0
            self._parked.pop(p.slot, None)

    def park_hw(self, part: Any, offset: int, done: Callable[[int], None]) -> None:
        """An acks=all produce this non-owner appended waits for the owner's high watermark
        without a task: its `done` joins the partition's `hw_waiters`, the partition is
        parked here (waiter byte) while any is left, and the wake-up that finds the published
        high watermark past it calls `done(0)` (`_pass_remote_hw`); a lost leadership fails it
        (`Partition.fail_waiters`), the produce's own timer times it out."""
        part.hw_waiters.append((offset, done))
        if self._hw_parked.get(part.slot) is not part:
            self._hw_parked[part.slot] = part
            self._hold(part)
        # the byte is set: a high watermark published before it (no wake-up came) is seen now
        self._pass_remote_hw(part)

    def _pass_remote_hw(self, part: Any) -> None:
        """The waits of `part` its published high watermark passed answered (all of them failed
        once this worker no longer sees this broker lead it); parked while any is left."""
        if part.hw_waiters:
            if part.is_leader:
                part.pass_hw_waiters(part.state.high_watermark)
            else:
                part.fail_waiters(E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
        parked = self._hw_parked.get(part.slot) is part
        if not part.hw_waiters:
            if parked:
                del self._hw_parked[part.slot]
                self._unhold(part)
        elif not parked:
            # An answer's callback reached this partition again and found none left while this
            # call held them aside: parked again, and looked at once more (the byte was clear).
            self._hw_parked[part.slot] = part
            self._hold(part)
            self._pass_remote_hw(part)

    async def wait_for_data(self, parts: Iterable[Partition], timeout: float) -> None:
        parts = [p for p in parts if p.slot >= 0]
        for p in parts:
            self._hold(p)
        try:
            # An append between the fetch's read and the waiter byte saw no waiter: re-check
            # (no await between this and the wait's registration: no wake-up is lost).
            if not any(self._moved(p) for p in parts):
                # (`wait_for_wake` without its coroutine: one frame less on the park's resume)
                fut, timer = park(parts, timeout)
                try:
                    await fut
                finally:
                    unpark(parts, fut, timer)
        finally:
            for p in parts:
                self._unhold(p)

    def on_wake_pipe(self, fd: int) -> None:
        # One read takes every byte there (the wake-pending word lets at most a few in): a second
        # read to see EAGAIN would cost a syscall and an exception on every wake-up; a byte
        # written after this read makes the pipe readable again.
        try:
            while len(os.read(fd, 4096)) == 4096:
                pass
        except BlockingIOError:
            pass
        # Cleared after the drain (a byte written after this clear stays in the pipe for the next
        # call; cleared before it, the drain could swallow it with the word left 1 and no byte
        # to come: every later wake-up would be coalesced into none) and before the re-checks
        # (a full barrier: they read what a waker that found the word still 1 published).
        table = self.table
        _atomic.store(table.mm, table.worker_word_offset(self.index, shm.W_WAKE_PENDING), 0)
        for p in list(self._parked.values()):
            if self._should_wake(p):
                p.wake()
        for p in list(self._hw_parked.values()):
            self._pass_remote_hw(p)
        if not self.hw_follows_end:  # other workers appended or served a follower: the owner's turn
            self._recheck_led()
        for check in self._wake_checks:
            check()

    def _recheck_led(self) -> None:
        """The high watermark and the ISR of each partition led here, recomputed from the slot."""
        broker = self.broker
        for key, part in list(self._led.items()):
            if broker.partitions.get(key) is not part:
                del self._led[key]  # deleted (or re-created: its new partition registers when it leads)
                continue
            if part.is_leader:
                # (the log end from the slot: no catch-up, so no append lock taken on a wake-up)
                part.maybe_increment_hw(broker.node_id)
                for r, f in list(part.followers.items()):  # only followers that fetched since the last look
                    if part.fetches_seen.get(r) != f.last_fetch_ms:
                        part.fetches_seen[r] = f.last_fetch_ms
                        broker.replicas.maybe_expand_isr(part, r, f.leo)

    def _should_wake(self, part: Any) -> bool:
        """On a wake-up byte: whether the requests parked on this partition re-check. Compared
        with what they were last woken at, not with what the last reader saw: several requests
        (fetches, acks=all produces) park on one partition, and a reader between the wake-up
        byte and this check must not swallow it."""
        st = part.log.state
        now = (st.high_watermark, st.log_end_offset)
        if now == part.notified:
            return False
        part.notified = now
        return True

    def _moved(self, part: Any) -> bool:
        """Whether what a parked request waits for changed since it looked: the high watermark
        (a consumer's fetch), the log end (a follower's)."""
        st = part.log.state
        return st.high_watermark != part.seen_hw or st.log_end_offset != part.seen_leo

    # -- dispatch -----------------------------------------------------------------------
    def handle_frame(self, frame: Any, conn: Any = None, *, internal: bool = False) -> Awaitable[list | None]:
        """Controller requests: LeaderAndIsr, UpdateMetadata and StopReplica applied by every
        worker (sent on to the others first), the controller's own APIs forwarded to worker 0
        (where the control plane's controller runs). Group, transaction and share requests go
        to the worker holding their coordinator's partition (`_route`); the rest (produce,
        fetch, metadata...) is served here, awaited by the caller straight from
        `Broker.dispatch`: no coroutine of this method on every resume of the request."""
        if not internal and len(frame) >= 8 and int.from_bytes(frame[0:2], "big", signed=True) in ROUTED_KEYS:
            return self._route(frame, conn)
        q = self._q
        if q[shm.H_METADATA_GEN] != self._seen_generation or q[shm.H_ACL_GEN] != self._seen_acl_generation:
            self._catch_up()
        return self.broker.dispatch(frame, conn, internal=internal)

    def _catch_up(self) -> None:
        """The topics and ACLs other workers changed since this worker last looked, reloaded."""
        generation = self.table.metadata_generation
        if generation != self._seen_generation:
            self.broker.refresh_topics()
            # Seen, whether or not the control plane's refresh reloaded the topic file (ZooKeeper
            # mode's does not: the controller's UpdateMetadata keeps its image), so the next
            # request does not refresh again; generations only grow.
            self._seen_generation = max(self._seen_generation, generation)
        if self.table.acl_generation != self._seen_acl_generation:
            self._reload_acls()

    async def _route(self, frame: Any, conn: Any) -> list | None:
        """`handle_frame` of a client's request with a key in ROUTED_KEYS."""
        broker = self.broker
        api_key = int.from_bytes(frame[0:2], "big", signed=True)
        if api_key in TO_CONTROLLER and self.index != 0:
            return await self.forwarder.frame(0, principal_trailer(frame, conn))
        if api_key in CONTROLLER_REQUESTS:  # authorized on every worker as the controller's principal
            await self._apply_everywhere(api_key, frame, conn)
        self._catch_up()
        if api_key in FANOUT_KEYS and api_key in broker.handlers and broker.group_coordinator is not None:
            carry_principal(conn)  # the split requests are authorized as this client
            parts = await maybe_fan_out(broker, frame)
            if parts is not None:
                return parts
        if api_key in GROUP_KEYS and api_key in broker.handlers and broker.group_coordinator is not None:
            # (a key not served here is refused by this worker: forwarded, it would close the internal link)
            owner = self.group_owner(frame, api_key)
            if owner is not None and owner != self.index:
                if api_key in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
                    self._track_share_session(api_key, owner, frame, conn)
                if api_key == SHARE_FETCH and broker.quotas.active():
                    return await self._forward_share_fetch(owner, frame, conn)
                return await self.forwarder.frame(owner, principal_trailer(frame, conn))
        if api_key in TXN_KEYS and broker.txn_coordinator is not None:
            owner = self._txn_owner(frame, api_key)
            if owner is not None and owner != self.index:
                return await self.forwarder.frame(owner, principal_trailer(frame, conn))
        return await broker.dispatch(frame, conn, internal=False)

    async def _apply_everywhere(self, api_key: int, frame: Any, conn: Any) -> None:
        others = [w for w in range(self.workers) if w != self.index]
        copies = [bytearray(principal_trailer(frame, conn)) for _ in others]  # each gets its correlation id
        answers = await asyncio.gather(*(self.forwarder.frame(w, c) for w, c in zip(others, copies)),
                                       return_exceptions=True)
        for w, a in zip(others, answers):
            if isinstance(a, BaseException):
                log.warning("worker %d did not apply controller request %d: %r", w, api_key, a)

    def _track_share_session(self, api_key: int, owner: int, frame: Any, conn: Any) -> None:
        """A share session opened (ShareFetch epoch 0) through this worker on a client
        connection ends when that connection closes, as one opened on the group's worker does
        (SharePartitionManager.session_for): its closing tells the group's worker, which
        closes the session and releases the member's records (KAFKA-19015). The member's
        latest opening through this worker wins; a closing request (epoch -1) unbinds it."""
        try:
            _, req = api.decode_request(frame)
        except Exception:
            return  # the owner answers the malformed request
        key = (req.group_id, req.member_id)
        epoch = req.share_session_epoch
        if epoch == FINAL_EPOCH:
            bound = self._share_sessions.pop(key, None)
            if bound is not None:
                bound.on_lost.pop(("share-forwarded", key), None)
        elif epoch == 0 and conn is not None and api_key == SHARE_FETCH:
            previous = self._share_sessions.get(key)
            if previous is not None and previous is not conn:
                previous.on_lost.pop(("share-forwarded", key), None)
            self._share_sessions[key] = conn
            session = getattr(conn, "session", None)
            trailer = trailer_bytes((session.principal, session.host) if session is not None else None)
            conn.on_lost[("share-forwarded", key)] = lambda: self._share_connection_lost(owner, key, conn, trailer)

    def _share_connection_lost(self, owner: int, key: tuple[str, str], conn: Any, trailer: bytes) -> None:
        if self._share_sessions.get(key) is not conn:
            return
        del self._share_sessions[key]
        req = ShareAcknowledgeRequest(group_id=key[0], member_id=key[1], share_session_epoch=FINAL_EPOCH, topics=[])
        task = asyncio.get_running_loop().create_task(
            self.forwarder.request(owner, req, 1, trailer=trailer, client_id=CONNECTION_LOST_CLIENT))
        task.add_done_callback(_log_share_close_failure)

    async def _forward_share_fetch(self, owner: int, frame: Any, conn: Any) -> list | None:
        """A client's ShareFetch answered by the group's worker, its response bytes counted
        against consumer_byte_rate here, where the client's connection is (the owner handles
        an internal request, which quotas do not see)."""
        header, _ = api.decode_request(frame)  # before forwarding: that swaps the correlation id
        parts = await self.forwarder.frame(owner, principal_trailer(frame, conn))
        ctx = RequestContext(header, header.request_api_version, header.client_id, conn)
        throttle = self.broker.quotas.throttle_request(SHARE_FETCH, ctx, len(frame), sum(len(p) for p in parts), 0.0)
        if throttle <= 0:
            return parts
        _, response = api.decode_response(SHARE_FETCH, ctx.api_version, memoryview(b"".join(parts))[4:])
        return self.broker.throttled(ctx, throttle, header.correlation_id, response, parts)

    def _txn_owner(self, frame: Any, api_key: int) -> int | None:
        try:
            _, req = api.decode_request(frame)
        except Exception:
            return None
        tids = _transactional_ids(api_key, req)
        if not tids:
            return None
        coordinator = self.broker.txn_coordinator
        coordinator.ensure_topic()
        owners = {self.owner_of(TXN_TOPIC, coordinator.partition_for(t)) for t in tids}
        return owners.pop() if len(owners) == 1 else None

    async def forward_marker(self, part: Any, producer_id: int, producer_epoch: int, commit: bool,
                             coordinator_epoch: int) -> int:
        """A transaction marker for a partition another worker owns: WriteTxnMarkers to it."""
        M = WriteTxnMarkersRequest.WritableTxnMarker
        req = WriteTxnMarkersRequest(markers=[M(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=part.topic, partition_indexes=[part.index])])])
        resp = await self.forwarder.request(part.owner, req, 1)
        return resp.markers[0].topics[0].partitions[0].error_code

    def group_owner(self, frame: Any, api_key: int) -> int | None:
        """The worker whose `__consumer_offsets` partition holds the request's groups (None: here,
        or several); the share coordinator APIs go to the worker owning the keys'
        `__share_group_state` partition where the state store answers them there (ZooKeeper's:
        it loaded them as that partition's leader), else to the group's worker."""
        try:
            _, req = api.decode_request(frame)
        except Exception:
            return None  # let the normal path answer the malformed request
        share = self.broker.share
        if api_key in SHARE_STATE_API_KEYS and share is not None and share.store.served_by_partition_owner:
            try:
                partition_for = share.store.partition_for
                owners = {self.owner_of(STATE_TOPIC, partition_for((req.group_id, bytes(t.topic_id), p.partition)))
                          for t in req.topics for p in t.partitions}
            except Exception:
                return None  # the normal path answers a malformed request
            return owners.pop() if len(owners) == 1 else None
        gids = _group_ids(api_key, req)
        if not gids:
            return None
        coordinator = self.broker.group_coordinator
        owners = {self.owner_of(OFFSETS_TOPIC, coordinator.partition_for(g)) for g in gids}
        return owners.pop() if len(owners) == 1 else None
