"""Shared fixtures: real brokers started as child processes on free ports."""
from __future__ import annotations

import os
import sys

import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.targets import MODES, Target
from tests.support.tools import CI, HOW_TO_GET
from tests.support.zookeeper_process import zookeeper_available


@pytest.fixture
def broker_factory(tmp_path):
    """Call with keyword settings (Kafka property names) to start a broker; all are stopped at the end."""
    started: list[BrokerProcess] = []

    def make(name: str = "data", *, workers: int = 0, settings: dict | None = None, **kw) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, workers=workers, settings=settings, **kw)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    """One single-process broker with a fresh data directory."""
    return broker_factory()


@pytest.fixture
def bootstrap(request) -> str:
    """The `broker` fixture's address, for client tests; KAFKAFAST_CLIENT_TEST_BOOTSTRAP
    points them at another broker instead."""
    other = os.environ.get("KAFKAFAST_CLIENT_TEST_BOOTSTRAP")
    if other:
        return other
    return request.getfixturevalue("broker").bootstrap


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("module-broker") / "data").start()
    yield b
    b.kill()


def pytest_configure(config):
    config.addinivalue_line("markers", "in_cluster_only(**params): of a test taking the `kafka` fixture, run "
                            "against the cluster only the parametrisations whose values are listed "
                            "(e.g. codec=['none', 'lz4']); the single node runs all")


def pytest_sessionfinish(session, exitstatus):
    """Stops the Spark tests' shared SparkSession (tests/integration/spark_fixtures.py), if one ran."""
    spark_fixtures = sys.modules.get("tests.integration.spark_fixtures")
    if spark_fixtures is not None:
        spark_fixtures.stop_shared_spark_session()


def pytest_collection_modifyitems(config, items):
    """Deselects the `in_cluster_only` parametrisations left out on the cluster."""
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("in_cluster_only")
        params = getattr(getattr(item, "callspec", None), "params", {})
        if marker is not None and params.get("kafka") == "cluster" and any(
                params.get(name) not in values for name, values in marker.kwargs.items()):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    """Broker settings a test module's `kafka` targets take besides tests/support/targets.py's
    (a module overrides this fixture)."""
    return {}


@pytest.fixture(scope="module")
def kafka_listeners() -> tuple[str, ...]:
    """Listeners (names, e.g. SASL_PLAINTEXT) a test module's `kafka` brokers have besides
    PLAINTEXT, on free ports: `kafka.listener_port(name)` (a module overrides this fixture)."""
    return ()


@pytest.fixture(scope="module", params=MODES)
def kafka(request, tmp_path_factory, kafka_settings, kafka_listeners) -> Target:
    """For feature tests whose behaviour is the same on a single node and in a cluster (issue 24):
    each such test runs against a single node and against a 3-broker ZooKeeper cluster (topics
    with replication factor 3), one of each per module (tests/support/targets.py)."""
    if request.param == "cluster" and not zookeeper_available() and not CI:  # pragma: no cover
        pytest.skip(HOW_TO_GET["zookeeper"])
    target = Target(request.param, tmp_path_factory.mktemp(f"kafka-{request.param}"), kafka_settings,
                    kafka_listeners)
    try:
        yield target.start()
    finally:
        target.close()


__all__ = ["free_port"]
