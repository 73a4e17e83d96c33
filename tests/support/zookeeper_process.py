"""Debian's real ZooKeeper server for tests, on a free 127.0.0.1 port with its own data dir
(`kafkafast.cluster.local.ZooKeeperServer`: java with the package's jars, admin server
off), killed with its process group at the end and when the test process dies."""
from __future__ import annotations

from pathlib import Path

from kafkafast.cluster.local import ZooKeeperServer, zookeeper_available  # noqa: F401 (re-exported)
from tests.support.broker_process import die_with_parent, free_port


class ZooKeeperProcess(ZooKeeperServer):
    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        super().__init__(data_dir, port or free_port())

    def start(self, timeout: float = 60.0, **popen: object) -> "ZooKeeperProcess":
        super().start(timeout, preexec_fn=die_with_parent)
        return self
