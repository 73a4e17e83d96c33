"""The client benchmark runs end to end in its CI size (every client, both operations, both
record sizes, against a broker it starts) and writes its reports. No speed is asserted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_client_bench_tiny_measures_every_client(tmp_path):
    out = tmp_path / "client_bench_tiny"
    proc = subprocess.run([sys.executable, "-m", "perf.client_bench", "--tiny", "--out", str(out)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    res = json.loads(out.with_suffix(".json").read_text())["results"]
    clients = {"kafkafast (async)", "kafkafast (sync)", "aiokafka", "kafka-python", "confluent-kafka",
               "raw (broker ceiling)"}
    cells = {(r["client"], r["op"], r["record_bytes"]) for r in res if r["median_rec_s"] > 0}
    assert cells == {(c, op, size) for c in clients for op in ("produce", "consume") for size in (100, 1024)}
    table = out.with_suffix(".md").read_text()
    assert table.count("| kafkafast (sync) |") == 4 and "vs aiokafka" in table
