"""A real kafkafast broker for one test: a child process on a free 127.0.0.1 port.

The broker is the ordinary `kafkafast broker` command (single process by default,
`workers=N` pre-forks N workers), with its data and its control directory under one
directory of the test's. Start-up returns once the broker has answered a Metadata
request. The child dies with the process that started it (PR_SET_PDEATHSIG), so a test
run killed by a timeout leaves no broker behind.

Why a child process and not a thread of the test process: the broker is then exactly
what runs in production (its own event loop, signals, fork for workers), a crash or a
kill of it cannot take the test process down, and restart/kill are real.

How the child is made (`spawn`): "fork-server" (the default) forks it from a fork server
that has imported the broker once per test session (`fork_server.py`); "exec" starts a
new interpreter running `python -m kafkafast.cli.main broker ...` each time, paying the
broker's import (about half a second) on every start. `KAFKAFAST_TESTING_SPAWN=exec`
switches the default. perf/testing_startup.py measures both.
"""
from __future__ import annotations

import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkafast import clock
import kafkafast
from kafkafast.broker.kafka_releases import release_versions
from kafkafast.cluster.local import recv_exact as _recv
from kafkafast.testing.control import CLOCK, PROPERTY
from kafkafast.testing.scripting import Faults, ManualClock

# Defaults that make a test broker quick to use; a test's `settings` override them.
TEST_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",  # as the Kafka images used for tests set it
    "offsets.topic.num.partitions": "4",
    "num.partitions": "1",
}


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record as the broker's log holds it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


_given_ports: set[int] = set()  # the ports free_port() handed out in this process


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            lo, hi = (int(x) for x in fh.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server started a little later. Taken below the
    kernel's ephemeral range where there is room: a port chosen inside it can be given to an
    outgoing connection (another broker's, ZooKeeper's, a client's) before the server binds
    it ("Address already in use" at a cluster broker's start). Never the same port twice in
    one process."""
    lo, _ = _ephemeral_range()
    low_end = 10000
    if lo - low_end >= 2000:
        rng = random.Random()
        for _ in range(200):
            port = rng.randrange(low_end, lo)
            if port in _given_ports:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _given_ports.add(port)
            return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given_ports:
            _given_ports.add(port)
            return port


def default_spawn() -> str:
    return os.environ.get("KAFKAFAST_TESTING_SPAWN") or "fork-server"


def _pythonpath() -> dict[str, str]:
    """The environment for a broker: this kafkafast importable first, whatever the cwd."""
    here = str(Path(kafkafast.__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=here + (os.pathsep + rest if rest else ""))


class ForkServer:
    """The client of one `fork_server.py` process (one per test process, started on first use
    or ahead of it by the pytest plugin; see that module for the protocol)."""

    _instance: "ForkServer | None" = None
    _instance_lock = threading.Lock()
    _ahead: "subprocess.Popen | None" = None  # started by start_ahead, not yet taken by get

    def __init__(self, proc: "subprocess.Popen | None" = None) -> None:
        self.lock = threading.Lock()
        self.proc = proc or self._spawn()
        # This process's side of a broker start, imported while the fork server imports the
        # broker: the protocol codecs the readiness check (Metadata) and create_topic use take
        # 0.3 s to import, which the first start would otherwise add to the fork server's.
        from kafkafast.protocol import api  # noqa: F401  (warmed now, see above)
        from kafkafast.protocol._generated import create_topics, metadata  # noqa: F401  (as above)

        hello = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not hello:
            raise RuntimeError("the test broker fork server did not start")

    @staticmethod
    def _spawn() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "kafkafast.testing.fork_server"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=_pythonpath())

    @classmethod
    def start_ahead(cls) -> None:
        """Starts the fork server process now, before a test asks for a broker (its import is
        most of a first broker's start); `get` takes it over, `discard` ends it."""
        with cls._instance_lock:
            if cls._instance is None and cls._ahead is None:
                cls._ahead = cls._spawn()

    @classmethod
    def discard(cls) -> None:
        """Ends the fork server started ahead when the session turns out not to need it."""
        with cls._instance_lock:
            proc, cls._ahead = cls._ahead, None
        if proc is not None:
            proc.kill()
            proc.wait(10)

    @classmethod
    def get(cls) -> "ForkServer":
        with cls._instance_lock:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                proc, cls._ahead = cls._ahead, None
                cls._instance = ForkServer(proc if proc is not None and proc.poll() is None else None)
            return cls._instance

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.proc.stdin.write(json.dumps(command) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("the test broker fork server exited")
        return json.loads(line)


class ForkedProcess:
    """A broker (or another command line) forked by the fork server, with the parts of
    Popen's interface we use; `options`: the spawn command's optional keys (fork_server.py)."""

    def __init__(self, server: ForkServer, argv: list[str], log_path: str, **options: Any) -> None:
        self.server = server
        self.pid: int = server.call({"spawn": argv, "log": log_path, **options})["pid"]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0, raise_timeout=False)

    def wait(self, timeout: float | None = None, *, raise_timeout: bool = True) -> int | None:
        if self.returncode is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            while self.returncode is None:
                step = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
                self.returncode = self.server.call({"wait": self.pid, "timeout": step})["code"]
                if deadline is not None and time.monotonic() >= deadline:
                    break
            if self.returncode is None and raise_timeout:
                raise subprocess.TimeoutExpired(["kafkafast", "broker"], timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def _die_with_parent_thread() -> Any:
    """PR_SET_PDEATHSIG fires when the starting *thread* ends: only from the main thread."""
    return die_with_parent if threading.current_thread() is threading.main_thread() else None


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies."""
    import ctypes  # deferred: loads libc, only in a broker's child

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class KafkaTestBroker:
    """One broker under test. `start()`/`stop()`/`restart()`/`kill()`; `bootstrap_servers`;
    `create_topic`, `records` (the log's contents, read from the segment files), `faults`,
    `clock` (a ManualClock when started with manual_clock=True, else None)."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, root: str | os.PathLike, *, workers: int = 0, as_kafka: str | None = None,
                 manual_clock: bool = False, settings: dict[str, Any] | None = None,
                 port: int | None = None, start_timeout: float = 30.0, spawn: str | None = None) -> None:
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.control_dir = self.root / "control"
        self.log_path = self.root / "broker.log"
        self.workers = workers
        if as_kafka is not None:
            release_versions(as_kafka)  # ValueError for a release we have no table for
        self.as_kafka = as_kafka
        self.settings = {**TEST_SETTINGS, **{k: str(v) for k, v in (settings or {}).items()}}
        self.port = port or free_port()
        self._port_chosen = port is None  # ours to change if another process takes it first
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | ForkedProcess | None = None
        self.faults = Faults(str(self.control_dir), workers=workers)
        self.clock: ManualClock | None = ManualClock(str(self.control_dir / CLOCK)) if manual_clock else None
        self.startup_seconds: float | None = None
        self.spawn = spawn or default_spawn()
        if self.spawn not in ("fork-server", "exec"):
            raise ValueError(f"spawn must be 'fork-server' or 'exec', not {self.spawn!r}")

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", str(self.workers),
               "--set", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--set", f"log.dirs={self.data_dir}", "--set", f"{PROPERTY}={self.control_dir}"]
        if self.as_kafka:
            cmd += ["--as-kafka", self.as_kafka]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "KafkaTestBroker":
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.control_dir.mkdir(parents=True, exist_ok=True)
        if self.clock is not None and not os.path.exists(self.clock.path):
            clock.write_manual_clock(self.clock.path, int(time.time() * 1000))
        t0 = time.monotonic()
        for attempt in range(3):
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._spawn()
            deadline = t0 + self.start_timeout
            while not self._answers_metadata():
                if self.proc.poll() is not None:  # type: ignore[union-attr]
                    break
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"broker did not answer within {self.start_timeout}s:\n{self.log_tail()}")
                time.sleep(0.005)
            else:
                self.startup_seconds = time.monotonic() - t0
                return self
            with open(self.log_path, "rb") as fh:
                fh.seek(log_start)
                logged = fh.read()
                # the OS's words, or the broker's when the holder is another kafkafast broker
                port_taken = b"Address already in use" in logged or b"cannot listen on" in logged
            if not (port_taken and self._port_chosen and attempt < 2):
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")  # type: ignore[union-attr]
            self.port = free_port()  # another process took the free port first
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        if self.spawn == "fork-server":
            self.proc = ForkedProcess(ForkServer.get(), self.command()[3:], str(self.log_path))
        else:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True,
                                             preexec_fn=_die_with_parent_thread(), env=_pythonpath())

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """Graceful stop (SIGTERM: requests finish, logs are flushed); the exit code."""
        return stop_gracefully(self.proc, timeout)

    def kill(self) -> None:
        """SIGKILL the broker and its workers (an unclean stop: the next start recovers)."""
        kill_group(self.proc)

    def restart(self, *, clean: bool = True) -> "KafkaTestBroker":
        """Stop (gracefully, or with SIGKILL when clean=False) and start again on the same
        port and data."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def __enter__(self) -> "KafkaTestBroker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- requests ---------------------------------------------------------------------------
    def _request(self, request: Any, version: int, timeout: float = 10.0) -> Any:
        from kafkafast.protocol import api  # deferred: 0.3 s to import

        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(api.encode_request(request, version, 1, "kafkafast-testing"))
            size = int.from_bytes(_recv(s, 4), "big")
            return api.decode_response(request.API_KEY, version, _recv(s, size))[1]

    def _answers_metadata(self) -> bool:
        """Whether *this* broker answers Metadata on our port: the cluster id it answers
        with is the one it wrote into our data directory (not some other process's)."""
        from kafkafast.config import parse_properties  # deferred: kafkafast.testing starts light
        from kafkafast.protocol._generated.metadata import MetadataRequest  # deferred: 0.3 s to import

        try:
            with open(self.data_dir / "meta.properties", encoding="utf-8") as fh:
                ours = parse_properties(fh.read()).get("cluster.id")
            return ours is not None and self._request(MetadataRequest(topics=[]), 2, timeout=2.0).cluster_id == ours
        except (OSError, ValueError):
            return False

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, Any] | None = None) -> None:
        """Creates a topic (CreateTopics, as an admin client would); raises the Kafka error."""
        from kafkafast.protocol._generated.create_topics import CreateTopicsRequest  # deferred: 0.3 s to import
        from kafkafast.protocol.errors import raise_for_code  # deferred: kafkafast.testing starts light

        T = CreateTopicsRequest.CreatableTopic
        C = CreateTopicsRequest.CreatableTopicConfig
        topic = T(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
                  configs=[C(name=k, value=str(v)) for k, v in (config or {}).items()])
        response = self._request(CreateTopicsRequest(topics=[topic], timeout_ms=10000), 2)
        result = response.topics[0]
        if result.error_code:
            raise_for_code(result.error_code, result.error_message)

    def records(self, topic: str, partition: int | None = None) -> list[LogRecord]:
        """Every record the log holds for the topic (or one partition), read from the
        segment files (complete batches only; control records left out), ordered by
        partition, then offset."""
        from kafkafast.records import iter_record_batches, scan_valid_prefix  # deferred: kafkafast.testing starts light
        from kafkafast.storage.log_manager import parse_partition_dir  # deferred: kafkafast.testing starts light
        from kafkafast.storage.segment import LOG_SUFFIX, parse_segment_name  # deferred: kafkafast.testing starts light

        out: list[LogRecord] = []
        if not self.data_dir.is_dir():
            return out
        dirs = sorted((key[1], entry) for entry in os.scandir(self.data_dir)
                      if entry.is_dir() and (key := parse_partition_dir(entry.name)) is not None
                      and key[0] == topic and partition in (None, key[1]))
        for index, entry in dirs:
            segments = sorted((base, name) for name in os.listdir(entry.path)
                              if (base := parse_segment_name(name, LOG_SUFFIX)) is not None)
            for _, name in segments:
                with open(os.path.join(entry.path, name), "rb") as fh:
                    data = fh.read()
                valid, _ = scan_valid_prefix(data)  # whole, valid batches: the tail may be a write in progress
                for header, batch in iter_record_batches(memoryview(data)[:valid]):
                    if getattr(header, "is_control", False):
                        continue
                    out.extend(LogRecord(topic, index, r.offset, r.timestamp, r.key, r.value, list(r.headers))
                               for r in batch)
        return out

    def segment_files(self, topic: str, partition: int = 0) -> list[str]:
        """The partition's segment file names (`.log`), oldest first."""
        from kafkafast.storage.segment import LOG_SUFFIX, parse_segment_name  # deferred: kafkafast.testing starts light

        path = self.data_dir / f"{topic}-{partition}"
        if not path.is_dir():
            return []
        bases = {n: parse_segment_name(n, LOG_SUFFIX) for n in os.listdir(path)}
        return sorted((n for n, base in bases.items() if base is not None), key=lambda n: bases[n] or 0)

    def worker_pids(self) -> list[int]:
        """Pids of the broker's worker processes (empty for a single-process broker)."""
        if self.proc is None:
            return []
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as fh:
                return [int(p) for p in fh.read().split()]
        except OSError:
            return []

    def kill_worker(self, worker: int = 0, timeout: float = 30.0) -> None:
        """Worker `worker` SIGKILLs itself; returns once the supervisor has replaced it
        and the broker answers again."""
        before = set(self.worker_pids())
        self.faults.kill_worker(worker, timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            now = set(self.worker_pids())
            if len(now) == self.workers and now != before and self._answers_metadata():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {worker} was not replaced within {timeout}s")
            time.sleep(0.01)


def stop_gracefully(proc: Any, timeout: float = 15.0) -> int | None:
    """SIGTERM to a broker process; its exit code (SIGKILL to its group after `timeout`)."""
    if proc is None:
        return None
    if proc.poll() is not None:
        remove_run_folders(proc.pid)  # it died on its own (a fault, a crash): nothing removed them
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return None
    remove_run_folders(proc.pid)
    return code


def kill_group(proc: Any) -> None:
    """SIGKILL a broker's whole process group (supervisor and workers), then remove the run
    folders it can no longer remove itself."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
    remove_run_folders(proc.pid)


def remove_run_folders(pid: int) -> None:
    """Removes what broker process `pid` keeps in the temporary directory while it runs and
    removes on a clean stop: the supervisor's run folder (`kafkafast-<pid>-*`: worker sockets,
    the shared partition table) and the metrics folder (`kafkafast-metrics-<pid>-*`). Called once
    the process is gone (reaped), so the folders are no longer in use."""
    for pattern in (f"kafkafast-{pid}-*", f"kafkafast-metrics-{pid}-*"):
        for path in glob.glob(os.path.join(tempfile.gettempdir(), pattern)):
            shutil.rmtree(path, ignore_errors=True)
