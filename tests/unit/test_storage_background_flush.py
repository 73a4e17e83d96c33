"""Rolled segments are synced by the process's flush thread when the log's maintenance runs
on an event loop (storage/log.py `_flush_rolled_in_background`): the loop's call returns
before the sync, the recovery point moves once the thread is done, a truncation meanwhile
moves nothing, and without a loop the sync stays in place. Retention's `.deleted` files are
unlinked by the same thread on a loop, in place when the log closes."""
from __future__ import annotations

import asyncio
import os
import threading

from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log


def _batch() -> bytearray:
    return bytearray(encode_batch([(1000, b"k", b"v" * 100, ())]))


def _rolled_log(tmp_path) -> Log:
    cfg = LogConfig.from_props({"segment.bytes": "600"})
    log = Log.open(str(tmp_path / "t-0"), "t", 0, cfg, needs_recovery=False, recovery_point=0)
    for _ in range(12):
        log.append(_batch(), 0, now_ms=1)
    assert len(log.segments) >= 3 and log.recovery_point == 0
    return log


def _syncs_by_thread(monkeypatch) -> list[str]:
    """The name of the thread of each fdatasync (the real call is made)."""
    names: list[str] = []
    real = os.fdatasync

    def probe(fd: int) -> None:
        names.append(threading.current_thread().name)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", probe)
    return names


async def _until(cond, passes: int = 2000) -> None:
    for _ in range(passes):
        if cond():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


def test_rolled_segments_are_synced_by_the_flush_thread_and_then_move_the_recovery_point(tmp_path, monkeypatch):
    log = _rolled_log(tmp_path)
    names = _syncs_by_thread(monkeypatch)
    active_base = log.segments[-1].base_offset
    rolled = len(log.segments) - 1

    async def main() -> None:
        assert log.maybe_flush(now_ms=2) is False  # (flush.ms not due: only the rolled segments)
        assert log.recovery_point == 0  # not yet: the thread syncs them
        assert len(log._unflushed) == rolled
        await _until(lambda: log.recovery_point == active_base)
        assert log._unflushed == []
        assert log.maybe_flush(now_ms=3) is False  # nothing left to sync
    asyncio.run(main())
    assert len(names) == 3 * rolled  # the log and its two indexes, for each rolled segment
    assert all(n.startswith("log-flush") for n in names), names


def test_a_truncation_while_the_thread_syncs_moves_no_recovery_point(tmp_path, monkeypatch):
    log = _rolled_log(tmp_path)
    release = threading.Event()
    real = os.fdatasync

    def held(fd: int) -> None:
        if threading.current_thread().name.startswith("log-flush"):
            release.wait(10)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", held)
    first_base = log.segments[1].base_offset

    async def main() -> None:
        log.maybe_flush(now_ms=2)
        log.truncate_to(first_base + 1)  # into the second segment, while the sync is held
        release.set()
        await _until(lambda: log._flushing is None)
        assert log.recovery_point == 0  # the sync began before the truncation: it moves nothing
        assert log.log_end_offset == first_base + 1
        log.maybe_flush(now_ms=3)  # the next call syncs what is still unflushed
        await _until(lambda: log._flushing is None and not log._unflushed)
        assert log.recovery_point == log.segments[-1].base_offset == first_base
    asyncio.run(main())


def test_without_an_event_loop_the_rolled_segments_are_synced_in_place(tmp_path, monkeypatch):
    log = _rolled_log(tmp_path)
    names = _syncs_by_thread(monkeypatch)
    log.maybe_flush(now_ms=2)
    assert log.recovery_point == log.segments[-1].base_offset and log._unflushed == []
    assert names and set(names) == {threading.current_thread().name}


def test_a_clean_flush_syncs_segments_whose_background_sync_is_still_running(tmp_path, monkeypatch):
    log = _rolled_log(tmp_path)
    release = threading.Event()
    names = []
    real = os.fdatasync

    def held(fd: int) -> None:
        name = threading.current_thread().name
        names.append(name)
        if name.startswith("log-flush"):
            release.wait(10)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", held)

    async def main() -> None:
        log.maybe_flush(now_ms=2)
        log.flush()  # e.g. a clean shutdown: does not rely on the thread's sync
        here = threading.current_thread().name
        assert names.count(here) >= len(log.segments)  # every rolled segment and the active one, here
        assert log.recovery_point == log.log_end_offset and log._unflushed == []
        release.set()
        await _until(lambda: log._flushing is None)
        assert log.recovery_point == log.log_end_offset  # the late completion moves nothing back
    asyncio.run(main())


def _hold_the_flush_thread() -> threading.Event:
    """Occupy the flush thread until the returned event is set."""
    from kafkafast.storage.log import _flush_thread
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)
    _flush_thread().submit(hold)
    assert started.wait(10)
    return release


def _deleted_files(log: Log) -> list[str]:
    return [n for n in os.listdir(log.dir) if n.endswith(".deleted")]


def _retained_log(tmp_path, delete_delay_ms: int) -> Log:
    """A log of several rolled segments, all past retention.bytes=0 once the high watermark is at its end."""
    cfg = LogConfig.from_props({"segment.bytes": "600", "retention.bytes": "0",
                                "file.delete.delay.ms": str(delete_delay_ms)})
    log = Log.open(str(tmp_path / "t-0"), "t", 0, cfg, needs_recovery=False, recovery_point=0)
    for _ in range(12):
        log.append(_batch(), 0, now_ms=1)
    log.state.high_watermark = log.log_end_offset
    return log


def test_retention_unlinks_on_the_flush_thread_not_on_the_loop(tmp_path):
    log = _retained_log(tmp_path, 0)
    rolled = len(log.segments) - 1
    assert rolled >= 2

    async def main() -> None:
        release = _hold_the_flush_thread()
        try:
            assert log.apply_retention(now_ms=2) == rolled
            assert len(log.segments) == 1
            # Renamed on the loop, unlinked by the (held) thread: all three files of each still here.
            assert len(_deleted_files(log)) == 3 * rolled
        finally:
            release.set()
        await _until(lambda: not _deleted_files(log))
    asyncio.run(main())
    log.close()


def test_a_closing_log_unlinks_its_due_files_in_place(tmp_path):
    log = _retained_log(tmp_path, 60000)

    async def main() -> None:
        assert log.apply_retention(now_ms=2) >= 2
        assert _deleted_files(log)  # file.delete.delay.ms not passed
        release = _hold_the_flush_thread()
        try:
            log.close()  # a clean close: every pending file, whatever its delay, before returning
            assert not _deleted_files(log)
        finally:
            release.set()
    asyncio.run(main())
