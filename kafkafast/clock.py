"""The broker's clock: the time every time-based rule of the broker reads, and its timers.

Real by default (`time.time()`, the event loop's `call_later`). A test broker can run on a
**manual clock** instead (`use_manual_clock(path)`, done by `kafkafast.testing`): the
current time is the 8 bytes of the file at `path` -- a little-endian int64, milliseconds
since the Unix epoch -- mapped with `MAP_SHARED`, so the test process that writes the
file (`kafkafast.testing.ManualClock.advance`) and every broker process that reads it
(workers included) see the same instant. The time stands still until the test moves it.

Timers on the manual clock (`call_later`, `sleep`) fire when `fire_due_timers()` finds the
clock at or past their deadline; the broker's test-control task calls it every few
milliseconds, on the event loop, so callbacks run where loop timers would.

What reads this clock: record append time and segment roll by time (`segment.ms`),
retention by time and the retention check interval, time-based flushes, producer-id
expiry, and in the group coordinator: session timeouts, rebalance and initial-delay
timers, offsets retention and its check interval; in the transaction coordinator: transaction
timeouts, their cleanup interval and transactional-id expiry. What does not: waits that belong to the
network (fetch `max.wait.ms`, produce `timeout.ms`, delays injected by a test), which stay
on real time so that clients never hang on a clock that a test has stopped.
"""
from __future__ import annotations

import heapq
import itertools
import mmap
import os
import struct
import time
from typing import Any, Callable

_CLOCK = struct.Struct("<q")

_manual: mmap.mmap | None = None
_timers: list[tuple[int, int, "ManualTimer"]] = []  # heap of (deadline ms, sequence, timer)
_sequence = itertools.count()


def now_ms() -> int:
    """Milliseconds since the Unix epoch, on the real or the manual clock."""
    if _manual is None:
        return int(time.time() * 1000)
    return _CLOCK.unpack_from(_manual, 0)[0]


def is_manual() -> bool:
    return _manual is not None


def use_manual_clock(path: str) -> None:
    """Reads time from the 8-byte file at `path` from now on (in this process)."""
    global _manual
    fd = os.open(path, os.O_RDWR)
    try:
        _manual = mmap.mmap(fd, _CLOCK.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def write_manual_clock(path: str, ms: int) -> None:
    """Creates or sets the manual clock file at `path` (the test's side)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, _CLOCK.pack(ms), 0)
    finally:
        os.close(fd)


class ManualTimer:
    """A timer on the manual clock; `cancel()` as with an asyncio TimerHandle."""

    __slots__ = ("deadline", "callback", "args", "_cancelled")

    def __init__(self, deadline: int, callback: Callable[..., Any], args: tuple) -> None:
        self.deadline = deadline
        self.callback = callback
        self.args = args
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled


def call_later(loop: Any, delay_ms: float, callback: Callable[..., Any], *args: Any) -> Any:
    """`loop.call_later` in clock milliseconds; on the manual clock a ManualTimer."""
    delay_ms = max(delay_ms, 0)
    if _manual is None:
        return loop.call_later(delay_ms / 1000.0, callback, *args)
    timer = ManualTimer(now_ms() + int(delay_ms), callback, args)
    heapq.heappush(_timers, (timer.deadline, next(_sequence), timer))
    return timer


async def sleep(delay_ms: float) -> None:
    """`asyncio.sleep` in clock milliseconds."""
    import asyncio  # deferred: kafkafast.testing imports this module and starts light

    if _manual is None:
        await asyncio.sleep(max(delay_ms, 0) / 1000.0)
        return
    fut = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    timer = call_later(None, delay_ms, wake)
    try:
        await fut
    finally:
        timer.cancel()


def fire_due_timers() -> int:
    """Runs the callbacks of manual timers whose deadline has come, in deadline order;
    returns how many ran. Callbacks that schedule timers already due run in this call."""
    fired = 0
    while _timers and _timers[0][0] <= now_ms():
        _, _, timer = heapq.heappop(_timers)
        if not timer._cancelled:
            fired += 1
            timer.callback(*timer.args)
    return fired
