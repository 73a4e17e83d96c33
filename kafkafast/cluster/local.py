"""A local three-broker cluster with one command, for development:

    python -m kafkafast.cluster.local [--dir ./cluster-data] [--brokers 3] [--port 9092]

Starts Debian's ZooKeeper server (`ZooKeeperServer`: java with the jars of the
`zookeeper` package, a generated `zoo.cfg`, admin server off) on 127.0.0.1:2181 (or the
next free port), then brokers 1..N on 127.0.0.1:9092.. with `zookeeper.connect=...:2181/kafka`
and their data in `<dir>/broker-<id>`, prints the bootstrap address and stops everything on
Ctrl-C. The test fixtures (tests/support/) start ZooKeeper with the same class.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

JARS = ("zookeeper", "zookeeper-jute", "slf4j-api", "slf4j-simple", "netty-handler", "netty-common",
        "netty-buffer", "netty-transport", "netty-resolver", "netty-codec",
        "netty-transport-native-epoll", "netty-transport-native-unix-common", "commons-io",
        "commons-cli", "metrics-core", "snappy-java")


def zookeeper_available() -> bool:
    """Whether Debian's zookeeper package and a java runtime are installed."""
    import shutil

    return os.path.exists("/usr/share/java/zookeeper.jar") and shutil.which("java") is not None


def zookeeper_classpath() -> str:
    jars = [f"/usr/share/java/{name}.jar" for name in JARS if os.path.exists(f"/usr/share/java/{name}.jar")]
    if not jars:
        raise RuntimeError("Debian's zookeeper package is not installed (/usr/share/java/zookeeper.jar)")
    return ":".join(jars)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class ZooKeeperServer:
    """One standalone ZooKeeper server on 127.0.0.1:`port` with its data in `data_dir`."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={self.data_dir}\n"
                       f"clientPort={self.port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n"
                       "admin.enableServer=false\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n"
                       "4lw.commands.whitelist=ruok,srvr\n")
        return ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false", "-cp", zookeeper_classpath(),
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]

    def start(self, timeout: float = 60.0, **popen: object) -> "ZooKeeperServer":
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         **popen)  # type: ignore[call-overload]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.ruok():
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"zookeeper did not answer within {timeout}s:\n{self.log_tail()}")

    def ruok(self) -> bool:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kafkafast.cluster.local")
    ap.add_argument("--dir", default="cluster-data")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--port", type=int, default=9092, help="first broker's port")
    ap.add_argument("--zookeeper-port", type=int, default=2181)
    args = ap.parse_args(argv)
    root = Path(args.dir).resolve()
    zk_port = args.zookeeper_port
    while not port_free(zk_port):
        zk_port += 1
    zk = ZooKeeperServer(root / "zookeeper", zk_port).start()
    procs = []
    try:
        for i in range(1, args.brokers + 1):
            port = args.port + i - 1
            data = root / f"broker-{i}"
            data.mkdir(parents=True, exist_ok=True)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", "0",
                 "--set", f"broker.id={i}", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                 "--set", f"log.dirs={data}", "--set", f"zookeeper.connect={zk.connect}/kafka",
                 "--set", "offsets.topic.replication.factor=3", "--set", "default.replication.factor=3",
                 "--set", "min.insync.replicas=2"],
                stdout=open(root / f"broker-{i}.log", "ab"), stderr=subprocess.STDOUT))
        bootstrap = ",".join(f"127.0.0.1:{args.port + i}" for i in range(args.brokers))
        print(f"ZooKeeper on {zk.connect} (chroot /kafka); brokers: {bootstrap}; logs in {root}. Ctrl-C stops.",
              flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        zk.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
