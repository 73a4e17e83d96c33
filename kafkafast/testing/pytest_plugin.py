"""The pytest plugin (entry point `pytest11`: `kafkafast`), loaded by installing kafkafast.

Fixtures:

* `kafka_broker`: a fresh broker per test, data in the test's tmp_path, stopped after it.
  Options come from the marker `@pytest.mark.kafka_broker(workers=2, as_kafka="2.4",
  manual_clock=True, settings={...})` or from indirect parametrization
  (`@pytest.mark.parametrize("kafka_broker", [{"as_kafka": "2.4"}], indirect=True)`).
* `kafka_broker_session`: one broker for the whole session (default options); the fault
  rules a test leaves on it are cleared when that test ends.

* `kafka_cluster`: n brokers (default 3) in ZooKeeper cluster mode and Debian's ZooKeeper,
  per test (`KafkaTestCluster`: `.bootstrap_servers`, `.kill(id)`, `.start(id)`,
  `.leader(topic, partition)`, `.create_topic(...)`, `.stop()`). Options from
  `@pytest.mark.kafka_cluster(brokers=3, settings={...})` or indirect parametrization. The
  test is skipped, saying why, when ZooKeeper or java is not installed.
"""
from __future__ import annotations

import threading
from typing import Any, Iterator

import pytest

from kafkafast.testing.broker_process import ForkServer, KafkaTestBroker, default_spawn
from kafkafast.testing.cluster import KafkaTestCluster, ZooKeeperUnavailable


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kafka_broker(**options): options of the kafka_broker fixture "
                                       "(workers, as_kafka, manual_clock, settings)")
    config.addinivalue_line("markers", "kafka_cluster(**options): options of the kafka_cluster fixture "
                                       "(brokers, settings)")
    # The broker fork server starts now, so that its import (most of the first broker's start)
    # runs while pytest starts up and collects; once collection shows whether a test uses a
    # broker, it is taken over in the background or ended.
    if default_spawn() == "fork-server" and not config.option.collectonly:
        ForkServer.start_ahead()


def pytest_collection_finish(session: pytest.Session) -> None:
    if default_spawn() != "fork-server":
        return
    if any({"kafka_broker", "kafka_broker_session", "kafka_cluster"} & set(getattr(item, "fixturenames", ()))
           for item in session.items):
        threading.Thread(target=ForkServer.get, name="kafkafast-fork-server", daemon=True).start()
    else:
        ForkServer.discard()


def _options(request: pytest.FixtureRequest, marker_name: str = "kafka_broker") -> dict[str, Any]:
    options: dict[str, Any] = {}
    marker = request.node.get_closest_marker(marker_name)
    if marker is not None:
        options.update(marker.kwargs)
    options.update(getattr(request, "param", None) or {})
    return options


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[KafkaTestBroker]:
    broker = KafkaTestBroker(tmp_path / "kafka", **_options(request))
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def _kafka_session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    broker = KafkaTestBroker(tmp_path_factory.mktemp("kafka-session"))
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture
def kafka_broker_session(_kafka_session_broker: KafkaTestBroker) -> Iterator[KafkaTestBroker]:
    yield _kafka_session_broker
    _kafka_session_broker.faults.clear()  # the next test starts without this one's faults


@pytest.fixture
def kafka_cluster(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    try:
        cluster = KafkaTestCluster(tmp_path / "kafka-cluster", **_options(request, "kafka_cluster"))
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
