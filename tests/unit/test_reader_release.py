"""A reader lets go of a segment that retention deleted once its file is gone (storage/reader.py
`_SegmentHandle.release`): the descriptor it kept for FileRegions handed out no longer holds the
deleted file's pages and blocks (before, they stayed for RETIRE_GRACE_S, 60 s, whatever
file.delete.delay.ms said), and a region handed out before reads nothing there, never another
file's bytes. A segment renamed `.deleted` but not yet unlinked, and one unlinked within
RELEASE_GRACE_S of leaving the directory, still read as before."""
from __future__ import annotations

import os

import pytest

from kafkafast.storage import LogReader, reader as reader_mod
from tests.unit.test_storage_log import batch, open_log, publish_hw


def deleted_fds(log_dir: str) -> list[str]:
    """This process's descriptors that point at a deleted file of the log's directory."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(log_dir) and target.endswith("(deleted)"):
            out.append(target)
    return out


@pytest.fixture
def deleted_first_segment(tmp_path, monkeypatch):
    """make(delay_ms, grace_s): a log of several segments, a reader that handed out a region
    of the first one, and retention that deleted it (renamed `.deleted`, due after
    `delay_ms`), with the reader's RELEASE_GRACE_S at `grace_s`: (log, reader, region, the
    region's bytes). Both are closed after the test."""
    opened = []

    def make(delay_ms: str, grace_s: float):
        monkeypatch.setattr(reader_mod, "RELEASE_GRACE_S", grace_s)
        log = open_log(tmp_path, segment_bytes="300", retention_ms="0", file_delete_delay_ms=delay_ms)
        for _ in range(8):
            log.append(batch(1, ts=0), 0, now_ms=1)
        publish_hw(log)
        reader = LogReader(log.dir, log.state, topic="t", partition=0)
        opened.append((reader, log))
        region = reader.region(0, 1 << 20)
        assert region is not None and region.length > 0
        expected = region.read()
        assert log.apply_retention(now_ms=1000) >= 1
        return log, reader, region, expected

    yield make
    for reader, log in opened:
        reader.close()
        log.close()


def test_a_deleted_segment_is_let_go_at_the_next_refresh(deleted_first_segment):
    log, reader, region, _ = deleted_first_segment("0", 0.0)
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]  # (no delay: unlinked at once)
    assert deleted_fds(log.dir), "the reader still holds the deleted segment before it refreshes"
    reader.segment_bases()  # (the segment list changed: the reader lists the directory again)
    assert deleted_fds(log.dir) == []
    assert os.readlink(f"/proc/self/fd/{region.fd}").startswith("/memfd:")  # the number stays taken
    assert region.read() == b""  # a region still being sent reads nothing: its connection closes
    kept = reader.read(log.log_start_offset, 1 << 20)  # the kept segment reads as before
    assert kept.first_batch_offset == log.log_start_offset and len(kept.region.read()) == kept.region.length > 0


def test_a_segment_not_yet_unlinked_keeps_its_regions_readable(deleted_first_segment):
    log, reader, region, expected = deleted_first_segment("60000", 0.0)
    reader.segment_bases()
    assert [n for n in os.listdir(log.dir) if n.endswith(".log.deleted")]  # renamed, not unlinked
    assert region.read() == expected
    assert log.delete_pending_files(1000 + 60_000, in_place=True) >= 3
    reader.segment_bases()  # the same segment list: no refresh, the region still reads
    assert region.read() == expected
    log.append(batch(1, ts=0), 0, now_ms=1)  # (a roll: the list changes, the reader refreshes)
    log.append(batch(1, ts=0), 0, now_ms=1)
    publish_hw(log)
    reader.segment_bases()
    assert region.read() == b"" and deleted_fds(log.dir) == []


def test_a_segment_unlinked_within_the_grace_stays_readable(deleted_first_segment):
    log, reader, region, expected = deleted_first_segment("0", 60.0)
    reader.segment_bases()
    assert region.read() == expected  # handed out a moment ago: it is still sent whole
    assert deleted_fds(log.dir)
    reader.close()  # (its last close lets go of it)
    assert deleted_fds(log.dir) == []
