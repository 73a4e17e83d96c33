"""The share coordinator in cluster mode (Kafka's ShareCoordinatorService over ZooKeeper-mode
partition leadership).

`__share_group_state` is a replicated internal topic, created on first use with
share.coordinator.state.topic.num.partitions, .replication.factor and .min.isr. The share
coordinator of a share-partition's state is the leader of the key's partition: becoming its
leader replays the partition's ShareSnapshot/ShareUpdate records (COORDINATOR_LOAD_IN_PROGRESS
meanwhile), losing it drops them (NOT_COORDINATOR). A state write is appended by the leader and
answered once the ISR has it (acks=all; fewer in-sync replicas than min.isr, or a timeout:
COORDINATOR_NOT_AVAILABLE).

The share-partitions live at the data partition's leader (where clients send ShareFetch and
ShareAcknowledge). Their state goes to the share coordinator: kept here when this broker
coordinates the key, else read with ReadShareGroupState (when the share-partition is loaded:
on first use and whenever the partition's leader epoch moved) and written with
WriteShareGroupState (the changed batches, the start offset and the share-partition's leader
epoch; awaited before the request that changed them is answered: one request in flight per
`__share_group_state` partition and group, the writes made meanwhile sent together in the next,
a share-partition's merged in order, as Kafka's persister coalesces them), over one
inter-broker connection per broker (`cluster/peers.py`),
or over the forwarding link to the worker owning the partition when this broker is the
coordinator (`_ask_here`). A state request answered NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
COORDINATOR_LOAD_IN_PROGRESS, or whose coordinator could not be reached, is sent again to the
coordinator named then (see RETRY_ATTEMPTS). So a new partition leader continues from the last
acknowledged state, and a new share coordinator from what the ISR held. The group's coordinator
changes the state for AlterShareGroupOffsets / DeleteShareGroupOffsets the same way: here, or
with InitializeShareGroupState / DeleteShareGroupState to the key's share coordinator; and
DeleteGroups of an empty share group deletes its state at every share coordinator (one
DeleteShareGroupState per `__share_group_state` partition, naming every partition of every
topic: only keys with state get tombstones) before the group goes.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable, TypeVar

from kafkafast.broker.group_coordinator import read_partition
from kafkafast.broker.share.manager import PersistedState
from kafkafast.broker.share.partition import StateBatch, overlay
from kafkafast.broker.share.state_store import STATE_TOPIC, Key, ShareStateStore
from kafkafast.cluster.peers import PeerConnections
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.delete_share_group_state import DeleteShareGroupStateRequest
from kafkafast.protocol._generated.initialize_share_group_state import InitializeShareGroupStateRequest
from kafkafast.protocol._generated.read_share_group_state import ReadShareGroupStateRequest
from kafkafast.protocol._generated.write_share_group_state import WriteShareGroupStateRequest, WriteShareGroupStateResponse

log = logging.getLogger("kafkafast.share")
EC = E.ErrorCode
APPEND_TIMEOUT_S = 30.0
# A state write answered NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS,
# or whose coordinator could not be reached, is sent again to the key's coordinator as the
# metadata names it then, as Kafka's PersisterStateManager does: up to RETRY_ATTEMPTS sends, the
# n-th retry after RETRY_BACKOFF_S * 2**(n-1) (+-20%), and none that would start later than
# RETRY_DEADLINE_S after the first send (1 + 2 + 4 + 8 s: past a killed coordinator's ZooKeeper
# session and the election after it, and well inside a client's 30 s request timeout).
RETRIABLE = frozenset((EC.NOT_COORDINATOR, EC.COORDINATOR_NOT_AVAILABLE, EC.COORDINATOR_LOAD_IN_PROGRESS))
UNREACHABLE = frozenset((EC.NETWORK_EXCEPTION, EC.REQUEST_TIMED_OUT))  # no answer: retried as well
RETRY_ATTEMPTS = 5
RETRY_BACKOFF_S, RETRY_JITTER, RETRY_DEADLINE_S = 1.0, 0.2, 20.0
T = TypeVar("T")


def _retry_delay(attempt: int, since: float) -> float | None:
    """The backoff before sending again a state request sent `attempt` times, first at `since`
    (monotonic), or None when that was its last attempt."""
    delay = RETRY_BACKOFF_S * 2 ** (attempt - 1) * random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER)
    if attempt >= RETRY_ATTEMPTS or time.monotonic() + delay - since > RETRY_DEADLINE_S:
        return None
    return delay


def _retriable(exc: BaseException) -> bool:
    """Whether a state request that failed with `exc` is sent again: its coordinator moved, is
    loading or unavailable, or could not be reached."""
    if isinstance(exc, E.KafkaError):
        return exc.code in RETRIABLE or exc.code in UNREACHABLE
    return isinstance(exc, (OSError, asyncio.TimeoutError))


async def _retrying(what: str, attempt_once: Callable[[], Awaitable[T]]) -> T:
    """`attempt_once()`, again after a backoff while it fails `_retriable`ly (RETRY_ATTEMPTS)."""
    attempt, since = 1, time.monotonic()
    while True:
        try:
            return await attempt_once()
        except Exception as exc:
            delay = _retry_delay(attempt, since) if _retriable(exc) else None
            if delay is None:
                raise
            log.info("share state: %s failed, retrying: %s", what, exc)
        await asyncio.sleep(delay)
        attempt += 1


def _raise_for(result: Any, key: Key) -> None:
    """The KafkaError of a share coordinator API's partition result, if it has one."""
    if result.error_code:
        raise E.for_code(result.error_code)(result.error_message or f"share state of {key[0]}")


def _fenced(key: Key, state_epoch: int, newer: int, code: int = EC.FENCED_STATE_EPOCH) -> Any:
    """The result a share coordinator gives a write with an older state (or leader) epoch than its newest."""
    what = "state" if code == EC.FENCED_STATE_EPOCH else "leader"
    return WriteShareGroupStateResponse.PartitionResult(partition=key[2], error_code=code,
                                                         error_message=f"{what} epoch {state_epoch} is older than {newer}")


class _QueuedWrites:
    """The state writes of one group waiting for the share coordinator of one
    `__share_group_state` partition, as one WriteShareGroupState: a share-partition's writes
    merged in order (its later batches laid over the earlier ones, its latest start offset and
    state epoch), each writer's future answered with its share-partition's result. `attempt`
    counts the sends of its oldest writes (see RETRY_ATTEMPTS)."""
    __slots__ = ("parts", "futures", "attempt", "since", "delay")

    def __init__(self, attempt: int = 1, since: float | None = None, delay: float = 0.0) -> None:
        # key -> (state epoch, start offset, batches, leader epoch)
        self.parts: dict[Key, tuple[int, int, list[StateBatch], int]] = {}
        self.futures: dict[Key, list[asyncio.Future]] = {}
        self.attempt = attempt
        self.since = time.monotonic() if since is None else since
        self.delay = delay  # before this send (a retry's backoff)

    def add(self, key: Key, part: tuple[int, int, list[StateBatch], int], futs: list[asyncio.Future]) -> None:
        state_epoch, start_offset, batches, leader_epoch = part
        earlier = self.parts.get(key)
        if earlier is not None and earlier[3] > leader_epoch:  # a former leader's share-partition
            for fut in futs:
                fut.set_result(_fenced(key, leader_epoch, earlier[3], EC.FENCED_LEADER_EPOCH))
            return
        if earlier is not None and earlier[0] > state_epoch:  # a share-partition loaded before a reset
            for fut in futs:
                fut.set_result(_fenced(key, state_epoch, earlier[0]))
            return
        if earlier is not None and earlier[0] < state_epoch:  # as the coordinator would answer them
            for older in self.futures.pop(key):
                older.set_result(_fenced(key, earlier[0], state_epoch))
        elif earlier is not None:
            batches = overlay(earlier[2], batches, start_offset)
        self.parts[key] = (state_epoch, start_offset, batches, leader_epoch)
        self.futures.setdefault(key, []).extend(futs)

    def request(self) -> WriteShareGroupStateRequest:
        W = WriteShareGroupStateRequest
        per_topic: dict[bytes, list[Any]] = {}
        for (_, tid, partition), (state_epoch, start_offset, batches, leader_epoch) in self.parts.items():
            per_topic.setdefault(tid, []).append(W.PartitionData(
                partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                state_batches=[W.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=c)
                               for a, b, s, c in batches]))
        return W(group_id=next(iter(self.parts))[0], topics=[
            W.WriteStateData(topic_id=tid, partitions=ps) for tid, ps in per_topic.items()])

    def retry(self) -> _QueuedWrites | None:
        """An empty queue for the next send of (some of) these writes, or None when they had
        their last attempt (RETRY_ATTEMPTS, RETRY_DEADLINE_S)."""
        delay = _retry_delay(self.attempt, self.since)
        return None if delay is None else _QueuedWrites(self.attempt + 1, self.since, delay)

    def retry_all(self, exc: BaseException) -> _QueuedWrites | None:
        """Every write again (the coordinator could not be reached), or None after failing them with `exc`."""
        again = self.retry()
        if again is None:
            self.fail(exc)
            return None
        for key, part in self.parts.items():
            again.add(key, part, self.futures.pop(key, []))
        return again

    def answer(self, resp: Any) -> _QueuedWrites | None:
        """Answers each writer with its share-partition's result; the share-partitions answered
        with a RETRIABLE error go into the returned queue instead, to be sent again."""
        group_id = next(iter(self.parts))[0]
        again: _QueuedWrites | None = None
        exhausted = False
        for t in resp.results:
            for p in t.partitions:
                key = (group_id, bytes(t.topic_id), p.partition)
                futs = self.futures.pop(key, [])
                if futs and p.error_code in RETRIABLE and key in self.parts and not exhausted:
                    if again is None:
                        again = self.retry()
                        exhausted = again is None
                    if again is not None:
                        again.add(key, self.parts[key], futs)
                        continue
                for fut in futs:
                    if not fut.done():
                        fut.set_result(p)
        self.fail(E.CoordinatorNotAvailableError("no result for the share-partition"))
        return again

    def fail(self, exc: BaseException) -> None:
        for futs in self.futures.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(exc)
        self.futures.clear()


class ClusterShareStateStore(ShareStateStore):
    served_by_partition_owner = True  # the worker owning the key's partition leads and loaded it

    def __init__(self, broker: Any) -> None:
        super().__init__(broker)
        self.led: set[int] = set()  # __share_group_state partitions led and loaded here
        self.loading: set[int] = set()
        self._unloads: dict[int, int] = {}
        self._tasks: list[asyncio.Task] = []
        self.peers = PeerConnections(broker, "share-state")
        self._queued: dict[tuple[int, str], _QueuedWrites] = {}  # (share coordinator, group) -> writes not sent yet
        self._sending: set[tuple[int, str]] = set()  # a WriteShareGroupState to it is in flight

    async def start(self) -> None:
        self.loaded = True  # partitions load as their leadership comes (load_partition)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        self.peers.close()
        await super().stop()

    def ensure_topic(self) -> None:
        if self.broker.topics.get(STATE_TOPIC) is None:
            cfg = self.broker.config
            try:
                self.broker.create_topic(STATE_TOPIC, cfg.get_int("share.coordinator.state.topic.num.partitions"), {
                    "cleanup.policy": "compact", "min.insync.replicas": cfg.get("share.coordinator.state.topic.min.isr")},
                    replication_factor=cfg.get_int("share.coordinator.state.topic.replication.factor"))
            except E.TopicAlreadyExistsError:
                pass
            except E.KafkaError as exc:
                log.info("cannot create %s: %s", STATE_TOPIC, exc)
                raise E.CoordinatorNotAvailableError(f"{STATE_TOPIC}: {exc}") from exc

    # -- leadership ---------------------------------------------------------------------------
    def load_partition(self, index: int) -> None:
        """This broker now leads `__share_group_state` partition `index`: replay it."""
        self.loading.add(index)
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.get_running_loop().create_task(self._load_index(index)))

    async def _load_index(self, index: int) -> None:
        unloads = self._unloads.get(index, 0)
        part = self.broker.get_partition(STATE_TOPIC, index)
        try:
            if part is not None:
                async for header, records in read_partition(part):
                    if not header.is_control:
                        for rec in records:
                            self.replay(rec.key, rec.value)
        finally:
            if self._unloads.get(index, 0) == unloads:
                self.loading.discard(index)
                self.led.add(index)
        log.info("share state: loaded %s-%d", STATE_TOPIC, index)

    def unload_partition(self, index: int) -> None:
        self._unloads[index] = self._unloads.get(index, 0) + 1
        self.loading.discard(index)
        self.led.discard(index)
        for key in [k for k in self.keys if self.partition_for(k) == index]:
            del self.keys[key]

    def coordinator_error(self, key: Key) -> int:
        if not key[0]:
            return EC.INVALID_REQUEST
        self.ensure_topic()
        index = self.partition_for(key)
        if index in self.loading:
            return EC.COORDINATOR_LOAD_IN_PROGRESS
        return 0 if index in self.led else EC.NOT_COORDINATOR

    # -- the share-partitions' side -------------------------------------------------------------
    async def fetch(self, group_id: str, topic_id: bytes, partition: int,
                    leader_epoch: int = -1) -> PersistedState | None:
        return await _retrying(f"reading the share state of {group_id}",
                               lambda: self._fetch_once((group_id, topic_id, partition), leader_epoch))

    async def _fetch_once(self, key: Key, leader_epoch: int) -> PersistedState | None:
        group_id, topic_id, partition = key
        err = self.coordinator_error(key)
        if err == 0:
            return self.read(*key, leader_epoch)
        if err != EC.NOT_COORDINATOR:
            raise E.for_code(err)(f"share state of {group_id}")
        R = ReadShareGroupStateRequest
        resp = await self._ask(key, R(group_id=group_id, topics=[R.ReadStateData(
            topic_id=topic_id, partitions=[R.PartitionData(partition=partition, leader_epoch=leader_epoch)])]))
        p = resp.results[0].partitions[0]
        _raise_for(p, key)
        if p.start_offset < 0:
            return None
        return PersistedState(p.start_offset, p.state_epoch, [(b.first_offset, b.last_offset, b.delivery_state,
                                                               b.delivery_count) for b in p.state_batches])

    def write(self, group_id: str, topic_id: bytes, partition: int, start_offset: int, state_epoch: int,
              batches: list[StateBatch], leader_epoch: int = -1) -> None:
        key = (group_id, topic_id, partition)
        here = self.coordinator_error(key) == 0
        slot = (self.partition_for(key), group_id)
        if here and slot not in self._sending:  # (else after the earlier writes of the slot, in order)
            super().write(group_id, topic_id, partition, start_offset, state_epoch, batches, leader_epoch)
            return
        fut = asyncio.get_running_loop().create_future()
        self._queued.setdefault(slot, _QueuedWrites()).add(key, (state_epoch, start_offset, batches, leader_epoch), [fut])
        self.pending.append((key, fut))
        if slot not in self._sending:
            self._sending.add(slot)
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.get_running_loop().create_task(self._send_writes(slot)))

    async def _send_writes(self, slot: tuple[int, str]) -> None:
        """One WriteShareGroupState at a time for a group's keys in one `__share_group_state`
        partition (`slot`), to its coordinator: the writes queued meanwhile go together in the
        next one (Kafka's persister coalesces them too), after a retried one's writes, so a key's
        writes reach the coordinator in order wherever it moves."""
        try:
            while (queued := self._queued.pop(slot, None)) is not None:
                if queued.delay:
                    self._queued[slot] = queued  # the writes made during the backoff join it
                    await asyncio.sleep(queued.delay)
                    queued = self._queued.pop(slot)
                again = await self._send_queued(slot[0], queued)
                if again is not None:
                    later = self._queued.pop(slot, None)  # written while it was sent: after it
                    self._queued[slot] = again
                    if later is not None:
                        for key, part in later.parts.items():
                            again.add(key, part, later.futures.pop(key, []))
        finally:
            self._sending.discard(slot)
            queued = self._queued.pop(slot, None)  # cancelled (stopping)
            if queued is not None:
                queued.fail(E.CoordinatorNotAvailableError("the broker is stopping"))

    async def _send_queued(self, index: int, queued: _QueuedWrites) -> _QueuedWrites | None:
        """Sends `queued` to the coordinator of partition `index` as the metadata names it now
        (or writes it here, if that is this process); the writes to send again, if any."""
        key = next(iter(queued.parts))
        try:
            if self.coordinator_error(key) == 0:  # the coordinator moved here meanwhile
                resp = await self._write_here(queued)
            else:
                resp = await self._send(self.broker.control.metadata.leader_of(STATE_TOPIC, index), key,
                                        queued.request())
        except asyncio.CancelledError:
            queued.fail(E.CoordinatorNotAvailableError("the broker is stopping"))
            raise
        except Exception as exc:
            if not _retriable(exc):
                queued.fail(exc)
                return None
            log.info("share state: writing to the coordinator of %s-%d failed: %s", STATE_TOPIC, index, exc)
            return queued.retry_all(exc)
        return queued.answer(resp)

    async def _write_here(self, queued: _QueuedWrites) -> WriteShareGroupStateResponse:
        """`queued` written by this process, the coordinator of its keys, as a
        WriteShareGroupState from another broker would be; the response it would get."""
        W = WriteShareGroupStateResponse
        per_topic: dict[bytes, list[Any]] = {}
        for key, (state_epoch, start_offset, batches, leader_epoch) in queued.parts.items():
            code, message, mark = 0, None, len(self.pending)
            try:
                self.write_batches(key, state_epoch, start_offset, batches, leader_epoch)
            except E.KafkaError as exc:
                code, message = exc.code, exc.message
            code = code or await self.settled(self.pending[mark:])  # (not the queued writes' own futures)
            per_topic.setdefault(key[1], []).append(W.PartitionResult(partition=key[2], error_code=code,
                                                                      error_message=message))
        return W(results=[W.WriteStateResult(topic_id=tid, partitions=ps) for tid, ps in per_topic.items()])

    async def _initialize_at_coordinator(self, key: Key, state_epoch: int, start_offset: int) -> None:
        await _retrying(f"initializing the share state of {key[0]}",
                        lambda: self._initialize_once(key, state_epoch, start_offset))

    async def _initialize_once(self, key: Key, state_epoch: int, start_offset: int) -> None:
        if self.coordinator_error(key) == 0:
            await super()._initialize_at_coordinator(key, state_epoch, start_offset)
            return
        I = InitializeShareGroupStateRequest
        resp = await self._ask(key, I(group_id=key[0], topics=[I.InitializeStateData(topic_id=key[1], partitions=[
            I.PartitionData(partition=key[2], state_epoch=state_epoch, start_offset=start_offset)])]))
        _raise_for(resp.results[0].partitions[0], key)

    async def _delete_at_coordinator(self, key: Key) -> None:
        await self._delete_keys([key])

    async def delete_group(self, group_id: str) -> None:
        """The group's state at every share coordinator: the keys of every partition of every
        topic (the group coordinator does not know which ones the group used; a coordinator
        without state for a key has nothing to delete), one DeleteShareGroupState per
        `__share_group_state` partition, at once; raises the first KafkaError."""
        await self.delete_state([(group_id, meta.topic_id, p) for meta in list(self.broker.topics.by_id.values())
                                 if not meta.is_internal for p in range(meta.partitions)])

    async def delete_state(self, keys: list[Key]) -> None:
        """The state of `keys` at their share coordinators: one DeleteShareGroupState per
        `__share_group_state` partition, at once; raises the first KafkaError."""
        if self.broker.topics.get(STATE_TOPIC) is None or not keys:
            return
        per_index: dict[int, list[Key]] = {}
        for key in keys:
            per_index.setdefault(self.partition_for(key), []).append(key)
        done = await asyncio.gather(*(self._delete_keys(ks) for ks in per_index.values()), return_exceptions=True)
        for exc in done:
            if isinstance(exc, E.KafkaError):
                raise exc
            if isinstance(exc, BaseException):  # the coordinator went away
                raise E.CoordinatorNotAvailableError(f"deleting the share state of {keys[0][0]}: {exc}") from exc
        await self.raise_unsettled(f"deleting the share-partition state of {keys[0][0]}")

    async def _delete_keys(self, keys: list[Key]) -> None:
        """Deletes the state of `keys` (all in one `__share_group_state` partition) at their
        share coordinator: here, or with DeleteShareGroupState (sent again as `_retrying` says)."""
        await _retrying(f"deleting the share state of {keys[0][0]}", lambda: self._delete_once(keys))

    async def _delete_once(self, keys: list[Key]) -> None:
        err = self.coordinator_error(keys[0])
        if err == 0:
            for key in keys:
                self.delete(key)
            return
        if err != EC.NOT_COORDINATOR:
            raise E.for_code(err)(f"share state of {keys[0][0]}")
        per_topic: dict[bytes, list[int]] = {}
        for _, tid, p in keys:
            per_topic.setdefault(tid, []).append(p)
        D = DeleteShareGroupStateRequest
        resp = await self._ask(keys[0], D(group_id=keys[0][0], topics=[D.DeleteStateData(
            topic_id=tid, partitions=[D.PartitionData(partition=p) for p in ps]) for tid, ps in per_topic.items()]))
        for result in resp.results:
            for p in result.partitions:
                _raise_for(p, keys[0])

    # -- the coordinator's side -------------------------------------------------------------------
    def _append(self, key: Key, key_bytes: bytes, value: bytes | None) -> None:
        part = self.broker.get_partition(STATE_TOPIC, self.partition_for(key))
        if part is None or not getattr(part, "is_leader", False):
            raise E.NotCoordinatorError(f"{STATE_TOPIC} partition of {key[0]} is not led here")
        if len(part.isr) < self.broker.min_insync_replicas(part):
            raise E.CoordinatorNotAvailableError(f"{STATE_TOPIC}-{part.index}: fewer in-sync replicas than min.isr")
        super()._append(key, key_bytes, value)
        self.pending.append((key, asyncio.ensure_future(self._replicated(part, part.log.state.log_end_offset))))

    async def _replicated(self, part: Any, end_offset: int) -> int:
        code = await part.wait_for_hw(end_offset, APPEND_TIMEOUT_S)
        if code == EC.NOT_LEADER_OR_FOLLOWER:
            return EC.NOT_COORDINATOR
        if code or len(part.isr) < self.broker.min_insync_replicas(part):
            return EC.COORDINATOR_NOT_AVAILABLE
        return 0

    # -- inter-broker requests ----------------------------------------------------------------------
    async def _ask(self, key: Key, request: Any) -> Any:
        leader = self.broker.control.metadata.leader_of(STATE_TOPIC, self.partition_for(key))
        return await self._send(leader, key, request)

    async def _send(self, leader: int, key: Key, request: Any) -> Any:
        if leader == self.broker.node_id:
            return await self._ask_here(key, request)
        if leader < 0:
            raise E.CoordinatorNotAvailableError(f"no share coordinator for {key[0]} yet")
        resp = await self.peers.send(leader, request, 0, APPEND_TIMEOUT_S + 5)
        if resp is None:
            raise E.CoordinatorNotAvailableError(f"broker {leader} is not known")
        return resp

    async def _ask_here(self, key: Key, request: Any) -> Any:
        """This broker leads the key's partition. With workers, the worker that owns it loaded
        and writes it; the others (the group's worker, where its share-partitions live) send it
        Read/WriteShareGroupState over the forwarding link, as they send other brokers. The owner
        has not loaded it yet if it is asked (its LeaderAndIsr is being applied)."""
        placement = self.broker.placement
        owner = placement.owner_of(STATE_TOPIC, self.partition_for(key))
        if owner != placement.index:
            return await placement.forwarder.request(owner, request, 0)
        raise E.CoordinatorLoadInProgressError(f"share state of {key[0]} is loading")
