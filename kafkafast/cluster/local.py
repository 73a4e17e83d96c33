"""A local three-broker cluster with one command, for development:

    python -m kafkafast.cluster.local [--dir ./cluster-data] [--brokers 3] [--port 9092]

Starts Debian's ZooKeeper server (`ZooKeeperServer`: java with the jars of the
`zookeeper` package, a generated `zoo.cfg`, admin server off) on 127.0.0.1:2181, then
brokers 1..N on 127.0.0.1:9092.. with `zookeeper.connect=...:2181/kafka` and their data in
`<dir>/broker-<id>`. A port that is taken, or in the kernel's ephemeral range (where any
outgoing connection may take it), is passed over for the next one. It prints "ready" and the
bootstrap address once every broker answers Metadata naming all the brokers and a controller,
and stops everything on Ctrl-C; when a broker exits or stays silent (--timeout) it names the
broker and why on stderr, stops the others and exits 1. The test fixtures (tests/support/)
start ZooKeeper with the same class.
"""
from __future__ import annotations

import argparse
import os
import shutil
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
    """One standalone ZooKeeper server on `host`:`port` (127.0.0.1 unless told) with its data
    in `data_dir`."""

    def __init__(self, data_dir: Path, port: int, host: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.host = host
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-zookeeper.log"

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={self.data_dir}\n"
                       f"clientPort={self.port}\nclientPortAddress={self.host}\nmaxClientCnxns=0\n"
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
            if self.serving():
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"zookeeper did not answer within {timeout}s:\n{self.log_tail()}")

    def serving(self) -> bool:
        """Whether the server serves clients: `srvr` names its mode ("Mode: standalone"). `ruok`
        answers imok earlier, while a session it is asked for is still closed unopened (kazoo
        retries; Burrow, for one, gives up)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                s.sendall(b"srvr")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
                return b"Mode:" in answer
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


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux's default when
    /proc does not say): a listener there may find its port taken by any client at any time."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            low, high = (int(v) for v in fh.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def pick_ports(first: int, count: int, avoid: set[int] | None = None) -> list[int]:
    """`count` ports from `first` upward that are free now and outside the ephemeral range."""
    low, high = ephemeral_port_range()
    chosen: list[int] = []
    port = first
    while len(chosen) < count:
        if low <= port <= high:
            port = high + 1
        if port > 65535:
            raise RuntimeError(f"no {count} free ports from {first} outside the ephemeral range {low}-{high}")
        if port not in (avoid or set()) and port_free(port):
            chosen.append(port)
        port += 1
    return chosen


def metadata_brokers(port: int, timeout: float = 2.0) -> tuple[set[int], int]:
    """The broker ids and the controller id a broker's Metadata answer names."""
    # Deferred: the protocol modules take 0.3 s to import, and kafkafast.testing imports this
    # module (ZooKeeperServer, recv_exact) on its way to the first broker start.
    from kafkafast.protocol import api  # deferred: 0.3 s, see above
    from kafkafast.protocol._generated.metadata import MetadataRequest  # deferred: see above

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(api.encode_request(MetadataRequest(topics=[]), 1, 1, "kafkafast-cluster-local"))
        head = recv_exact(s, 4)
        answer = api.decode_response(MetadataRequest.API_KEY, 1, recv_exact(s, int.from_bytes(head, "big")))[1]
    return {b.node_id for b in answer.brokers}, answer.controller_id


def recv_exact(s: socket.socket, n: int) -> bytes:
    """`n` bytes from `s` (ConnectionError, an OSError, if it closes first)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


class StartFailed(Exception):
    """A broker of the local cluster did not start; the message names it and says why."""


def wait_until_ready(brokers: dict[int, tuple[int, subprocess.Popen, Path]], timeout: float) -> None:
    """Returns once every broker answers Metadata naming all the brokers and a controller;
    StartFailed when one exits or stays silent past `timeout`."""
    ids = set(brokers)
    waiting: dict[int, str] = {i: "no answer yet" for i in ids}
    deadline = time.monotonic() + timeout
    while waiting:
        for i in sorted(waiting):
            port, proc, log = brokers[i]
            if proc.poll() is not None:
                raise StartFailed(f"broker {i} (127.0.0.1:{port}) exited with status {proc.returncode}: "
                                  f"{_last_line(log) or 'no output'} (log: {log})")
            try:
                seen, controller = metadata_brokers(port)
            except (OSError, ValueError) as exc:
                waiting[i] = f"no answer on 127.0.0.1:{port} ({exc})"
                continue
            if seen != ids or controller < 0:
                waiting[i] = f"its metadata names brokers {sorted(seen)} and controller {controller}"
                continue
            del waiting[i]
        if not waiting:
            return
        if time.monotonic() > deadline:
            i = min(waiting)
            raise StartFailed(f"broker {i} (127.0.0.1:{brokers[i][0]}) not ready within {timeout:g} s: "
                              f"{waiting[i]} (log: {brokers[i][2]})")
        time.sleep(0.1)


def _arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kafkafast.cluster.local",
                                 description="A local ZooKeeper-mode kafkafast cluster for development: Debian's "
                                             "ZooKeeper and N brokers on 127.0.0.1, until Ctrl-C.")
    ap.add_argument("--dir", default="cluster-data",
                    help="where ZooKeeper's and each broker's data and logs go (default: ./cluster-data)")
    ap.add_argument("--brokers", type=int, default=3, help="how many brokers, ids 1..N (default: 3)")
    ap.add_argument("--port", type=int, default=9092,
                    help="the first broker's port; each broker takes the next free port outside the kernel's "
                         "ephemeral range (default: 9092)")
    ap.add_argument("--zookeeper-port", type=int, default=2181,
                    help="ZooKeeper's client port, or the next free one outside the ephemeral range (default: 2181)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds every broker has to answer before the start fails (default: 60)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    [zk_port] = pick_ports(args.zookeeper_port, 1)
    ports = pick_ports(args.port, args.brokers, avoid={zk_port})
    print(f"starting ZooKeeper on 127.0.0.1:{zk_port}", flush=True)
    try:
        zk = ZooKeeperServer(root / "zookeeper", zk_port).start()
    except RuntimeError as exc:
        print(f"kafkafast.cluster.local: ZooKeeper did not start: {exc}", file=sys.stderr)
        return 1
    brokers: dict[int, tuple[int, subprocess.Popen, Path]] = {}
    try:
        for i, port in enumerate(ports, start=1):
            data = root / f"broker-{i}"
            log_path = root / f"broker-{i}.log"
            print(f"starting broker {i} on 127.0.0.1:{port} (data {data}, log {log_path})", flush=True)
            with open(log_path, "ab") as log:
                brokers[i] = (port, subprocess.Popen(
                    [sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", "0",
                     "--set", f"broker.id={i}", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     "--set", f"log.dirs={data}", "--set", f"zookeeper.connect={zk.connect}/kafka",
                     "--set", f"offsets.topic.replication.factor={min(3, args.brokers)}",
                     "--set", f"default.replication.factor={min(3, args.brokers)}",
                     "--set", f"min.insync.replicas={min(2, args.brokers)}"],
                    stdout=log, stderr=subprocess.STDOUT), log_path)
        try:
            wait_until_ready(brokers, args.timeout)
        except StartFailed as exc:
            print(f"kafkafast.cluster.local: {exc}", file=sys.stderr)
            return 1
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        print(f"ready: ZooKeeper on {zk.connect} (chroot /kafka); brokers: {bootstrap}; logs in {root}. "
              "Ctrl-C stops.", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        for _, proc, _ in brokers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc, _ in brokers.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        zk.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
