"""ZooKeeper and three cluster brokers inside the nemesis namespace (this process runs there):
ZooKeeper on 127.0.0.10:2181, broker i on 127.0.0.1<i>:9092 as uid 20000+i (so that its
outgoing connections leave from its own address, see `netns.py`). The processes are
SIGKILLed, SIGSTOPped and SIGCONTed as whole process groups (a `--workers N` broker's
supervisor and workers together)."""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kafkafast.cluster.local import ZooKeeperServer
from kafkafast.testing.broker_process import die_with_parent, kill_group
from kafkafast.testing.cluster import ZooKeeperView
from tests.nemesis.netns import ZOOKEEPER_ADDRESS, broker_address, broker_uid
from tests.support.cluster import CHROOT, TEST_SETTINGS

REPO = Path(__file__).resolve().parents[2]
BROKER_PORT = 9092
ZOOKEEPER_PORT = 2181


class NamespaceZooKeeper(ZooKeeperServer):
    """Debian's ZooKeeper listening on 127.0.0.10 only (started once `srvr` there names its mode)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, ZOOKEEPER_PORT, host=ZOOKEEPER_ADDRESS)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """ApiVersions v0 answered with a well-formed frame."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            body = struct.pack(">hhih", 18, 0, 1, 7) + b"nemesis"
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(8)
            return len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 1
    except OSError:
        return False


class NamespaceBroker:
    """One cluster broker as its own uid on its own address."""

    def __init__(self, broker_id: int, data_dir: Path, settings: dict[str, str], workers: int) -> None:
        self.id = broker_id
        self.host = broker_address(broker_id)
        self.uid = broker_uid(broker_id)
        self.data_dir = data_dir
        self.settings = settings
        self.workers = workers
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"broker-{broker_id}.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{BROKER_PORT}"

    def start(self, timeout: float = 60.0) -> "NamespaceBroker":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "NamespaceBroker":
        """Starts the process without waiting for it to answer."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chown(self.data_dir, self.uid, self.uid)
        # setpriv: the broker's own uid (its source address, netns.py), keeping the right to read
        # the interpreter and packages wherever they are installed (e.g. under a 0700 /root)
        cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
               "--inh-caps=+dac_override", "--ambient-caps=+dac_override", "--pdeathsig=SIGKILL",
               sys.executable, "-m", "kafkafast.cli.main", "broker", "--workers", str(self.workers),
               "--set", f"listeners=PLAINTEXT://{self.bootstrap}", "--set", f"log.dirs={self.data_dir}"]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        tmp = self.data_dir.parent / f"broker-{self.id}-tmp"  # the supervisor's run dir: removed with the run's
        tmp.mkdir(exist_ok=True)
        env = dict(os.environ, HOME=str(self.data_dir), TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 60.0) -> "NamespaceBroker":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.id} exited with {self.proc.returncode}; see {self.log_path}")
            if api_versions_ok(self.host, BROKER_PORT, 0.5):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker {self.id} did not answer within {timeout}s; see {self.log_path}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        kill_group(self.proc)

    def signal(self, sig: int) -> None:
        if self.running:
            os.killpg(self.proc.pid, sig)  # type: ignore[union-attr]


class NemesisCluster(ZooKeeperView):
    def __init__(self, root: Path, *, workers: int, size: int = 3,
                 settings: dict[str, str] | None = None) -> None:
        self.root = root
        self.zookeeper = NamespaceZooKeeper(root / "zookeeper")
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        zk_connect = self.zookeeper.connect + CHROOT
        self.brokers = {i: NamespaceBroker(i, root / f"broker-{i}",
                                           {"broker.id": str(i), "zookeeper.connect": zk_connect, **self.settings},
                                           workers)
                        for i in range(1, size + 1)}
        self._client: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> "NemesisCluster":
        self.zookeeper.start(preexec_fn=die_with_parent)
        for b in self.brokers.values():  # all at once: each interpreter's start-up is seconds of CPU
            b.launch()
        for b in self.brokers.values():
            b.wait_ready()
        self.wait_for(lambda: len(self.registered()) == len(self.brokers) and self.controller() > 0, 60,
                      "every broker registered and a controller elected")
        self.wait_for(self.metadata_ready, 60, "every broker's Metadata naming the controller and all brokers")
        return self

    def metadata_ready(self) -> bool:
        """Every broker got the controller's UpdateMetadata (until then Metadata answers
        controller -1 and librdkafka's admin client waits for a controller, up to its timeout)."""
        for b in self.brokers.values():
            try:
                md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5)
            except Exception:
                return False
            if md.controller_id < 0 or len(md.brokers) != len(self.brokers):
                return False
        return True

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            except Exception:
                pass
        for b in self.brokers.values():
            b.signal(signal.SIGCONT)
            b.kill()
        self.zookeeper.signal(signal.SIGCONT)
        self.zookeeper.kill()

    def _view_zk(self) -> Any:
        if self._client is None:
            self._client = KazooClient(hosts=self.zookeeper.connect + CHROOT, timeout=10)
            self._client.start(timeout=20)
        return self._client

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: dict[str, str]) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=config)],
                                      operation_timeout=30)
        futures[name].result(60)
        self.wait_for(lambda: all(len(self.isr(name, p)) == replication_factor for p in range(partitions)), 60,
                      f"leaders and full ISRs of {name}")
