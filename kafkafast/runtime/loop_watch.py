"""What holds an event loop back: the loop-lag probe and the garbage collector's pauses.

`LoopWatch.start()` runs once a broker has started (its logs, metadata and connections'
long-lived objects made):

- `gc.freeze()` moves every object made so far into the permanent generation, which the
  collector no longer walks, and the thresholds are raised (GC_THRESHOLDS): a broker keeps
  hundreds of thousands of long-lived objects (segments, indexes, metadata, the protocol's
  classes), and a gen-2 collection walking them all stalls the loop for tens of ms, the tail
  of every request waiting behind it (Kafka's brokers run a low-pause collector for the same
  reason).
- every collection is timed through `gc.callbacks`, by generation;
- a callback every PROBE_S records how late the loop ran it (the loop's lag: a long callback,
  a collection, a blocking system call). It samples: a stall of PROBE_S or longer always
  delays the pending probe and shows with its full length; a shorter one shows in the share
  of probes it catches. The period is what keeps it nearly free: an idle serving process
  woken every 5 ms spent ten times the CPU of one woken by its connections alone
  (0.010 vs 0.001 CPU-s per second), which showed as 20-35% more broker CPU per GB in a
  consume benchmark whose broker is mostly idle between fetches (perf/results/one_broker.md).
  Even at 50 ms a wake-up of an idle process costs about 0.1 ms of CPU here, so the probe runs
  only when its readings have a reader: the metrics endpoint is on, or KAFKAFAST_LOOP_REPORT.

Both are served under /metrics (kafkafast_eventloop_lag_ms, kafkafast_gc_pause_ms) when the
metrics endpoint is on. With KAFKAFAST_LOOP_REPORT=DIR set (perf runs) each process writes
DIR/loop-<pid>.json at stop: its lag and pause counts by bucket and their maxima.

With KAFKAFAST_STALL_TRACE_MS=N as well, a `StallTracer` thread samples the loop thread's stack
every 2 ms while the loop has not run its heartbeat for N ms, and the report gains the stalls'
stacks (innermost frames, with how many samples each): what held the loop, for a perf run
whose tail is long. A diagnostic: its heartbeat wakes the loop every 5 ms.
"""
from __future__ import annotations

import asyncio
import bisect
import gc
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from kafkafast.metrics import recorder

PROBE_S = 0.05
GC_THRESHOLDS = (50_000, 50, 100)  # gen 0 every 50k allocations (CPython's default: 700), gen 2 rarely
REPORT_ENV = "KAFKAFAST_LOOP_REPORT"
STALL_ENV = "KAFKAFAST_STALL_TRACE_MS"
BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, float("inf"))


class Tally:
    """Counts by BOUNDS_MS bucket, the sum and the maximum (for the KAFKAFAST_LOOP_REPORT file)."""

    __slots__ = ("counts", "total", "max")

    def __init__(self) -> None:
        self.counts = [0] * len(BOUNDS_MS)
        self.total = 0.0
        self.max = 0.0

    def add(self, ms: float) -> None:
        self.counts[bisect.bisect_left(BOUNDS_MS, ms)] += 1
        self.total += ms
        if ms > self.max:
            self.max = ms

    def as_dict(self) -> dict:
        return {"n": sum(self.counts), "sum_ms": round(self.total, 3), "max_ms": round(self.max, 3),
                "le_ms": {str(b): c for b, c in zip(BOUNDS_MS, self.counts)}}


class LoopWatch:
    def __init__(self) -> None:
        self.lag = Tally()
        self.gc = [Tally(), Tally(), Tally()]
        self._gc_started = 0.0
        # pauses not yet recorded: a collection runs in whatever thread allocates (the kazoo
        # thread too) and at any allocation, inside the loop's own bookkeeping as well, so
        # the callback touches neither the loop nor the recorder (its `call_soon` from there
        # lost the loop's callbacks: parked fetches and produces never woken); the probe
        # records them from the loop
        self._pauses: list[tuple[int, float]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._probing = False  # the probe runs (and drains _pauses into the metrics)
        self._stalls: StallTracer | None = None

    def start(self) -> None:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        gc.callbacks.append(self._on_gc)
        recorder.gc_frozen(gc.get_freeze_count())
        self._loop = asyncio.get_running_loop()
        self._probing = recorder.active or bool(os.environ.get(REPORT_ENV))
        if self._probing:
            self._schedule()
        self._stalls = StallTracer.from_env(self._loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        stalls = self._stalls.stop() if self._stalls is not None else None
        directory = os.environ.get(REPORT_ENV)
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)
            report = {"pid": os.getpid(), "lag": self.lag.as_dict(), "gc": [t.as_dict() for t in self.gc],
                      "frozen": gc.get_freeze_count()}
            if stalls is not None:
                report["stalls"] = stalls
            Path(directory, f"loop-{os.getpid()}.json").write_text(json.dumps(report))

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = self._loop.time() + PROBE_S
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        ms = max(0.0, (self._loop.time() - self._due) * 1000.0)
        self.lag.add(ms)
        recorder.loop_lag(ms)
        if self._pauses:
            pauses, self._pauses = self._pauses, []
            for generation, pause_ms in pauses:
                recorder.gc_pause(generation, pause_ms)
        self._schedule()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        ms = (time.perf_counter() - self._gc_started) * 1000.0
        generation = info.get("generation", 2)
        self.gc[generation].add(ms)
        if self._probing:
            self._pauses.append((generation, ms))


class StallTracer:
    """Samples the loop thread's stack while the loop is late (KAFKAFAST_STALL_TRACE_MS)."""

    BEAT_S = 0.005
    SAMPLE_S = 0.002

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_ms: float) -> None:
        self._loop = loop
        self._threshold_s = threshold_ms / 1000.0
        self._ident = threading.get_ident()
        self._beat = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None
        self._done = threading.Event()
        self.samples: dict[str, int] = {}
        self.stalls = 0
        self._heartbeat()
        self._thread = threading.Thread(target=self._watch, name="stall-tracer", daemon=True)
        self._thread.start()

    @classmethod
    def from_env(cls, loop: asyncio.AbstractEventLoop) -> StallTracer | None:
        value = os.environ.get(STALL_ENV)
        return cls(loop, float(value)) if value and os.environ.get(REPORT_ENV) else None

    def _heartbeat(self) -> None:
        self._beat = time.monotonic()
        self._handle = self._loop.call_later(self.BEAT_S, self._heartbeat)

    def _watch(self) -> None:
        stalled = False
        while not self._done.wait(self.SAMPLE_S):
            late = time.monotonic() - self._beat > self._threshold_s
            if late:
                frame = sys._current_frames().get(self._ident)
                if frame is not None:
                    key = "".join(traceback.format_list(traceback.extract_stack(frame)[-8:]))
                    self.samples[key] = self.samples.get(key, 0) + 1
                self.stalls += not stalled
            stalled = late

    def stop(self) -> dict:
        self._done.set()
        if self._handle is not None:
            self._handle.cancel()
        self._thread.join(1)
        top = sorted(self.samples.items(), key=lambda kv: -kv[1])[:20]
        return {"threshold_ms": self._threshold_s * 1000.0, "stalls": self.stalls,
                "stacks": [{"samples": n, "stack": k} for k, n in top]}
