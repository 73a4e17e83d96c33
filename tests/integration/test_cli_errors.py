"""How the client commands fail: one line naming what went wrong, the subcommand's usage
for a wrong flag, no asyncio noise, and time limits that hold."""
from __future__ import annotations

import time

from kafkafast.cli.common import CommandError, normalize_bootstrap
from tests.support.broker_process import free_port
from tests.support.cli import kafkafast


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error")]


def test_an_unreachable_broker_is_one_line():
    port = free_port()
    out = kafkafast("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list", check=False)
    assert out.returncode == 1
    assert _error_lines(out.stderr) == [f"Error: cannot reach 127.0.0.1:{port}: connection refused"]
    assert "NetworkError(" not in out.stderr


def test_a_bootstrap_server_without_a_port_means_9092():
    assert normalize_bootstrap("kafka1,kafka2:9093, [::1]") == "kafka1:9092,kafka2:9093,[::1]:9092"
    try:
        normalize_bootstrap("kafka1:x")
    except CommandError as exc:
        assert "the port must be a number" in str(exc)
    else:
        raise AssertionError("a port that is not a number was accepted")
    out = kafkafast("topics", "--bootstrap-server", "127.0.0.1", "--list", check=False)
    assert "invalid literal" not in out.stderr
    assert out.returncode == 0 or _error_lines(out.stderr) == [
        "Error: cannot reach 127.0.0.1:9092: connection refused"]


def test_the_bootstrap_default_comes_from_the_environment(module_broker):
    kafkafast("topics", "--bootstrap-server", module_broker.bootstrap, "--create", "--topic", "from-env")
    out = kafkafast("topics", "--list", env={"KAFKAFAST_BOOTSTRAP_SERVERS": module_broker.bootstrap})
    assert "from-env" in out.stdout.split()
    assert "(default: $KAFKAFAST_BOOTSTRAP_SERVERS = " in kafkafast(
        "topics", "--help", env={"KAFKAFAST_BOOTSTRAP_SERVERS": module_broker.bootstrap}).stdout.replace("\n", " ")


def test_an_unknown_flag_shows_the_subcommands_usage(module_broker):
    out = kafkafast("topics", "--bootstrap-server", module_broker.bootstrap, "--list", "--bogus", check=False)
    assert out.returncode == 2
    assert "usage: kafkafast topics [-h]" in out.stderr
    assert "kafkafast topics: error: unrecognized arguments: --bogus" in out.stderr
    nested = kafkafast("cluster", "leader-election", "--bootstrap-server", module_broker.bootstrap, "--preferred",
                       "--all-topic-partitions", "--bogus", check=False)
    assert "kafkafast cluster leader-election: error: unrecognized arguments: --bogus" in nested.stderr


def test_the_console_consumer_exits_without_asyncio_noise(module_broker):
    for topic in ("quiet-1", "quiet-2", "quiet-3"):  # auto-created on the first metadata request
        out = kafkafast("consume", "--bootstrap-server", module_broker.bootstrap, "--topic", topic,
                        "--timeout-ms", "300")
        assert "Processed a total of 0 messages" in out.stderr
        assert "Task was destroyed" not in out.stderr and "ERROR asyncio" not in out.stderr


def test_timeout_ms_holds_for_an_unknown_topic_and_bench_e2e_creates_a_missing_one(broker_factory):
    b = broker_factory(settings={"auto.create.topics.enable": "false"})
    started = time.monotonic()
    out = kafkafast("consume", "--bootstrap-server", b.bootstrap, "--topic", "absent", "--timeout-ms", "1000",
                    check=False)
    assert time.monotonic() - started < 15  # the client's 30 s request timeout before
    assert out.returncode == 1
    assert _error_lines(out.stderr) == ["Error: UnknownTopicOrPartitionError: topic 'absent' has no usable metadata"]

    e2e = kafkafast("bench", "e2e", "--bootstrap-server", b.bootstrap, "--topic", "e2e-absent", "--num-records", "3",
                    "--json")
    assert ('Topic "e2e-absent" does not exist. Will create topic with 1 partition(s) and replication factor = 1'
            in e2e.stderr)
    assert '"records": 3' in e2e.stdout and "Traceback" not in e2e.stderr
