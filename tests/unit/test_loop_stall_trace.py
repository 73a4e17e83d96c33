"""The loop's stall tracer (runtime/loop_watch.py, KAFKAFAST_STALL_TRACE_MS): while the event
loop is held longer than the threshold, the loop thread's stack is sampled, and the report a
perf run reads names the code that held it; without the variable there is no tracer."""
from __future__ import annotations

import asyncio
import gc
import json
import time

import pytest

from kafkafast.runtime import loop_watch


@pytest.fixture
def gc_restored():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def hold_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # a blocking call on the loop, as a synchronous fsync would be


def run_watched(monkeypatch, tmp_path, stall_ms: str | None) -> dict:
    monkeypatch.setenv(loop_watch.REPORT_ENV, str(tmp_path))
    if stall_ms is None:
        monkeypatch.delenv(loop_watch.STALL_ENV, raising=False)
    else:
        monkeypatch.setenv(loop_watch.STALL_ENV, stall_ms)

    async def main() -> None:
        watch = loop_watch.LoopWatch()
        watch.start()
        await asyncio.sleep(0.05)
        hold_the_loop_for(0.15)
        await asyncio.sleep(0.05)
        hold_the_loop_for(0.15)
        await asyncio.sleep(0.05)
        watch.stop()
    asyncio.run(main())
    (report,) = tmp_path.glob("loop-*.json")
    return json.loads(report.read_text())


def test_a_held_loop_is_traced_to_the_code_holding_it(monkeypatch, tmp_path, gc_restored):
    report = run_watched(monkeypatch, tmp_path, "20")
    stalls = report["stalls"]
    assert stalls["threshold_ms"] == 20.0
    assert stalls["stalls"] == 2
    held = [s for s in stalls["stacks"] if "hold_the_loop_for" in s["stack"]]
    assert held and sum(s["samples"] for s in held) >= 20  # ~2 x 130 ms past the threshold at one per 2 ms
    assert "time.sleep(seconds)" in held[0]["stack"]
    assert report["lag"]["max_ms"] >= 100


def test_without_the_variable_no_tracer_runs(monkeypatch, tmp_path, gc_restored):
    report = run_watched(monkeypatch, tmp_path, None)
    assert "stalls" not in report
    assert report["lag"]["max_ms"] >= 100  # the probe still saw the loop held
