"""Shared fixtures: real brokers started as child processes on free ports."""
from __future__ import annotations

import os

import pytest

from tests.support.broker_process import BrokerProcess, free_port


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


__all__ = ["free_port"]
