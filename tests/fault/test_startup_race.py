"""Start-up of a multi-worker broker: a connection is accepted only by a worker that serves.

The supervisor binds one SO_REUSEPORT socket per worker and each worker listens on its own
only once it is ready, so a client that connects while the broker starts is either refused
(and retries) or answered - never queued at a worker that is still loading and never reset.
A second broker on the same port refuses to start (SO_REUSEPORT would otherwise let the two
share connections), and a SIGTERM that arrives while workers start stops them cleanly.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from tests.support.broker_process import REPO, _recv, free_port

ROUNDS = 5
WORKERS = 8
CLIENTS = 12


def api_versions_v3(sock: socket.socket, correlation: int) -> int:
    """ApiVersions v3 (flexible, as librdkafka sends it first); returns the error code."""
    body = (struct.pack(">hhih", 18, 3, correlation, 4) + b"race" + b"\x00"  # header v2, no tags
            + b"\x05race" + b"\x061.0.0" + b"\x00")  # client software name/version, no tags
    sock.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", _recv(sock, 4))[0]
    data = _recv(sock, size)
    assert struct.unpack(">i", data[:4])[0] == correlation
    return struct.unpack(">h", data[4:6])[0]


def connect_and_ask(port: int, correlation: int, results: list, deadline: float) -> None:
    """Connects as soon as the port accepts (refusals are retried: nothing serves yet), then
    expects an answer on that connection."""
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        except ConnectionRefusedError:
            time.sleep(0.005)
            continue
        try:
            results.append(("answered", api_versions_v3(sock, correlation)))
        except OSError as exc:
            results.append(("failed", repr(exc)))
        finally:
            sock.close()
        return
    results.append(("failed", "never accepted"))


def broker_command(port: int, data_dir) -> list[str]:
    return [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", str(WORKERS),
            "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--set", f"log.dirs={data_dir}",
            "--set", "offsets.topic.num.partitions=8"]


def test_clients_connecting_while_an_8_worker_broker_starts_are_all_answered(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for r in range(ROUNDS):
        port = free_port()
        results: list = []
        deadline = time.monotonic() + 45
        clients = [threading.Thread(target=connect_and_ask, args=(port, i + 1, results, deadline))
                   for i in range(CLIENTS)]
        for t in clients:
            t.start()
        log_path = tmp_path / f"broker-{r}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(broker_command(port, tmp_path / f"data-{r}"), cwd=str(REPO), env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            for t in clients:
                t.join(60)
            # Stopped at once, while some workers may still be starting: all must stop cleanly.
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        assert sorted(results) == [("answered", 0)] * CLIENTS, (r, results, log_path.read_text()[-3000:])
        assert code == 0, (r, log_path.read_text()[-3000:])


def test_connections_after_a_worker_is_killed_are_all_answered(broker_factory):
    b = broker_factory(workers=2)
    pids = [int(p) for p in subprocess.run(["pgrep", "-P", str(b.proc.pid)], capture_output=True,
                                           text=True).stdout.split()]
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGKILL)
    results: list = []
    deadline = time.monotonic() + 45
    for i in range(CLIENTS):  # one after the other: each lands on whichever socket the kernel picks
        connect_and_ask(b.port, i + 1, results, deadline)
    assert results == [("answered", 0)] * CLIENTS


def test_second_broker_on_the_same_port_refuses_to_start(broker_factory, tmp_path):
    first = broker_factory(workers=2)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for workers in ("2", "0"):
        cmd = [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", workers,
               "--set", f"listeners=PLAINTEXT://127.0.0.1:{first.port}", "--set", f"log.dirs={tmp_path / 'other'}"]
        try:
            res = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"a second broker ({workers} workers) started on port {first.port}") from None
        assert res.returncode == 1
        assert f"cannot listen on 127.0.0.1:{first.port}" in res.stderr
        assert "Traceback" not in res.stderr
    assert first.proc.poll() is None


def test_sigterm_while_workers_start_stops_every_worker_cleanly(tmp_path):
    """SIGTERM as soon as the first worker answers: the workers still starting must see it
    (uvloop drops a signal that arrives before its loop runs) and all exit 0 quickly."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for r in range(3):
        port = free_port()
        proc = subprocess.Popen(broker_command(port, tmp_path / f"data-{r}"), cwd=str(REPO), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            results: list = []
            connect_and_ask(port, 1, results, time.monotonic() + 45)
            assert results == [("answered", 0)]
            proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            code = proc.wait(30)
            stopped_in = time.monotonic() - t0
            log = proc.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        assert code == 0, log[-3000:]
        assert "did not stop in time" not in log
        assert stopped_in < 8, stopped_in  # the supervisor kills workers that ignore SIGTERM after 8.5 s
