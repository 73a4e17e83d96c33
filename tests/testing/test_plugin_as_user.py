"""The pytest plugin as an installed package gives it: user test files run by a separate
pytest in an empty directory (no conftest, no `-p`), finding the fixtures only through
the `pytest11` entry point declared in this tree's setup.py."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import missing_tool

REPO = Path(__file__).resolve().parents[2]
USER_FILES = Path(__file__).with_name("as_a_user")


@pytest.fixture(scope="module")
def installed_metadata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree's package metadata (entry points included), as `pip install` writes it."""
    base = tmp_path_factory.mktemp("egg-base")
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(base)], cwd=REPO, check=True,
                   env=dict(os.environ, KAFKAFAST_PURE="1"), stdout=subprocess.DEVNULL, timeout=120)
    entry_points = (base / "kafkafast.egg-info" / "entry_points.txt").read_text()
    assert "[pytest11]\nkafkafast = kafkafast.testing.pytest_plugin" in entry_points
    return base


def run_as_user(source: str, metadata: Path, tmp_path: Path, *helpers: str) -> str:
    workdir = tmp_path / "user-project"
    workdir.mkdir(parents=True)
    shutil.copy(USER_FILES / source, workdir / f"test_{source}")
    for name in helpers:  # modules the test file imports
        shutil.copy(USER_FILES / name, workdir / name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(metadata), str(REPO)]))
    env.pop("PYTEST_ADDOPTS", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                             "ignore::DeprecationWarning", f"test_{source}"], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def test_fixtures_context_managers_clock_and_profile_as_a_user(installed_metadata, tmp_path):
    out = run_as_user("fixtures_and_clock.py", installed_metadata, tmp_path)
    assert re.search(r"\b11 passed\b", out), out[-3000:]


def test_fork_server_starts_before_collection_and_is_ended_when_no_test_needs_it(installed_metadata, tmp_path):
    out = run_as_user("fork_server_ahead.py", installed_metadata, tmp_path / "with", "fork_servers.py")
    assert re.search(r"\b1 passed\b", out), out[-3000:]
    out = run_as_user("no_broker_session.py", installed_metadata, tmp_path / "without", "fork_servers.py")
    assert re.search(r"\b1 passed\b", out), out[-3000:]


def test_every_fault_seen_by_real_clients_as_a_user(installed_metadata, tmp_path):
    out = run_as_user("faults_with_clients.py", installed_metadata, tmp_path)
    assert re.search(r"\b11 passed\b", out), out[-3000:]


def test_kafka_cluster_fixture_with_real_clients_as_a_user(installed_metadata, tmp_path):
    from kafkafast.cluster.local import zookeeper_available

    if not zookeeper_available():  # pragma: no cover - run.sh test installs them
        missing_tool("zookeeper")
    out = run_as_user("cluster_with_clients.py", installed_metadata, tmp_path)
    assert re.search(r"\b3 passed\b", out), out[-3000:]
