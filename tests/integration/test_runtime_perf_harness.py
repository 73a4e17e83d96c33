"""The benchmark harness runs end to end in its tiny profile (seconds); no speed is asserted."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.support.broker_process import REPO


def test_perf_harness_tiny_profile_writes_results_table_json_and_chart(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "perf.run", "--profile", "tiny", "--out", str(out)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    brokers = {r["broker"] for r in res["produce"]}
    assert "kafkafast" in brokers
    for section in ("produce", "consume", "latency"):
        kf = [r for r in res[section] if r["broker"] == "kafkafast"]
        assert kf, section
    assert all(r["complete"] for r in res["consume"])
    assert set(res["ceilings"]) == {"loopback_tcp_Bps", "loopback_sendfile_Bps", "seq_write_Bps",
                                    "seq_write_fdatasync_Bps"}
    assert res["memory"]["kafkafast"]["processes"] >= 2  # supervisor + workers
    table = (out / "RESULTS.md").read_text()
    assert "| target |" in table
    # the tiny profile has no 16-partition produce row: that target is not measured, not failed
    assert re.search(r"^\| produce 1 KiB, acks=1, 16 partitions >= 1.5x Tansu \| not measured \| 1.5 \| not measured \|$",
                     table, re.M), table
    assert "| - " not in table
    # progress output: formatted figures, none of librdkafka's log lines (they go to librdkafka.log)
    assert not re.search(r"^%\d\|", proc.stdout + proc.stderr, re.M), proc.stdout + proc.stderr
    produce = [line for line in proc.stdout.splitlines() if "] produce kafkafast" in line]
    assert produce and re.search(r"broker CPU +\d+\.\d s/GB$", produce[0]), produce
    assert not re.search(r"\d\.\d{4,}", proc.stdout), proc.stdout  # no unrounded floats
    assert (out / "librdkafka.log").exists()
    assert (out / "chart.png").read_bytes()[:4] == b"\x89PNG"
