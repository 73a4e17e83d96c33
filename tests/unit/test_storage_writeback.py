"""Early writeback (storage/writeback.py): every WRITEBACK_BYTES appended to a segment start
their disk write, in ranges that follow each other, from the writeback thread (not the
caller's); the call exists and succeeds here."""
from __future__ import annotations

import os
import threading

from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage import writeback
from kafkafast.storage.log import Log


def test_the_kernel_takes_the_writeback_hint(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    try:
        os.write(fd, b"x" * 100_000)
        assert writeback.start_writeback(fd, 0, 100_000, wait=True) is True
    finally:
        os.close(fd)


def test_every_writeback_bytes_appended_start_their_disk_write_in_ranges_that_follow_each_other(tmp_path, monkeypatch):
    ranges: list[tuple[int, int]] = []
    threads: set[str] = set()
    real = writeback._sync_file_range

    def probe(fd: int, offset: int, nbytes: int, flags: int) -> int:
        ranges.append((offset, nbytes))
        threads.add(threading.current_thread().name)
        return real(fd, offset, nbytes, flags)
    monkeypatch.setattr(writeback, "_sync_file_range", probe)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig.from_props({}), needs_recovery=False, recovery_point=0)
    value = os.urandom(1000 * 1000)
    for _ in range(21):
        log.append(bytearray(encode_batch([(1000, None, value, ())])), 0, now_ms=1)
    writeback._thread().submit(lambda: None).result()  # what was handed over is done
    assert len(threads) == 1 and threads.pop().startswith("writeback")
    seg = log.segments[-1]
    step = writeback.WRITEBACK_BYTES
    assert len(ranges) == seg.size // step == 2  # 21 MB: two ranges of >= 8 MiB
    assert ranges[0][0] == 0 and all(n >= step for _, n in ranges)
    assert ranges[1][0] == ranges[0][0] + ranges[0][1]  # each starts where the last ended
    assert seg.written_back == ranges[1][0] + ranges[1][1] <= seg.size
    log.close()
