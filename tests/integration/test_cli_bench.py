"""`kafkafast bench produce|consume|e2e` with both load generators, --json summaries."""
from __future__ import annotations

import json
import re

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


def test_bench_prints_the_kafka_perf_tools_summary_lines(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "perf-lines", "--partitions", "1")
    out = kafkafast("bench", "produce", *b, "--topic", "perf-lines", "--num-records", "1000", "--record-size", "100",
                    "--client", "kafkafast", "--print-metrics").stdout.splitlines()
    [summary] = [line for line in out if line.startswith("1000 records sent, ")]
    m = re.fullmatch(r"1000 records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), [\d.]+ ms avg latency, "
                     r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.", summary)
    assert m, summary
    assert float(m.group(2)) == pytest.approx(float(m.group(1)) * 100 / 2**20, abs=0.006)  # MB: 2^20 bytes
    assert out.index(summary) > out.index("METRIC              VALUE")  # beside (after) the table
    assert "Metric Name" in out[-14] or any(line.startswith("Metric Name") for line in out)
    assert any(line.startswith("kafkafast-bench:records:{mode=produce}") and line.endswith(": 1000.000")
               for line in out)

    cons = kafkafast("bench", "consume", *b, "--topic", "perf-lines", "--messages", "1000", "--client", "kafkafast",
                     "--timeout", "30").stdout.splitlines()
    assert cons[-2] == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    values = cons[-1].split(", ")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", values[0]) and values[2] == "0.0954"
    assert values[4] == "1000"

    detailed = kafkafast("bench", "consume", *b, "--topic", "perf-lines", "--messages", "1000", "--client",
                         "kafkafast", "--show-detailed-stats", "--reporting-interval", "0", "--hide-header",
                         "--date-format", "yyyy-MM-dd").stdout.splitlines()
    rows = [line.split(", ") for line in detailed if re.match(r"\d{4}-\d\d-\d\d, 0, ", line)]
    assert rows and rows[-1][4] == "1000" and rows[-1][2] == "0.0954"
    assert not any(line.startswith("time, threadId") or line.startswith("start.time") for line in detailed)
