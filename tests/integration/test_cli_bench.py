"""`kafkafast bench produce|consume|e2e` with both load generators, --json summaries."""
from __future__ import annotations

import json

import pytest

from tests.support.cli import kafkafast


@pytest.mark.parametrize("client", ["kafkafast", "confluent"])
def test_bench_produce_consume_e2e(module_broker, client):
    if client == "confluent":
        pytest.importorskip("confluent_kafka")
    b = ["--bootstrap-server", module_broker.bootstrap]
    topic = f"perf-{client}"
    kafkafast("topics", *b, "--create", "--topic", topic, "--partitions", "2")
    prod = json.loads(kafkafast("bench", "produce", *b, "--topic", topic, "--num-records", "3000", "--record-size",
                                "200", "--throughput", "-1", "--producer-props", "acks=1", "linger.ms=2",
                                "--client", client, "--json").stdout)
    assert prod["records"] == 3000 and prod["bytes"] == 600000 and prod["errors"] == 0
    assert prod["client"] == ("confluent-kafka" if client == "confluent" else "kafkafast")
    assert 0 < prod["latency_ms"]["p50"] <= prod["latency_ms"]["p99"] <= prod["latency_ms"]["max"]

    cons = json.loads(kafkafast("bench", "consume", *b, "--topic", topic, "--messages", "3000", "--client", client,
                                "--timeout", "40", "--json").stdout)
    assert cons["records"] == 3000 and cons["bytes"] == 600000 and not cons["timed_out"]

    e2e = json.loads(kafkafast("bench", "e2e", *b, "--topic", topic, "--num-records", "20", "--client", client,
                               "--json").stdout)
    assert e2e["records"] == 20 and e2e["latency_ms"]["avg"] > 0

    table = kafkafast("bench", "produce", *b, "--topic", topic, "--num-records", "100", "--client", client).stdout
    assert table.splitlines()[0].split() == ["METRIC", "VALUE"]
    assert any(line.split() == ["records", "100"] for line in table.splitlines())


def test_bench_draws_a_progress_line_on_a_terminal(module_broker):
    """On a terminal (stderr is a tty) the progress line is redrawn with \\r."""
    import os
    import pty
    import subprocess
    import sys

    from tests.support.broker_process import REPO

    kafkafast("topics", "--bootstrap-server", module_broker.bootstrap, "--create", "--topic", "tty",
              "--partitions", "1")
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("KAFKAFAST_NO_PROGRESS", None)
    proc = subprocess.run([sys.executable, "-m", "kafkafast.cli.main", "bench", "produce", "--bootstrap-server",
                           module_broker.bootstrap, "--topic", "tty", "--num-records", "3000", "--throughput", "3000",
                           "--reporting-interval", "0.2", "--client", "kafkafast", "--json"],
                          stdout=subprocess.PIPE, stderr=slave, env=env, timeout=60, cwd=str(REPO))
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["records"] == 3000  # stdout stays clean JSON
    lines = seen.decode(errors="replace").split("\r")
    assert any("/3000 records" in x and "rec/s" in x and "MB/s" in x and "p99" in x for x in lines), seen[:400]
