"""A partition replica in cluster mode: leader or follower, ISR, and the high-watermark rule.

Leader side (Kafka's `Partition`): each follower's log end offset is what it last asked
to fetch from; a follower is caught up when that reaches the leader's log end, and its
`last_caught_up_ms` is when it last did (or, if it fetched up to where the log ended at its
previous fetch, the time of that fetch). The high watermark is the minimum log end offset
over the ISR (plus followers whose addition is in flight), never moves backwards on the
leader, and produce requests with acks=all wait until it passes their last offset.
"""
from __future__ import annotations

import asyncio
from typing import Any

from kafkafast.broker.broker import Partition
from kafkafast.broker.follower_state import FollowerState


class ClusterPartition(Partition):
    __slots__ = ("topic_id", "leader_id", "isr", "replicas", "partition_epoch", "is_leader", "followers",
                 "alter_in_flight", "epoch_start_offset", "hw_waiters", "confirmed_epoch", "fenced",
                 "answered_hw")

    def __init__(self, topic: str, index: int, log_: Any) -> None:
        super().__init__(topic, index, log_)
        self.topic_id = bytes(16)
        self.leader_id = -1
        self.isr: list[int] = []
        self.replicas: list[int] = []
        self.partition_epoch = -1
        self.is_leader = False
        self.followers: dict[int, FollowerState] = {}
        self.alter_in_flight: list[int] | None = None
        self.epoch_start_offset = 0
        self.hw_waiters: list[tuple[int, asyncio.Future]] = []
        self.confirmed_epoch = -1  # the broker epoch (registration) a LeaderAndIsr naming this replica's role was sent to
        self.fenced: str | None = None  # why appends are refused now (logged when it changes)
        # follower -> the high watermark this process last answered its Fetch with: a parked
        # follower Fetch is answered as soon as the high watermark differs from it
        self.answered_hw: dict[int, int] = {}

    @property
    def in_sync_count(self) -> int:
        return len(self.isr)

    def apply_state(self, ps: Any, *, is_leader: bool) -> None:
        """Takes a LeaderAndIsr partition state (leader, epochs, ISR, replicas)."""
        self.is_leader = is_leader
        self.leader_id = ps.leader
        self.leader_epoch = ps.leader_epoch
        self.isr = list(ps.isr)
        self.replicas = list(ps.replicas)
        self.partition_epoch = ps.partition_epoch
        self.alter_in_flight = None
        self.answered_hw.clear()  # a new role or epoch: what the followers know is unknown

    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark waits for: the committed one plus pending additions."""
        members = set(self.isr)
        if self.alter_in_flight is not None:
            members |= set(self.alter_in_flight)
        return members

    def maybe_increment_hw(self, self_id: int) -> bool:
        if not self.is_leader:
            return False
        st = self.log.state
        new_hw = st.log_end_offset  # (published: in a worker, other workers may have appended)
        for r in self.maximal_isr():
            if r == self_id:
                continue
            f = self.followers.get(r)
            new_hw = min(new_hw, f.leo if f is not None else -1)
        if new_hw <= st.high_watermark:
            return False
        st.high_watermark = new_hw
        st.last_stable_offset = self.log.last_stable_offset(new_hw)
        if self.hw_waiters:  # first: the produces answered resume before the fetches woken below
            still = []
            for offset, fut in self.hw_waiters:
                if offset <= new_hw:
                    if not fut.done():
                        fut.set_result(0)
                else:
                    still.append((offset, fut))
            self.hw_waiters = still
        self.wake()
        return True

    async def wait_for_hw(self, offset: int, timeout_s: float) -> int:
        """0 once the high watermark reaches `offset`; an error code if leadership is lost
        (NOT_LEADER_OR_FOLLOWER) or the timeout passes (REQUEST_TIMED_OUT)."""
        if self.log.state.high_watermark >= offset:
            return 0
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.hw_waiters.append((offset, fut))
        # the future itself is awaited (not through asyncio.wait_for, whose own waiter costs a
        # loop pass): the produce resumes on the pass after the Fetch that moved the watermark
        timer = loop.call_later(timeout_s, _time_out, fut)
        try:
            return await fut
        finally:
            timer.cancel()

    def fail_waiters(self, code: int) -> None:
        waiters, self.hw_waiters = self.hw_waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(code)


def _time_out(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(7)  # REQUEST_TIMED_OUT
