"""The share coordinator's store: share-partition state in the internal topic `__share_group_state`.

Records, in Kafka's formats (`kafkafast/protocol/schemas/share-coordinator/`), keyed by
(group id, topic id, partition):

    key version 0  ShareSnapshotKey -> ShareSnapshotValue: the whole state (snapshot epoch,
                   state epoch, leader epoch, start offset, create/write time, state batches)
    key version 1  ShareUpdateKey   -> ShareUpdateValue: snapshot epoch, leader epoch, start
                   offset and the state batches changed since that snapshot
    null value     the share-partition's state was deleted (DeleteGroups, its topic deleted)

A state batch is (first offset, last offset, delivery state 0 Available / 2 Acknowledged /
4 Archived, delivery count); acquired records are written Available with their delivery
count, so after a restart they are delivered again and the count goes on.

Writing: every state change of a share-partition writes one record before the request that
caused it is answered: appended at once when this process may append to the record's
partition, else forwarded as a Produce to the worker that owns it (acks=1, as Kafka's
coordinators append: the partition's min.insync.replicas refuses only acks=all producers, and
a single node's append is the whole write) and awaited (`settled`) before the answer. A write
that failed there leaves the log behind this store's view, so the key's next write is a
ShareSnapshot (the whole state) whatever the count. The first write of a share-partition and every
`share.coordinator.snapshot.update.records.per.snapshot`-th after it is a ShareSnapshot
(snapshot epoch + 1); the others are ShareUpdates holding every batch changed since the
snapshot (cumulative), so the topic is compacted (`cleanup.policy=compact`): the latest
snapshot and the latest update of a key are the state, whatever compaction removed. (Kafka's
updates hold only their own write's batches, on a topic with `cleanup.policy=delete` pruned
up to the oldest snapshot still needed.) The store keeps a key's snapshot and the batches
changed since it apart and lays one over the other only for a read or the next snapshot, so a
write costs the batches changed since the snapshot (a share-partition's in-flight records
as ranges: a few per acquired batch), not the whole state.
Loading (at start, in the background: COORDINATOR_LOAD_IN_PROGRESS meanwhile, which ShareFetch
answers as NOT_LEADER_OR_FOLLOWER): each partition, once its owner worker has loaded it, is
replayed in offset order;
an update applies to the snapshot of its snapshot epoch only (an older update, written before
the latest snapshot, is skipped), and its batches are the changes since that snapshot, so the
next update written after the restart holds them too.

Placement: a key lives in partition abs(java hash("<group>:<topic id>:<partition>")) mod
`share.coordinator.state.topic.num.partitions` (Kafka's coordinator key, the topic id in its
base64 form). The topic (internal) is created on first use with that many partitions. The
state of a group's share-partitions is written and served by the process coordinating the group
(`coordinator_error`); every worker replays the whole topic at start.
"""
from __future__ import annotations

import asyncio
import base64
import logging
from itertools import chain
from typing import Any, Iterable

from kafkafast import clock
from kafkafast.broker.group_coordinator import java_string_hash, read_partition
from kafkafast.broker.share.manager import PersistedState
from kafkafast.broker.share.partition import StateBatch, overlay
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.coordinator_records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
)
from kafkafast.protocol.primitives import Reader, Writer
from kafkafast.records import BatchBuilder

log = logging.getLogger("kafkafast.share")
STATE_TOPIC = "__share_group_state"
SNAPSHOT_KEY, UPDATE_KEY = 0, 1
VALUE_VERSION = 0
WRITE_TIMEOUT_MS = 30000
LOAD_POLL_S = 0.05  # while another worker still loads a partition this one replays
Key = tuple[str, bytes, int]


def coordinator_key(group_id: str, topic_id: bytes, partition: int) -> str:
    return f"{group_id}:{base64.urlsafe_b64encode(topic_id).decode().rstrip('=')}:{partition}"


def _encode(version: int, struct: Any) -> bytes:
    w = Writer()
    w.int16(version)
    struct.encode(w, version)
    return w.getvalue()


def state_key(kind: int, key: Key) -> bytes:
    cls = ShareSnapshotKey if kind == SNAPSHOT_KEY else ShareUpdateKey
    return _encode(kind, cls(group_id=key[0], topic_id=key[1], partition=key[2]))


def snapshot_value(snapshot_epoch: int, state: PersistedState, created: int, leader_epoch: int = 0) -> bytes:
    V = ShareSnapshotValue
    return _encode(VALUE_VERSION, V(
        snapshot_epoch=snapshot_epoch, state_epoch=state.state_epoch, leader_epoch=leader_epoch,
        start_offset=state.start_offset,
        create_timestamp=created, write_timestamp=clock.now_ms(),
        state_batches=[V.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=c)
                       for a, b, s, c in state.batches]))


def update_value(snapshot_epoch: int, start_offset: int, batches: list[StateBatch], leader_epoch: int = 0) -> bytes:
    V = ShareUpdateValue
    return _encode(VALUE_VERSION, V(
        snapshot_epoch=snapshot_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        state_batches=[V.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=c)
                       for a, b, s, c in batches]))


def _check_leader_epoch(ks: "_KeyState", leader_epoch: int) -> None:
    """FencedLeaderEpochError when a share-partition's leader epoch is older than the key's
    (-1, from the group's coordinator or a Kafka writer that sends none, is never fenced)."""
    if 0 <= leader_epoch < ks.leader_epoch:
        raise E.FencedLeaderEpochError(f"leader epoch {leader_epoch} is older than {ks.leader_epoch}")


class _KeyState:
    """The store's view of one key: the latest snapshot's batches (`base`) and every batch
    changed since then (`changed`, cumulative: what the next ShareUpdate holds), laid over the
    snapshot only when the whole state is asked for (a read, the next snapshot). `leader_epoch`:
    the newest leader epoch of the share-partition's leader that read or wrote it (Kafka's share
    coordinator fences a write, or a read, with an older one: FENCED_LEADER_EPOCH), from the
    records too (a read's is kept in memory only, as Kafka's)."""
    __slots__ = ("base", "start_offset", "state_epoch", "snapshot_epoch", "updates", "changed", "created",
                 "unwritten", "leader_epoch")

    def __init__(self, snapshot: PersistedState, snapshot_epoch: int, created: int, leader_epoch: int = 0) -> None:
        self.base = snapshot.batches
        self.start_offset = snapshot.start_offset
        self.state_epoch = snapshot.state_epoch
        self.snapshot_epoch = snapshot_epoch
        self.updates = 0  # ShareUpdates written (or replayed) since the snapshot
        self.changed: list[StateBatch] = []
        self.created = created
        self.unwritten = False  # a write of it failed after this view took it in: the next one is a snapshot
        self.leader_epoch = leader_epoch

    def state(self, newer: Iterable[StateBatch] = (), start_offset: int | None = None,
              state_epoch: int | None = None) -> PersistedState:
        """The whole state, with `newer` batches laid over it (and a new start offset / state epoch)."""
        start = self.start_offset if start_offset is None else start_offset
        return PersistedState(start, self.state_epoch if state_epoch is None else state_epoch,
                              overlay(self.base, chain(self.changed, newer), start))


class ShareStateStore:
    # The share coordinator APIs (83-87) are answered by the group's worker (with workers), not
    # by the owner of the key's partition (runtime/placement.py:WorkerPlacement.group_owner).
    served_by_partition_owner = False

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.per_snapshot = cfg.get_int("share.coordinator.snapshot.update.records.per.snapshot")
        self.keys: dict[Key, _KeyState] = {}
        self.loaded = False
        self._loading: asyncio.Task | None = None
        self.pending: list[tuple[Key, Any]] = []  # (key, writes not done yet: forwarded to the owner worker, ...)

    # -- placement ---------------------------------------------------------------------------
    def num_partitions(self) -> int:
        meta = self.broker.topics.get(STATE_TOPIC)
        return meta.partitions if meta is not None else self.broker.config.get_int(
            "share.coordinator.state.topic.num.partitions")

    def partition_for(self, key: Key) -> int:
        return (java_string_hash(coordinator_key(*key)) & 0x7FFFFFFF) % self.num_partitions()

    def ensure_topic(self) -> None:
        if self.broker.topics.get(STATE_TOPIC) is None:
            cfg = self.broker.config
            try:
                self.broker.create_topic(STATE_TOPIC, cfg.get_int("share.coordinator.state.topic.num.partitions"), {
                    "cleanup.policy": "compact",
                    "min.insync.replicas": cfg.get("share.coordinator.state.topic.min.isr")})
            except E.TopicAlreadyExistsError:
                self.broker.refresh_topics()

    # -- loading -----------------------------------------------------------------------------
    async def start(self) -> None:
        self._loading = asyncio.get_running_loop().create_task(self._load_all())

    async def _load_all(self) -> None:
        """Replays every partition once its owner has loaded it (another worker may still be
        recovering it: its published log end would not be the true one yet)."""
        meta = self.broker.topics.get(STATE_TOPIC)
        if meta is not None:
            for index in range(meta.partitions):
                part = self.broker.get_partition(STATE_TOPIC, index)
                while part is not None and not self.broker.partition_loaded(part):
                    await asyncio.sleep(LOAD_POLL_S)
                if part is not None:
                    await self._load(part)
        self.loaded = True

    async def stop(self) -> None:
        if self._loading is not None:
            self._loading.cancel()

    def load_partition(self, index: int) -> None:
        """This broker now leads partition `index` (the replica manager says so). A single
        node's partitions lead from their opening: one opened after the start (when this is
        called) is a new topic's or a new partition's, written only from now on, so there is
        nothing to replay (cluster/share_state.py replays a leadership that moved here)."""

    def unload_partition(self, index: int) -> None:
        """Leadership of partition `index` went: its keys' state goes with it."""
        for key in [k for k in self.keys if self.partition_for(k) == index]:
            del self.keys[key]

    async def _load(self, part: Any) -> None:
        n = 0
        async for header, records in read_partition(part):
            if header.is_control:
                continue
            for rec in records:
                self.replay(rec.key, rec.value)
                n += 1
        if n:
            log.info("share state: replayed %d records of %s-%d", n, STATE_TOPIC, part.index)

    def replay(self, key_bytes: Any, value_bytes: Any) -> None:
        if key_bytes is None or len(key_bytes) < 2:
            return
        r = Reader(bytes(key_bytes))
        kind = r.int16()
        if kind not in (SNAPSHOT_KEY, UPDATE_KEY):
            return
        k = (ShareSnapshotKey if kind == SNAPSHOT_KEY else ShareUpdateKey).decode(r, kind)
        key = (k.group_id, bytes(k.topic_id), k.partition)
        if value_bytes is None:
            self.keys.pop(key, None)
            return
        vr = Reader(bytes(value_bytes))
        version = vr.int16()
        if kind == SNAPSHOT_KEY:
            v = ShareSnapshotValue.decode(vr, version)
            batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches]
            earlier = self.keys.get(key)
            self.keys[key] = _KeyState(PersistedState(v.start_offset, v.state_epoch, batches), v.snapshot_epoch,
                                       v.create_timestamp, max(v.leader_epoch, earlier.leader_epoch if earlier else 0))
            return
        u = ShareUpdateValue.decode(vr, version)
        ks = self.keys.get(key)
        if ks is None or u.snapshot_epoch != ks.snapshot_epoch:
            return  # written before the latest snapshot
        ks.leader_epoch = max(ks.leader_epoch, u.leader_epoch)
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in u.state_batches]
        if u.start_offset >= 0:
            ks.start_offset = u.start_offset
        ks.changed = overlay(ks.changed, batches, ks.start_offset)  # so the next update holds these too
        ks.updates += 1

    # -- the manager's interface ----------------------------------------------------------------
    def read(self, group_id: str, topic_id: bytes, partition: int, leader_epoch: int = -1) -> PersistedState | None:
        """The stored state. A share-partition's leader reads with its leader epoch (-1: the
        group's coordinator, not a leader): an older one than the key's is fenced
        (FencedLeaderEpochError), a newer one is the key's from now on, so the writes of a former
        leader are fenced from the moment the new one read the state (Kafka's readState)."""
        ks = self.keys.get((group_id, topic_id, partition))
        if ks is None:
            return None
        if leader_epoch >= 0:
            _check_leader_epoch(ks, leader_epoch)
            ks.leader_epoch = leader_epoch
        return ks.state()

    async def fetch(self, group_id: str, topic_id: bytes, partition: int,
                    leader_epoch: int = -1) -> PersistedState | None:
        """The stored state, for loading a share-partition (here: what `read` says, once loaded)."""
        if not self.loaded:
            raise E.CoordinatorLoadInProgressError(f"{STATE_TOPIC} is being loaded")
        return self.read(group_id, topic_id, partition, leader_epoch)

    def write(self, group_id: str, topic_id: bytes, partition: int, start_offset: int, state_epoch: int,
              batches: list[StateBatch], leader_epoch: int = -1) -> None:
        """Persists the `batches` a share-partition changed and its start offset (see the module
        docstring); raises KafkaError when the record cannot be appended, FencedLeaderEpochError
        when `leader_epoch` is older than the key's (the share-partition's leader moved on; -1:
        the key's). The work is per batch changed since the snapshot, whatever the
        share-partition holds in flight."""
        key = (group_id, topic_id, partition)
        ks = self.keys.get(key)
        if ks is not None:
            _check_leader_epoch(ks, leader_epoch)
            leader_epoch = max(leader_epoch, ks.leader_epoch)
        leader_epoch = max(leader_epoch, 0)
        if ks is None or ks.unwritten or ks.updates + 1 >= self.per_snapshot:
            if ks is None:
                epoch, created = 0, clock.now_ms()
                state = PersistedState(start_offset, state_epoch, overlay((), batches, start_offset))
            else:
                epoch, created = ks.snapshot_epoch + 1, ks.created
                state = ks.state(batches, start_offset, state_epoch)
            self._append(key, state_key(SNAPSHOT_KEY, key), snapshot_value(epoch, state, created, leader_epoch))
            self.keys[key] = _KeyState(state, epoch, created, leader_epoch)
            return
        changed = overlay(ks.changed, batches, start_offset)
        self._append(key, state_key(UPDATE_KEY, key), update_value(ks.snapshot_epoch, start_offset, changed,
                                                                  leader_epoch))
        ks.changed, ks.start_offset, ks.state_epoch, ks.updates = changed, start_offset, state_epoch, ks.updates + 1
        ks.leader_epoch = leader_epoch

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups of a share group: the state of each of its share-partitions goes, written
        before the group is removed (here the process coordinating the group keeps all of it);
        raises KafkaError."""
        await self.delete_state([k for k in self.keys if k[0] == group_id])

    async def delete_state(self, keys: list[Key]) -> None:
        """The state of `keys` goes (DeleteShareGroupState at their share coordinators: here,
        the process coordinating their group); raises KafkaError."""
        for key in keys:
            self.delete(key)
        await self.raise_unsettled(f"deleting the share-partition state of {keys[0][0] if keys else '-'}")

    # -- the share coordinator APIs (Read/Write/Initialize/DeleteShareGroupState, the summary) ------
    def coordinator_error(self, key: Key) -> int:
        """NONE, or why this process does not serve the key's state: the state of a group's
        share-partitions is kept where the group is coordinated (NOT_COORDINATOR elsewhere)."""
        if not key[0]:
            return E.ErrorCode.INVALID_REQUEST
        if not self.loaded:
            return E.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return self.broker.group_coordinator.status(key[0], "share_group_state")

    def write_batches(self, key: Key, state_epoch: int, start_offset: int, batches: list[StateBatch],
                      leader_epoch: int = -1) -> None:
        """WriteShareGroupState: `batches` over the stored state; FencedLeaderEpochError for an
        older leader epoch, then FencedStateEpochError for an older state epoch (Kafka's order)."""
        ks = self.keys.get(key)
        if ks is not None:
            _check_leader_epoch(ks, leader_epoch)
            if state_epoch < ks.state_epoch:
                raise E.FencedStateEpochError(f"state epoch {state_epoch} is older than {ks.state_epoch}")
        start = start_offset if start_offset >= 0 else (ks.start_offset if ks is not None else 0)
        ShareStateStore.write(self, *key, start, state_epoch, batches, leader_epoch)  # here, the key's coordinator

    def initialize(self, key: Key, state_epoch: int, start_offset: int) -> None:
        """InitializeShareGroupState: a new snapshot with no in-flight records."""
        ks = self.keys.get(key)
        if ks is not None and state_epoch < ks.state_epoch:
            raise E.FencedStateEpochError(f"state epoch {state_epoch} is older than {ks.state_epoch}")
        epoch = ks.snapshot_epoch + 1 if ks is not None else 0
        leader_epoch = ks.leader_epoch if ks is not None else 0  # (still fenced: a reset is no new leader)
        state = PersistedState(start_offset, state_epoch, [])
        self._append(key, state_key(SNAPSHOT_KEY, key), snapshot_value(epoch, state, clock.now_ms(), leader_epoch))
        self.keys[key] = _KeyState(state, epoch, clock.now_ms(), leader_epoch)

    def delete(self, key: Key) -> None:
        """DeleteShareGroupState: tombstones for the key's records (none for a key without state,
        as Kafka's share coordinator answers it)."""
        if key not in self.keys:
            return
        for kind in (SNAPSHOT_KEY, UPDATE_KEY):
            self._append(key, state_key(kind, key), None)
        self.keys.pop(key, None)

    # -- AlterShareGroupOffsets / DeleteShareGroupOffsets (at the group's coordinator) ------------
    async def reset(self, key: Key, start_offset: int) -> None:
        """The key's state starts again at `start_offset`, with the next state epoch and nothing in
        flight (a share-partition loaded with the older epoch is fenced); raises KafkaError."""
        current = await self.fetch(*key)
        await self._initialize_at_coordinator(key, current.state_epoch + 1 if current is not None else 0, start_offset)

    async def remove(self, key: Key) -> bool:
        """The key's state goes (False when it has none); raises KafkaError."""
        if await self.fetch(*key) is None:
            return False
        await self._delete_at_coordinator(key)
        return True

    async def _initialize_at_coordinator(self, key: Key, state_epoch: int, start_offset: int) -> None:
        self.initialize(key, state_epoch, start_offset)  # here: the process coordinating the group

    async def _delete_at_coordinator(self, key: Key) -> None:
        self.delete(key)

    def _append(self, key: Key, key_bytes: bytes, value: bytes | None) -> None:
        self.ensure_topic()
        part = self.broker.get_partition(STATE_TOPIC, self.partition_for(key))
        if part is None:
            raise E.CoordinatorNotAvailableError(f"{STATE_TOPIC} is not available")
        builder = BatchBuilder()
        builder.append(clock.now_ms(), key_bytes, value)
        records = bytearray(builder.build())
        forward = getattr(self.broker.placement, "forward_produce", None)  # a worker's placement forwards
        if self.broker.appends_here(part, None):
            self.broker.append(part, records)
        elif forward is not None:  # another worker owns the partition (shared append off or not ready)
            self.pending.append((key, forward(part, records, 1, WRITE_TIMEOUT_MS)))
        else:
            raise E.NotCoordinatorError(f"{STATE_TOPIC}-{part.index} is not written by this process")

    async def raise_unsettled(self, what: str) -> None:
        """`settled`, raising the KafkaError of its error code."""
        err = await self.settled()
        if err:
            raise E.for_code(err)(what)

    async def settled(self, writes: list[tuple[Key, Any]] | None = None) -> int:
        """Waits for `writes` (default: every write not done yet: forwarded to another worker,
        sent to the share coordinator, or waiting for the ISR, those another request also waits
        for included: it may be answered first, not before them); the first error code, or NONE.
        The key of a failed write is written whole next time."""
        error = 0
        for key, fut in list(self.pending) if writes is None else writes:
            try:
                res = await fut  # an error code, or a response part with one
                code = res if isinstance(res, int) else res.error_code
            except Exception as exc:  # the owner or the coordinator went away
                log.warning("share state: a write failed: %s", exc)
                code = E.ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code:
                ks = self.keys.get(key)
                if ks is not None:
                    ks.unwritten = True
            error = error or code
        self.pending = [(key, fut) for key, fut in self.pending if not fut.done()]
        return error
