"""Cluster-mode fixtures: a real ZooKeeper (Debian's package) and three kafkafast brokers."""
from __future__ import annotations

import pytest

from tests.support.cluster import KafkaCluster
from tests.support.zookeeper_process import zookeeper_available

if not zookeeper_available():  # pragma: no cover - CI installs it (run.sh test)
    pytest.skip("Debian's zookeeper package and java are needed for cluster tests", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three brokers, zookeeper.session.timeout.ms=6000, replica.lag.time.max.ms=4000."""
    c = KafkaCluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(scope="module")
def slow_session_cluster(tmp_path_factory):
    """Three brokers whose ZooKeeper sessions outlive a few seconds of SIGSTOP (30 s), so
    ISR changes come from the leaders (AlterPartition), not from session expiry."""
    c = KafkaCluster(tmp_path_factory.mktemp("cluster-slow"), settings={"zookeeper.session.timeout.ms": "30000",
                                                                       "replica.lag.time.max.ms": "3000"})
    try:
        yield c.start()
    finally:
        c.close()
