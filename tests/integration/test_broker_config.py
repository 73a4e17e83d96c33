"""Broker configuration is checked at start as Kafka's ConfigDef checks it: a value that is
not of its type, out of range or not one of its choices, an unusable log dir, a metrics
port in use and an unreachable ZooKeeper each stop the broker with one line on stderr,
`kafkafast: cannot start: ...` naming key, value and reason, and exit status 1, with no
traceback. An unknown key is logged at WARN once. Every broker here is the real one, the
`kafkafast broker` command: forked from the test session's fork server (tests/support/cli.py)
when it must not start, started as `python3 -m kafkafast.cli.main broker` when it must."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafast.config import BrokerConfig, parse_properties
from tests.support.broker_process import REPO, api_versions_ok, free_port
from tests.support.cli import kafkafast

BROKER = [sys.executable, "-m", "kafkafast.cli.main", "broker"]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
START_TIMEOUT = 30.0


def run_broker(tmp_path: Path, *settings: str, workers: int = 0, config: Path | None = None,
               prefix: list[str] | None = None, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess:
    """A broker that must not start: its exit status and output (a start counts as a failure)."""
    args = ["broker", "--workers", str(workers), "--set", f"log.dirs={tmp_path / 'data'}",
            "--set", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"]
    if config is not None:
        args += ["-c", str(config)]
    for s in settings:
        args += ["--set", s]
    try:
        if prefix:  # a command around the broker's interpreter
            return subprocess.run(prefix + BROKER[:3] + args, cwd=str(REPO), env=ENV, capture_output=True, text=True,
                                  timeout=timeout)
        return kafkafast(*args, check=False, timeout=timeout)  # forked from the fork server (tests/support/cli.py)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the broker did not stop within {timeout} s with {settings}")


def assert_cannot_start(res: subprocess.CompletedProcess, *expected: str) -> str:
    """Exit status 1 and one `kafkafast: cannot start:` line holding every `expected` text."""
    assert res.returncode == 1, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("kafkafast: cannot start:")]
    assert len(lines) == 1, res.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert "Task was destroyed" not in res.stderr
    return lines[0]


class RunningBroker:
    """A broker that must start: serves ApiVersions, then stops on SIGTERM with status 0."""

    def __init__(self, cmd: list[str], port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(cmd, cwd=str(REPO), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)

    def wait_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not api_versions_ok(self.port, 0.5):
            if self.proc.poll() is not None:
                pytest.fail(f"the broker exited with {self.proc.returncode}: {self.proc.stderr.read()}")
            assert time.monotonic() < deadline, "the broker did not serve in time"
            time.sleep(0.05)

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            _, err = self.proc.communicate()
            pytest.fail(f"the broker did not stop: {err}")
        return self.proc.returncode, err


@pytest.mark.parametrize("workers", [0, 2])
def test_value_not_of_its_type_stops_the_start_naming_key_value_and_reason(tmp_path, workers):
    res = run_broker(tmp_path, "log.retention.ms=banana", workers=workers)
    line = assert_cannot_start(res)
    assert line == "kafkafast: cannot start: Invalid value banana for configuration log.retention.ms: " \
                   "Not a number of type LONG"


@pytest.mark.parametrize("setting,reason", [
    ("auto.create.topics.enable=maybe", "Expected value to be either true or false"),
    ("delete.topic.enable=yes", "Expected value to be either true or false"),
    ("num.partitions=99999999999", "Not a number of type INT"),
    ("log.segment.bytes=10", "Value must be at least 14"),
    ("log.cleaner.min.cleanable.ratio=1.5", "Value must be no more than 1"),
    ("compression.type=zip", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("log.cleanup.policy=compact,shred", "String must be one of: compact, delete"),
    ("log.message.timestamp.type=BrokerTime", "String must be one of: CreateTime, LogAppendTime"),
    ("ssl.client.auth=sometimes", "String must be one of: required, requested, none"),
    ("group.coordinator.rebalance.protocols=classic,share", "String must be one of: classic, consumer"),
    ("num.io.threads=0", "Value must be at least 1"),
    ("replica.selector.class=com.example.NearestSelector",
     "String must be one of: org.apache.kafka.common.replica.RackAwareReplicaSelector"),
])
def test_booleans_numbers_enums_and_lists_are_checked_at_start(tmp_path, setting, reason):
    key, value = setting.split("=", 1)
    assert_cannot_start(run_broker(tmp_path, setting), f"Invalid value {value} for configuration {key}: {reason}")


def test_log_dir_that_is_a_file_stops_the_start(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    res = run_broker(tmp_path, f"log.dirs={not_a_dir}", workers=2)
    assert_cannot_start(res, f"Invalid value {not_a_dir} for configuration log.dirs:", "Not a directory")


def test_read_only_log_dir_stops_the_start(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:  # root writes through file modes: a read-only bind mount, in a private mount namespace
        if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
            pytest.skip("needs unshare -m (util-linux) to mount a read-only directory as root")
        mount = f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro} {ro} && exec \"$0\" \"$@\""
        prefix = ["unshare", "-m", "sh", "-c", mount]
        reason = "Read-only file system"
    else:
        ro.chmod(0o555)
        prefix, reason = [], "Permission denied"
    res = run_broker(tmp_path, f"log.dirs={ro / 'data'}", prefix=prefix)
    assert_cannot_start(res, f"Invalid value {ro / 'data'} for configuration log.dirs:", reason)


def test_metrics_port_in_use_stops_the_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_broker(tmp_path, f"metrics.port={port}", "metrics.host=127.0.0.1", workers=2)
    assert_cannot_start(res, f"Invalid value {port} for configuration metrics.port:", "Address already in use")


@pytest.mark.parametrize("workers", [0, 2])
def test_unreachable_zookeeper_stops_the_start_within_the_connection_timeout(tmp_path, workers):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        zk = f"127.0.0.1:{closed.getsockname()[1]}"
    started = time.monotonic()
    res = run_broker(tmp_path, f"zookeeper.connect={zk}", "zookeeper.connection.timeout.ms=3000", workers=workers)
    elapsed = time.monotonic() - started
    assert_cannot_start(res, f"Invalid value {zk} for configuration zookeeper.connect:",
                        "zookeeper.connection.timeout.ms")
    assert elapsed < 3.0 + 10.0  # the timeout, plus the interpreter's start on a loaded machine


def test_properties_file_is_read_with_java_rules(tmp_path):
    """White space as the separator, a continued line and a \\u escape: the value the broker
    refuses is the one java.util.Properties reads (`banana`)."""
    config = tmp_path / "server.properties"
    config.write_text("# a comment\n! another\nlog.retention.ms   ba\\\n    n\\u0061na\n", encoding="utf-8")
    res = run_broker(tmp_path, config=config)
    assert_cannot_start(res, "Invalid value banana for configuration log.retention.ms: Not a number of type LONG")


def test_unknown_key_is_logged_once_at_warn_and_used_keys_never(tmp_path):
    port, metrics = free_port(), free_port()
    cmd = BROKER + ["--workers", "2", "--set", f"log.dirs={tmp_path / 'data'}",
                    "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--set", "log.retension.ms=1000",
                    "--set", f"metrics.port={metrics}", "--set", "metrics.host=127.0.0.1",
                    "--set", "num.network.threads=3"]
    broker = RunningBroker(cmd, port)
    broker.wait_serving()
    code, err = broker.stop()
    assert code == 0, err
    warnings = [x for x in err.splitlines() if "isn't a known config" in x]
    assert len(warnings) == 1, err
    assert " WARNING " in warnings[0]
    assert warnings[0].endswith("The configuration 'log.retension.ms' was supplied but isn't a known config.")
    assert "metrics.port" not in "\n".join(x for x in err.splitlines() if "known" in x or "not used" in x)
    assert "num.network.threads" not in err


def test_help_configs_prints_every_known_config_with_type_and_default():
    res = subprocess.run(BROKER + ["--help-configs"], cwd=str(REPO), env=ENV, capture_output=True, text=True,
                         timeout=START_TIMEOUT)
    assert res.returncode == 0, res.stderr
    entry = re.search(r"^log\.retention\.ms\n    (.+)\n    Type: long  Default: null$", res.stdout, re.M)
    assert entry is not None and "forever" in entry.group(1)
    assert re.search(r"^auto\.create\.topics\.enable\n.*\n    Type: boolean  Default: true$", res.stdout, re.M)
    assert re.search(r"^metrics\.port\n", res.stdout, re.M)


# -- the properties in README.md and deploy/ --------------------------------------------

def readme_blocks() -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```properties\n(.*?)^```", text, re.M | re.S)
    return [(f"README.md properties block {i + 1}", b) for i, b in enumerate(blocks)]


def deploy_files() -> list[tuple[str, str]]:
    return [(str(p.relative_to(REPO)), p.read_text(encoding="utf-8"))
            for p in sorted((REPO / "deploy").rglob("*.properties"))]


PROPERTIES = readme_blocks() + deploy_files()


def test_readme_and_deploy_hold_properties():
    names = [n for n, _ in PROPERTIES]
    assert len(readme_blocks()) >= 2 and "deploy/server.properties" in names, names


@pytest.mark.parametrize("name,text", PROPERTIES, ids=[n for n, _ in PROPERTIES])
def test_every_properties_example_parses_and_validates(name, text):
    props = parse_properties(text)
    assert props, name
    for key, value in props.items():  # what a .properties file has no syntax for: an inline comment
        assert not re.search(r"\s#", value), f"{name}: {key} has a `#` in its value: {value!r}"
    BrokerConfig.load(None, props)  # ConfigError on a bad value


def plain(text: str) -> bool:
    """Starts alone: no ZooKeeper, no key stores or SASL logins to provide."""
    return not re.search(r"^(zookeeper\.connect|ssl\.|sasl\.|listener\.name\.)", text, re.M)


@pytest.mark.parametrize("name,text", [(n, t) for n, t in PROPERTIES if plain(t)],
                         ids=[n for n, t in PROPERTIES if plain(t)])
def test_every_plain_properties_example_starts_a_broker(tmp_path, name, text):
    port = free_port()
    config = tmp_path / "server.properties"
    config.write_text(text, encoding="utf-8")
    # only where it listens and keeps its data differ (the example's port may be taken here)
    cmd = BROKER + ["-c", str(config), "--workers", "1", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                    "--set", f"log.dirs={tmp_path / 'data'}", "--set", "advertised.listeners="]
    if "metrics.port" in text:
        cmd += ["--set", f"metrics.port={free_port()}"]
    broker = RunningBroker(cmd, port)
    broker.wait_serving()
    code, err = broker.stop()
    assert code == 0, err
    assert "Traceback" not in err and "isn't a known config" not in err
