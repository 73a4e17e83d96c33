"""Shared append (issue 17) under SIGKILL: workers appending to one partition through
shared memory are killed one after another while the others append, then one dies in the
middle of its write (holding the append lock, a torn batch in the file: the test-control
rule `die_writing`). The partition stays writable from the surviving workers, every
acknowledged record is read back once at its acknowledged offset, and the segment files
hold no torn batch."""
from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time

import psutil

from kafkafast.records import encode_batch
from tests.integration.test_shared_append import (FLAVOURS, WORKERS, assert_flavour, create_topic, produce,
                                                  read_log_files, shared_appenders, start_broker, worker_of)
from tests.support.raw_client import RawClient

KILLS = 3
THREADS = 6


def workers(b) -> set[int]:
    return {p.pid for p in psutil.Process(b.proc.pid).children()}


def wait_for(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return False


@FLAVOURS
def test_workers_sigkilled_while_appending_to_one_partition_leave_no_torn_batch(broker_factory, tmp_path, flavour):
    from kafkafast.testing.scripting import Faults

    control = tmp_path / "control"
    control.mkdir()
    b = start_broker(broker_factory, flavour, "shkill", **{"kafkafast.testing.control": str(control)})
    faults = Faults(str(control), workers=WORKERS)
    create_topic(b, "kill")
    acked: dict[bytes, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    ack_times: list[tuple[float, int]] = []  # (time, serving worker pid) of every acknowledged produce

    def append_loop(i: int) -> None:
        n = 0
        c: RawClient | None = None
        pid = 0
        while not stop.is_set():
            try:
                if c is None:
                    c = RawClient(b.port, timeout=10)
                    pid = worker_of(b, c)
                recs = [(int(time.time() * 1000), None, b"t%d-%05d-" % (i, n) + b"v" * 900, []) for _ in range(1)]
                recs = [(ts, None, v + b"%02d" % k, h) for k, (ts, _, v, h) in enumerate(recs * 40)]
                n += 1
                r = produce(c, "kill", encode_batch(recs))
                if r.error_code == 0:
                    with lock:
                        for k, rec in enumerate(recs):
                            acked[rec[2]] = r.base_offset + k
                        ack_times.append((time.monotonic(), pid))
            except (OSError, AssertionError, socket.timeout, AttributeError):
                if c is not None:
                    c.close()
                c = None
                time.sleep(0.01)
        if c is not None:
            c.close()

    threads = [threading.Thread(target=append_loop, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()

    def survivors_append_within_a_second(victim: int, killed_at: float) -> None:
        first_ack: list[float] = []

        def acked_elsewhere() -> bool:
            with lock:
                first_ack[:] = [t for t, pid in ack_times if t > killed_at and pid != victim][:1]
            return bool(first_ack)

        assert wait_for(acked_elsewhere), "no append through a surviving worker after the kill"
        assert first_ack[0] - killed_at < 1.0, f"survivors appended again only after {first_ack[0] - killed_at:.2f}s"
        assert wait_for(lambda: victim not in workers(b) and len(workers(b)) == WORKERS), "no replacement"

    try:
        for k in range(KILLS):
            time.sleep(1.0)
            victim = sorted(workers(b))[k % WORKERS]
            os.kill(victim, signal.SIGKILL)
            survivors_append_within_a_second(victim, time.monotonic())
        # One worker dies in the middle of its write, holding the append lock.
        before = workers(b)
        faults.die_writing("kill", 0)
        assert wait_for(lambda: workers(b) != before), "no worker died writing"
        died_at = time.monotonic()
        victim = (before - workers(b)).pop()
        survivors_append_within_a_second(victim, died_at)
        assert wait_for(lambda: "append lock taken over from a dead holder" in b.log_path.read_text(errors="replace"))
    finally:
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(30)
    assert len(acked) > 1000

    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "chk", "enable.auto.commit": False})
    cons.assign([TopicPartition("kill", 0, 0)])
    got: dict[bytes, int] = {}
    read = 0
    deadline = time.time() + 60
    # (the subset test only once as many records are read as were acknowledged: it walks them all)
    while (len(got) < len(acked) or not acked.keys() <= got.keys()) and time.time() < deadline:
        for m in cons.consume(10_000, 0.5):
            if m.error() is None:
                read += 1
                got[m.value()] = m.offset()
    cons.close()
    assert read == len(got), "a record was read twice"
    assert {v: got.get(v) for v in acked} == acked  # every acknowledged record, at its acknowledged offset
    log_text = b.log_path.read_text(errors="replace")
    assert len(shared_appenders(b, "kill")) >= WORKERS - 1
    takeovers = len(re.findall(r"append lock taken over from a dead holder", log_text))
    assert takeovers >= 1 and "dying in the middle of a write" in log_text
    assert_flavour(b, flavour)
    print(f"{len(acked)} records acknowledged, {takeovers} lock takeovers after {KILLS} kills and one torn write")
    assert b.stop() == 0
    on_disk = read_log_files(b, "kill")  # no torn batch, contiguous offsets, valid CRCs
    assert [o for o, _ in on_disk] == list(range(len(on_disk)))
    disk = {v: o for o, v in on_disk}
    assert len(disk) == len(on_disk) and all(disk[v] == o for v, o in acked.items())
