"""Cluster-mode fixtures: a real ZooKeeper (Debian's package) and three kafkafast brokers."""
from __future__ import annotations

import pytest

from tests.support.cluster import KafkaCluster
from tests.support.tools import CI, HOW_TO_GET
from tests.support.zookeeper_process import zookeeper_available

if not zookeeper_available() and not CI:  # pragma: no cover - run.sh test installs them
    pytest.skip(HOW_TO_GET["zookeeper"], allow_module_level=True)


def workers_of(request) -> int:
    """Worker processes per broker: 0 (one process) unless a test asks for more with
    `@pytest.mark.parametrize("cluster", [0, 2], indirect=True)` (the same for slow_session_cluster)."""
    return getattr(request, "param", 0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    """Three brokers, zookeeper.session.timeout.ms=6000, replica.lag.time.max.ms=4000; a module's
    `CLUSTER_SETTINGS` (a dict of broker properties) overrides them."""
    workers = workers_of(request)
    c = KafkaCluster(tmp_path_factory.mktemp(f"cluster-w{workers}"), workers=workers,
                     settings=getattr(request.module, "CLUSTER_SETTINGS", None))
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(scope="module")
def slow_session_cluster(tmp_path_factory, request):
    """Three brokers whose ZooKeeper sessions outlive a few seconds of SIGSTOP (30 s), so
    ISR changes come from the leaders (AlterPartition), not from session expiry."""
    workers = workers_of(request)
    c = KafkaCluster(tmp_path_factory.mktemp(f"cluster-slow-w{workers}"), workers=workers,
                     settings={"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "3000"})
    try:
        yield c.start()
    finally:
        c.close()
