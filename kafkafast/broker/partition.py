"""One partition replica as this process sees it, in every mode (issue 24: a single node is a
cluster of one): its role (leader or follower, leader and partition epochs, ISR, replicas), the
leader's record of its followers and the high-watermark rule, the produces and fetches parked
on it, and where it lives (`home`, given by the placement).

Role: the replica manager sets it (`apply_state`, broker/replica_manager.py) from the partition
states the control plane hands it: the single node's local one makes every partition a leader
at epoch 0 whose ISR and replicas are this broker alone; ZooKeeper's applies each LeaderAndIsr.

High watermark (Kafka's `Partition.maybeIncrementLeaderHW`): each follower's log end offset is
what it last asked to fetch from (`broker/follower_state.py`); the high watermark is the minimum
log end offset over the ISR (plus followers whose addition is in flight), never moves backwards
on the leader, and produce requests with acks=all wait until it passes their last offset. With
no follower in the ISR that minimum is the leader's own log end, which the append publishes at
once (`ReplicaManager.append`; a shared-mode Log under its lock): a lone replica's acks=all
produce finds its high watermark there already and never waits (`wait_for_hw`).

Home: where the replica's writer and published state live, as its placement says. `HERE` in one
process (broker/placement.py); a slot of the shared partition table with its owner worker in
the pre-fork runtime (runtime/placement.py: `SlotResidence`, one class under either control
plane). What differs between homes goes through the home, checked by a plain flag off the lone
replica's path: a `remote` home (a replica another worker keeps) gives the ISR from the slot
and waits for the high watermark there; an `announcing` one (that replica's owner) wakes the
other workers' parked requests with its own (`wake_everywhere`, on the replicated partition's
paths). The placement's per-partition bookkeeping (what a parked fetch saw, how many are parked,
a non-owner's shared-mode writer) is kept in plain fields beside it.
"""
from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Callable

from kafkafast.broker.follower_state import FollowerState
from kafkafast.protocol import errors as E


class Here:
    """The home of a replica in one process: no shared-memory slot, no other owner, and its state
    is published the moment it is opened (never loading)."""

    __slots__ = ()
    slot = -1
    owner = -1  # this process, whichever it is (WorkerPlacement.owns: a partition not in a slot yet)
    loading = False
    remote = False  # its replica state (ISR, high watermark) is kept here
    announcing = False  # no other process has requests parked on it


HERE = Here()


class Partition:
    """One partition replica (see the module docstring): the writer `log` when this process
    appends to it, else a reader over the files and the published state."""

    __slots__ = ("topic", "index", "log", "state", "home", "topic_id", "waiters",
                 # role (the control plane's)
                 "is_leader", "leader_id", "leader_epoch", "partition_epoch", "isr", "replicas", "confirmed_epoch",
                 "fenced", "leading_since",
                 # the leader's replication state
                 "followers", "alter_in_flight", "epoch_start_offset", "hw_waiters", "answered_hw",
                 # the placement's bookkeeping
                 "seen_hw", "seen_leo", "notified", "parked", "fetches_seen", "shared_log", "shared_txn_logged",
                 "__weakref__")

    def __init__(self, topic: str, index: int, log_: Any, home: Any = HERE, topic_id: bytes = bytes(16)) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.state = log_.state  # its published state (the log's for good: one read less on the fetch path)
        self.home = home
        self.topic_id = topic_id
        self.waiters: set[asyncio.Future] = set()  # fetches parked here (`wake`)
        # no role until the replica manager gives it one (`apply_state`)
        self.is_leader = False
        self.leader_id = -1
        self.leader_epoch = 0
        self.leading_since = 0  # see `apply_state`
        self.partition_epoch = -1
        self.isr: list[int] = []
        self.replicas: list[int] = []
        self.confirmed_epoch = -1  # the broker epoch (registration) a LeaderAndIsr naming its role was sent to
        self.fenced: str | None = None  # why appends are refused now (logged when it changes)
        self.followers: dict[int, FollowerState] = {}
        self.alter_in_flight: list[int] | None = None
        self.epoch_start_offset = 0
        self.hw_waiters: list[tuple[int, asyncio.Future]] = []
        # follower -> the high watermark this process last answered its Fetch with: a parked
        # follower Fetch is answered as soon as the high watermark differs from it
        self.answered_hw: dict[int, int] = {}
        self.seen_hw = -1  # the high watermark a fetch about to park last saw (a worker's wake-up compares)
        self.seen_leo = -1  # the log end it saw (a cluster worker's follower fetch waits for the log end)
        self.notified = (-1, -1)  # (high watermark, log end) when a cluster worker last woke its parked requests
        self.parked = 0  # fetches of this process parked on it (a worker marks its waiter byte while > 0)
        self.fetches_seen: dict[int, int] = {}  # follower -> its last fetch a cluster worker's owner looked at
        self.shared_log: Any = None  # a non-owner worker's shared-mode writer, opened on first use
        self.shared_txn_logged = False  # whether that writer logged its first transactional append

    # -- where it lives ------------------------------------------------------------------
    @property
    def slot(self) -> int:
        """Its slot in the shared partition table (-1: none, one process)."""
        return self.home.slot

    @property
    def owner(self) -> int:
        """The worker holding its writer (-1: this process)."""
        return self.home.owner

    @property
    def loading(self) -> bool:
        """Whether nothing of the partition is published yet in this start (with worker
        processes: its owner has not loaded it yet); never in one process."""
        return self.home.loading

    # -- published state -----------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        st = self.state
        hw = self.seen_hw = st.high_watermark  # what the fetch about to park saw: a worker's wake-up compares
        self.seen_leo = st.log_end_offset  # (both: a consumer's fetch then wakes once per append, never spins)
        return hw

    @property
    def log_start_offset(self) -> int:
        return self.state.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.state.log_end_offset

    def unavailable_error(self) -> int:
        """The error every request for the partition gets before anything of it is read, 0
        when none: NOT_LEADER_OR_FOLLOWER while it is loading (Kafka's answer for a partition
        a broker does not serve yet: clients refresh their metadata, which lists it without a
        leader until then, and retry), KAFKA_STORAGE_ERROR while its log is offline."""
        if self.home.loading:
            return E.ErrorCode.NOT_LEADER_OR_FOLLOWER
        return E.ErrorCode.KAFKA_STORAGE_ERROR if self.state.offline else 0

    def wake(self) -> None:
        """Answers the fetches parked on it (they re-read)."""
        waiters, self.waiters = self.waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def wake_everywhere(self) -> None:
        """`wake`, and where its home is `announcing` (a cluster worker owning the replica) the
        requests parked in other workers too: the replicated partition's high watermark, log
        end or role moved (the lone replica's append paths wake other processes themselves)."""
        self.wake()
        if self.home.announcing:
            self.home.announce(self)

    # -- role ----------------------------------------------------------------------------
    def new_leadership(self, ps: Any) -> bool:
        """Whether a state naming this broker leader starts a leadership here: it did not lead,
        or `ps` is another leader epoch (to ask before `apply_state`)."""
        return not self.is_leader or ps.leader_epoch != self.leader_epoch

    def apply_state(self, ps: Any, *, is_leader: bool) -> None:
        """Takes a LeaderAndIsr partition state (leader, epochs, ISR, replicas). `leading_since`
        is the leader epoch from which this broker has led the partition without a break (-1
        while it does not): a state keeping it the leader at the same or the next epoch (the
        controller bumps the epoch by one for each change, an ISR change included) continues
        the run; any larger jump may hide another leader in between, and starts a new one."""
        if not is_leader:
            self.leading_since = -1
        elif not (self.is_leader and self.leading_since >= 0
                  and self.leader_epoch <= ps.leader_epoch <= self.leader_epoch + 1):
            self.leading_since = ps.leader_epoch
        self.is_leader = is_leader
        self.leader_id = ps.leader
        self.leader_epoch = ps.leader_epoch
        self.isr = list(ps.isr)
        self.replicas = list(ps.replicas)
        self.partition_epoch = ps.partition_epoch
        self.alter_in_flight = None
        self.answered_hw.clear()  # a new role or epoch: what the followers know is unknown

    @property
    def in_sync_replicas(self) -> list[int]:
        """The ISR as its keeper has it: `isr` here, or, for a replica another worker keeps,
        the owner's in the slot (`isr` there is the last LeaderAndIsr's)."""
        home = self.home
        return home.isr(self) if home.remote else self.isr

    @property
    def in_sync_count(self) -> int:
        """How many replicas are in sync (a lone replica is its own ISR)."""
        return len(self.in_sync_replicas)

    # -- the high-watermark rule -----------------------------------------------------------
    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark waits for: the committed one plus pending additions."""
        members = set(self.isr)
        if self.alter_in_flight is not None:
            members |= set(self.alter_in_flight)
        return members

    def maybe_increment_hw(self, self_id: int) -> bool:
        """Moves the leader's high watermark to the minimum log end over the (maximal) ISR, if
        that is higher; answers the acks=all produces it passes, then wakes the fetches."""
        if not self.is_leader:
            return False
        st = self.state
        hw = st.high_watermark
        new_hw = st.log_end_offset  # (published: in a worker, other workers may have appended)
        if new_hw <= hw:
            return False
        followers = self.followers
        # (the ISR itself unless an addition is in flight: no set per call; it runs per append
        # and per follower Fetch that moved a log end, and stops at the first member not past `hw`)
        for r in (self.isr if self.alter_in_flight is None else self.maximal_isr()):
            if r == self_id:
                continue
            f = followers.get(r)
            if f is None:
                return False
            leo = f.leo
            if leo <= hw:
                return False
            if leo < new_hw:
                new_hw = leo
        st.high_watermark = new_hw
        st.last_stable_offset = self.log.last_stable_offset(new_hw)
        if self.hw_waiters:  # first: the produces are answered before the fetches woken below
            self.pass_hw_waiters(new_hw)
        self.wake_everywhere()
        return True

    def pass_hw_waiters(self, hw: int) -> None:
        """Calls `done(0)` of every acks=all wait the high watermark `hw` passed, in this call
        (a parked produce writes its answer now, issue 25); the others stay."""
        waiting, self.hw_waiters = self.hw_waiters, []
        still = []
        for offset, done in waiting:
            if offset <= hw:
                done(0)
            else:
                still.append((offset, done))
        self.hw_waiters = still + self.hw_waiters if self.hw_waiters else still

    async def wait_for_hw(self, offset: int, timeout_s: float) -> int:
        """0 once the high watermark reaches `offset` (at once for a lone replica: the append
        published it); an error code if leadership is lost (NOT_LEADER_OR_FOLLOWER) or the
        timeout passes (REQUEST_TIMED_OUT)."""
        if self.state.high_watermark >= offset:
            return 0
        if self.home.remote:  # another worker keeps it: wait for the slot
            return await self.home.wait_for_hw(self, offset, timeout_s)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.hw_waiters.append((offset, partial(_settle, fut)))
        # the future itself is awaited (not through asyncio.wait_for, whose own waiter costs a
        # loop pass): the waiter resumes on the pass after the Fetch that moved the watermark
        timer = loop.call_later(timeout_s, _settle, fut, E.ErrorCode.REQUEST_TIMED_OUT)
        try:
            return await fut
        finally:
            timer.cancel()

    def on_hw(self, offset: int, done: Callable[[int], None]) -> None:
        """Calls `done(0)` in the call that moves the high watermark to `offset` or past it,
        `done(code)` when parked waits are failed (`fail_waiters`); a caller checks the high
        watermark first, and times out on its own (`done` may then still be called: it
        ignores a second call). Without a coroutine resuming a pass later: a parked acks=all
        produce (broker/handlers/produce.py) writes its answer within the follower Fetch that
        moved the watermark. A replica kept by another worker (`home.remote`) is waited for on
        its slot (`SlotResidence.on_hw`): `done(0)` on the wake-up that finds its published
        high watermark past `offset`."""
        if self.home.remote:
            self.home.on_hw(self, offset, done)
        else:
            self.hw_waiters.append((offset, done))

    def fail_waiters(self, code: int) -> None:
        """Answers every parked acks=all produce with `code` (leadership moved)."""
        waiters, self.hw_waiters = self.hw_waiters, []
        for _, done in waiters:
            done(code)


def _settle(fut: asyncio.Future, code: int) -> None:
    if not fut.done():
        fut.set_result(code)
