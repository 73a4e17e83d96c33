"""A parked fetch (`broker/placement.py` `wait_for_wake`): one future per park, completed by a
wake of any of its partitions or by the loop's timer; it leaves no waiter and no timer behind,
whichever ends it, and a cancelled park leaves none either."""
from __future__ import annotations

import asyncio

import pytest

from kafkafast.broker.partition import Partition
from kafkafast.broker.placement import wait_for_wake
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log


@pytest.fixture
def parts(tmp_path):
    def make(n: int = 2) -> list[Partition]:
        return [Partition("t", i, Log.open(str(tmp_path / f"t-{i}"), "t", i, LogConfig.from_props({}),
                                           needs_recovery=False, recovery_point=0)) for i in range(n)]
    return make


def scheduled(loop) -> int:
    """Timers the loop still holds that were not cancelled."""
    return sum(1 for h in loop._scheduled if not h.cancelled())


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_the_timer_ends_a_park_nothing_wakes(parts):
    async def main():
        ps = parts()
        await wait_for_wake(ps, 0.01)
        assert all(not p.waiters for p in ps)
        assert scheduled(asyncio.get_running_loop()) == 0
    run(main())


def test_a_wake_ends_the_park_and_cancels_its_timer(parts):
    async def main():
        loop = asyncio.get_running_loop()
        ps = parts(3)
        parked = asyncio.ensure_future(wait_for_wake(ps, 3600))
        await asyncio.sleep(0)
        assert all(len(p.waiters) == 1 for p in ps)
        ps[1].wake()
        await parked
        assert all(not p.waiters for p in ps)
        assert scheduled(loop) == 0
    run(main())


@pytest.mark.parametrize("timeout", [3600, None])
def test_a_cancelled_park_leaves_nothing(parts, timeout):
    async def main():
        loop = asyncio.get_running_loop()
        ps = parts()
        parked = asyncio.ensure_future(wait_for_wake(ps, timeout))
        await asyncio.sleep(0)
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parked
        assert all(not p.waiters for p in ps)
        assert scheduled(loop) == 0
    run(main())


def test_a_wake_after_the_timer_fired_is_harmless(parts):
    async def main():
        ps = parts(1)
        parked = asyncio.ensure_future(wait_for_wake(ps, 0))
        await asyncio.sleep(0)
        await parked
        ps[0].wake()
        assert not ps[0].waiters
    run(main())
