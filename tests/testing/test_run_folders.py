"""A broker under test keeps run folders in the temporary directory while it runs (the
supervisor's `kafkafast-<pid>-*`: worker sockets and the shared partition table; the metrics
folder `kafkafast-metrics-<pid>-*`). A clean stop removes them; a SIGKILL cannot, so the test
harness removes what its killed brokers leave."""
from __future__ import annotations

import glob
import os
import signal
import tempfile
import time

import pytest

from kafkafast.testing.broker_process import KafkaTestBroker, free_port


STARTED = [0.0]  # when the test's broker was started


def run_folders(pid: int) -> list[str]:
    """The run folders of process `pid` made since the test's broker started (a folder left by
    an earlier process of the same pid, killed in another test, is not this broker's)."""
    tmp = tempfile.gettempdir()
    found = (glob.glob(os.path.join(tmp, f"kafkafast-{pid}-*"))
             + glob.glob(os.path.join(tmp, f"kafkafast-metrics-{pid}-*")))
    out = []
    for path in found:
        try:
            if os.stat(path).st_ctime >= STARTED[0] - 1.0:
                out.append(path)
        except FileNotFoundError:
            pass
    return sorted(out)


@pytest.fixture
def broker(tmp_path):
    STARTED[0] = time.time()
    b = KafkaTestBroker(tmp_path, workers=1, settings={"metrics.port": str(free_port())}).start()
    yield b
    b.kill()


def test_a_killed_broker_leaves_no_run_folder(broker):
    pid = broker.proc.pid
    assert len(run_folders(pid)) == 2, run_folders(pid)  # the supervisor's and the metrics folder
    broker.kill()
    assert run_folders(pid) == []


def test_a_broker_killed_outside_the_harness_leaves_no_run_folder_once_stopped(broker):
    """Killed by something else (a test's own SIGKILL, a fault, the OOM killer): the harness's
    stop() (what the fixtures call at the end) removes its folders."""
    pid = broker.proc.pid
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while broker.proc.poll() is None:
        assert time.monotonic() < deadline, "the broker did not die"
        time.sleep(0.01)
    assert run_folders(pid)
    broker.stop()
    assert run_folders(pid) == []


def test_a_restart_after_a_kill_leaves_only_the_new_brokers_folders(broker):
    first = broker.proc.pid
    broker.restart(clean=False)
    assert run_folders(first) == []
    assert len(run_folders(broker.proc.pid)) == 2
