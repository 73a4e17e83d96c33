"""`python -m kafkafast.cluster.local`, the development cluster: "ready" only once every broker
answers, a broker that cannot start named with the reason (exit 1), ports outside the kernel's
ephemeral range, and help text for every option. Cluster only: the command starts a ZooKeeper
cluster for development (its brokers' features are the `kafka` fixture's tests)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from kafkafast.cluster.local import ephemeral_port_range, metadata_brokers, port_free
from tests.support.broker_process import REPO


def start(tmp_path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "kafkafast.cluster.local", "--dir", str(tmp_path / "c"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO),
                            start_new_session=True)


def read_until_ready(proc: subprocess.Popen, timeout: float = 90.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited {proc.wait()} before ready: {lines} {proc.stderr.read()}")
        lines.append(line.rstrip("\n"))
        if line.startswith("ready:"):
            return lines
    raise AssertionError(f"not ready within {timeout}s: {lines}")


def first_port_inside_the_ephemeral_range() -> int:
    low, high = ephemeral_port_range()
    return next(p for p in range(low, high) if port_free(p) and port_free(p + 1))


def test_ready_only_when_every_broker_answers_on_ports_outside_the_ephemeral_range(tmp_path):
    proc = start(tmp_path, "--brokers", "2", "--port", str(first_port_inside_the_ephemeral_range()))
    try:
        lines = read_until_ready(proc)
        ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", lines[-1].split("brokers:")[1])]
        assert len(ports) == 2
        low, high = ephemeral_port_range()
        zk_port = int(re.search(r"ZooKeeper on 127\.0\.0\.1:(\d+)", lines[-1]).group(1))
        assert all(not low <= p <= high for p in [*ports, zk_port]), (ports, zk_port, low, high)
        for port in ports:  # at "ready" each broker knows both brokers and the controller
            brokers, controller = metadata_brokers(port)
            assert brokers == {1, 2} and controller in (1, 2)
        admin = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports)})
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2]
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    for port in ports:  # everything stopped: nothing listens (the ports may hold TIME_WAIT connections)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_broker_that_cannot_start_is_named_with_the_reason_and_exit_status_1(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "broker-2").write_text("not a directory")  # broker 2's log.dirs
    proc = start(tmp_path, "--brokers", "2")
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 1, (out, err)
    assert "ready" not in out
    assert re.search(r"^kafkafast\.cluster\.local: broker 2 \(127\.0\.0\.1:\d+\) exited with status \d+: .+",
                     err, re.M), err


def test_every_option_has_help_text():
    out = subprocess.run([sys.executable, "-m", "kafkafast.cluster.local", "--help"], capture_output=True,
                         text=True, cwd=str(REPO), timeout=30).stdout
    options = re.findall(r"^  (--[a-z-]+)( [A-Z_]+)?(.*)$", out, re.M)
    assert {o for o, _, _ in options} >= {"--dir", "--brokers", "--port", "--zookeeper-port", "--timeout"}
    for option, _, rest in options:  # help text on the same line or the next one
        assert rest.strip() or re.search(rf"^  {option}.*\n {{10,}}\S", out, re.M), option
