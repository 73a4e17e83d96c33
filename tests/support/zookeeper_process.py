"""Starts Debian's real ZooKeeper server (the `zookeeper` package) for tests.

Runs `org.apache.zookeeper.server.ZooKeeperServerMain` with java directly, on a free
127.0.0.1 port with its own data directory and a generated `zoo.cfg` (admin server off,
`ruok` allowed), waits until it answers `ruok` with `imok`, and is stopped with SIGKILL
(its process group) at the end.
"""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.broker_process import _die_with_parent, free_port

JARS = ("zookeeper", "zookeeper-jute", "slf4j-api", "slf4j-simple", "netty-handler", "netty-common",
        "netty-buffer", "netty-transport", "netty-resolver", "netty-codec",
        "netty-transport-native-epoll", "netty-transport-native-unix-common", "commons-io",
        "commons-cli", "metrics-core", "snappy-java")


def classpath() -> str:
    out = []
    for name in JARS:
        path = f"/usr/share/java/{name}.jar"
        if os.path.exists(path):
            out.append(path)
    if not out:
        raise RuntimeError("Debian's zookeeper package is not installed (/usr/share/java/zookeeper.jar)")
    return ":".join(out)


def zookeeper_available() -> bool:
    return os.path.exists("/usr/share/java/zookeeper.jar") and bool(glob.glob("/usr/bin/java*"))


class ZooKeeperProcess:
    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "ZooKeeperProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={self.data_dir}\n"
                       f"clientPort={self.port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n"
                       "admin.enableServer=false\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n"
                       "4lw.commands.whitelist=ruok,srvr\n")
        cmd = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               "-Dzookeeper.admin.enableServer=false", "-cp", classpath(),
               "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._ruok():
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"zookeeper did not answer within {timeout}s:\n{self.log_tail()}")

    def _ruok(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
