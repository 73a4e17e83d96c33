"""Where this broker's partitions live and how a request reaches the process that holds one
(issue 24: processes are a placement, not a subclass).

The broker holds one placement (`Broker.placement`) and leaves to it what depends on the
processes: which one appends to a partition, where topics are opened and dropped, how an
append wakes the requests parked on a partition and how a request reaches the process that
serves it. `LocalPlacement`: one process holds every partition, and each hook is the
broker's own path. The pre-fork runtime's `runtime/placement.py:WorkerPlacement` spreads
them over N worker processes: the owner worker of each partition, its shared-memory slot,
the wake-up pipes and the internal links between workers. Each places the one partition class
(`partition.Partition`) by the home it gives it: `HERE`, or a `SlotResidence` (owner, slot).
Either control plane (the local one, ZooKeeper's) runs over either placement, and no
placement class exists per control plane: what a control plane keeps for every process of the
broker (ZooKeeper's: the broker's identity and session) is in the broker-shared words, and a
control plane reaches another process by a poke (`poke`, `add_wake_check`)."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Iterable, Protocol

from kafkafast.broker.partition import Partition

# The broker-shared words (`Placement.broker_word`): what a control plane that registers the
# broker (ZooKeeper's, cluster/node.py) keeps of its identity and session where every process of
# the broker reads it: the session word (generation << 2 | registered | connected), the end of
# the leadership lease (monotonic ms), the broker epoch (-1: not registered yet), the broker
# id + 1 (0: not established yet) and a request to register the broker again (1: asked).
SESSION_WORD, LEASE_END_WORD, BROKER_EPOCH_WORD, BROKER_ID_WORD, REREGISTER_WORD = range(5)
LOCAL_BROKER_WORDS = (0, 0, -1, 0, 0)  # one process's, before the control plane writes them


class Placement(Protocol):
    index: int  # this process among the broker's processes
    workers: int  # how many processes serve the broker
    incarnation: int  # 1 for this process's first start, +1 for each replacement

    def attach(self, broker: Any) -> None:
        """Called once, at the end of the broker's construction."""

    def owner_of(self, topic: str, partition: int) -> int:
        """The process (worker index) that holds the partition's log writer."""

    def owns_key(self, topic: str, partition: int) -> bool:
        """Whether this process holds the partition's log writer."""

    def owns(self, part: Any) -> bool:
        """Whether this process holds `part`'s log writer."""

    def partition_loaded(self, part: Any) -> bool:
        """Whether the partition's records can be read here (its owner has loaded it)."""

    def appends_here(self, part: Any, transactional_id: str | None) -> bool:
        """Whether a client's produce to `part` is appended by this process (else forwarded)."""

    def before_load(self) -> None: ...
    def after_load(self) -> None: ...
    def before_stop(self) -> None: ...
    def after_stop(self) -> None: ...
    def open_topic(self, meta: Any) -> None: ...
    def refresh_topics(self) -> None: ...
    def apply_topics(self) -> None: ...
    def delete_topic(self, name: str) -> None: ...

    def metadata_changed(self) -> None:
        """Topics changed here: other processes reload them."""

    def acls_changed(self) -> None:
        """ACLs changed here: other processes re-read them."""

    def append(self, part: Any, records: Any, *, allow_control: bool = False) -> Any: ...
    async def delete_records(self, part: Any, offset: int, *, internal: bool = False) -> None: ...

    def on_append(self, part: Any) -> None:
        """After an append here: wakes what other processes parked on the partition."""

    def wake_owner(self, part: Any) -> None:
        """A partition another process owns changed here: that process re-checks it."""

    def become_leader(self, part: Any, ps: Any) -> None:
        """A partition state naming this broker leader of `part` (the replica manager's `become`):
        the process holding its log leads it, the others learn the role."""

    def become_follower(self, part: Any, ps: Any) -> None:
        """A partition state naming another broker leader of `part` (or none)."""

    def on_isr_changed(self, part: Any) -> None:
        """After an ISR change of `part` (a leader's AlterPartition, accepted or not)."""

    def replica_removed(self, part: Any) -> None:
        """StopReplica deleted `part`: what this process held of it goes."""

    def slot_follower(self, part: Any, replica_id: int) -> Any:
        """The owner's record of a follower of a partition another process owns."""

    def claim_slot_follower(self, part: Any, replica_id: int, replicas: set[int]) -> Any:
        """A new follower's record where every process reads it (None: kept by the owner alone)."""

    async def wait_for_data(self, parts: Iterable[Any], timeout: float) -> None: ...
    def handle_frame(self, frame: Any, conn: Any = None, *, internal: bool = False) -> Awaitable[list | None]:
        """The request's answer, to await (a plain function: a request served in this process
        awaits `Broker.dispatch` itself, without a coroutine frame of the placement's between)."""

    async def new_replica(self, topic: str, topic_id: bytes, index: int) -> Any:
        """The replica a controller just named this broker's, as this process holds it."""

    # -- the broker-shared words (`*_WORD`): the control plane's record of the broker's identity
    # and session, written by the process holding its registration and read by every process --
    def broker_word(self, word: int) -> int: ...
    def set_broker_word(self, word: int, value: int) -> None: ...

    def poke(self, index: int) -> None:
        """Wakes process `index`: its wake checks run (`add_wake_check`)."""

    def add_wake_check(self, check: Callable[[], None]) -> None:
        """`check` runs in this process whenever another process pokes it."""

    def process_serving(self, index: int) -> bool:
        """Whether process `index` serves requests (it started and has not begun to stop)."""


def _timed_out(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


async def wait_for_wake(parts: list[Any], timeout: float) -> None:
    """Until one of the partitions is woken (an append, a new high watermark) or `timeout` s.
    One future per park, completed by the wake or by the loop's timer (cancelled after a wake;
    none when `timeout` is None), instead of `asyncio.wait_for` with its second future, its
    callbacks and its TimeoutError (perf/results/leader_fetch.md, "Parking, the read at the log
    end")."""
    fut, timer = park(parts, timeout)
    try:
        await fut
    finally:
        unpark(parts, fut, timer)


def park(parts: list[Any], timeout: float | None) -> tuple[asyncio.Future, asyncio.TimerHandle | None]:
    """`wait_for_wake`'s future, registered on the partitions, and its timer (None: no timeout);
    a caller with its own try/finally awaits the future itself, then `unpark`s."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    for p in parts:
        p.waiters.add(fut)
    return fut, (loop.call_later(timeout, _timed_out, fut) if timeout is not None else None)


def unpark(parts: list[Any], fut: asyncio.Future, timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()
    for p in parts:
        p.waiters.discard(fut)


class LocalPlacement:
    """One process: it holds every partition; each hook is the broker's own path."""

    index = 0
    workers = 1
    incarnation = 1

    def __init__(self) -> None:
        self._words = list(LOCAL_BROKER_WORDS)
        self._wake_checks: list[Callable[[], None]] = []

    def attach(self, broker: Any) -> None:
        self.broker = broker

    def owner_of(self, topic: str, partition: int) -> int:
        return 0

    def owns_key(self, topic: str, partition: int) -> bool:
        return True

    def owns(self, part: Any) -> bool:
        return True

    def partition_loaded(self, part: Any) -> bool:
        return True

    def appends_here(self, part: Any, transactional_id: str | None) -> bool:
        return self.broker.owns(part)

    def before_load(self) -> None:
        pass

    def after_load(self) -> None:
        pass

    def before_stop(self) -> None:
        pass

    def after_stop(self) -> None:
        pass

    def open_topic(self, meta: Any) -> None:
        self.broker.local_open_topic(meta)

    def refresh_topics(self) -> None:
        self.broker.local_refresh_topics()

    def apply_topics(self) -> None:
        self.broker.local_apply_topics()

    def delete_topic(self, name: str) -> None:
        self.broker.local_delete_topic(name)

    def metadata_changed(self) -> None:
        pass

    def acls_changed(self) -> None:
        pass

    def append(self, part: Any, records: Any, *, allow_control: bool = False) -> Any:
        return self.broker.replicas.append(part, part.log, records, allow_control=allow_control)

    async def delete_records(self, part: Any, offset: int, *, internal: bool = False) -> None:
        await self.broker.local_delete_records(part, offset)

    def on_append(self, part: Any) -> None:
        pass

    def wake_owner(self, part: Any) -> None:
        """Never needed: this process owns every partition."""

    def become_leader(self, part: Any, ps: Any) -> None:
        self.broker.replicas.make_leader(part, ps)

    def become_follower(self, part: Any, ps: Any) -> None:
        self.broker.replicas.make_follower(part, ps)

    def on_isr_changed(self, part: Any) -> None:
        pass  # the partition holds its ISR

    def replica_removed(self, part: Any) -> None:
        pass  # its log went with the partition (ReplicaManager.stop_replica)

    def slot_follower(self, part: Any, replica_id: int) -> Any:
        return None  # (never asked: this process owns every partition and keeps its followers)

    def claim_slot_follower(self, part: Any, replica_id: int, replicas: set[int]) -> Any:
        return None  # no slots: a leader's records of its followers are its own

    async def wait_for_data(self, parts: Iterable[Any], timeout: float) -> None:
        await wait_for_wake(list(parts), timeout)

    def handle_frame(self, frame: Any, conn: Any = None, *, internal: bool = False) -> Awaitable[list | None]:
        return self.broker.dispatch(frame, conn, internal=internal)

    async def new_replica(self, topic: str, topic_id: bytes, index: int) -> Partition:
        return Partition(topic, index, await self.broker.replica_log(topic, index))

    # -- the broker-shared words: this process's own (it is every process of the broker)
    def broker_word(self, word: int) -> int:
        return self._words[word]

    def set_broker_word(self, word: int, value: int) -> None:
        self._words[word] = value

    def poke(self, index: int) -> None:
        for check in self._wake_checks:  # (the only process: the one poked)
            check()

    def add_wake_check(self, check: Callable[[], None]) -> None:
        self._wake_checks.append(check)

    def process_serving(self, index: int) -> bool:
        return bool(self.broker.started)
