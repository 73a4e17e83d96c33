"""Starts a real kafkafast broker as a child process for integration tests.

Binds 127.0.0.1 on a free port, keeps its data in a test directory, waits until the broker
answers ApiVersions, and stops it (SIGTERM, then SIGKILL after a bound) at the end.

The broker is the `kafkafast broker` command forked from the session's fork server
(kafkafast.testing.fork_server), which has imported kafkafast once: a new interpreter spends
0.5-1 s of CPU importing it for every broker, and the suite starts hundreds of them. A
broker is a new interpreter instead when a fork would not give it what a new interpreter
gets: an environment of its own (`env`, e.g. KAFKAFAST_PURE=1, read when kafkafast is
imported), KAFKAFAST_PURE in this process's environment, or a descriptor limit this process
changed after the fork server started; and under KAFKAFAST_TESTING_SPAWN=exec.
"""
from __future__ import annotations

import os
import resource
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from kafkafast.testing.broker_process import (
    ForkedProcess,
    ForkServer,
    default_spawn,
    die_with_parent,
    free_port,
    kill_group,
    stop_gracefully,
)

REPO = Path(__file__).resolve().parents[2]
# Kafka's own test brokers (TestUtils.createBrokerConfig) and the images used for tests start a
# group's first rebalance at once; a test of the delay sets it (`settings` override these).
TEST_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
# the fork server's (it starts as pytest configures, before any test changes the limit)
FORK_SERVER_NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)


def api_versions_ok(port: int, timeout: float = 1.0) -> bool:
    """Sends ApiVersions v0 and checks that a well-formed answer comes back."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _recv(s, 4))[0]
            data = _recv(s, size)
            return struct.unpack(">i", data[:4])[0] == 1
    except OSError:
        return False


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("closed")
        out += chunk
    return out


class BrokerProcess:
    def __init__(self, data_dir: Path, *, port: int | None = None, workers: int = 0,
                 settings: dict[str, str] | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.workers = workers
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        self.env = dict(env or {})
        self.proc: subprocess.Popen | ForkedProcess | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", str(self.workers),
               "--set", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--set", f"log.dirs={self.data_dir}"]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "BrokerProcess":
        """Starts the process without waiting for it. A forked broker dies with the fork server
        (with this test process); a new interpreter dies when the thread that made it ends."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **self.env)
        if self.forkable():
            self.proc = ForkedProcess(ForkServer.get(), self.command()[3:], str(self.log_path), env=env, cwd=str(REPO))
            return self
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), cwd=str(REPO), env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)
        log.close()
        return self

    def forkable(self) -> bool:
        """Whether a broker forked from the fork server is what a new interpreter would be."""
        return (default_spawn() == "fork-server" and not self.env and "KAFKAFAST_PURE" not in os.environ
                and resource.getrlimit(resource.RLIMIT_NOFILE) == FORK_SERVER_NOFILE)

    def wait_ready(self, timeout: float = 30.0) -> "BrokerProcess":
        """Returns once the launched broker answers ApiVersions."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if api_versions_ok(self.port, 0.5):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not answer within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (graceful); returns the exit code."""
        return stop_gracefully(self.proc, timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group (supervisor and workers)."""
        kill_group(self.proc)

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()
