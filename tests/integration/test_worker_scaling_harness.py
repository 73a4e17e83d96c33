"""perf.worker_scaling runs end to end, tiny (seconds), with a second code tree beside
this one; no speed is asserted."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support.broker_process import REPO


def tiny_run(module: str, workers: str, out) -> dict:
    """`python -m perf.<module>` with 2,000 records, one repeat, this tree beside itself; its JSON."""
    proc = subprocess.run([sys.executable, "-m", f"perf.{module}", "--workers", workers, "--count", "2000",
                           "--repeats", "1", "--warmup", "0", "--tree", str(REPO), "--out", str(out)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_worker_scaling_tiny_run_writes_a_table_per_tree_and_worker_count(tmp_path):
    out = tmp_path / "scaling.json"
    res = tiny_run("worker_scaling", "1,2", out)
    assert [t["label"] for t in res["trees"]] == ["A", "B"]
    for tree in res["trees"]:
        assert set(tree["rows"]) == {"1", "2"}
        for row in tree["rows"].values():
            (run,) = row["runs"]
            assert run["acked"] == 2000 and run["errors"] == 0
            # > 0 by construction: the broker's processes read and stored 2 MB, and their CPU is read
            # in nanoseconds (perf.brokers.cpu_seconds), not in 10 ms ticks that a short run can miss
            assert run["broker_cpu_s"] > 0 and run["MB_per_s"] > 0
        assert tree["rows"]["1"]["cpu_vs_first"] == 1.0
    md = out.with_suffix(".md").read_text()
    assert "| workers |" in md and "Each tree against A" in md
    assert md.count("\n| 2 |") == 2  # a row in the side-by-side table and in the comparison


def test_one_broker_before_and_after_tiny_run_measures_every_load_on_both_trees(tmp_path):
    """perf.one_broker (issue 24's before/after check): every load on every tree and worker
    count, the consume reading back exactly what the acks=all produce stored."""
    out = tmp_path / "one_broker.json"
    res = tiny_run("one_broker", "1", out)
    assert [t["label"] for t in res["trees"]] == ["A", "B"]
    assert [r["load"] for r in res["rows"]] == ["produce 1 KiB acks=all", "consume 1 KiB", "produce 100 B acks=1"]
    for row in res["rows"]:
        for label in "AB":
            (run,) = row[label]["runs"]
            # errors: failed deliveries, or for the consume, records missing from what was produced
            assert run["errors"] == 0 and run["MB_per_s"] > 0 and run["broker_cpu_s_per_GB"] > 0
    md = out.with_suffix(".md").read_text()
    assert md.count("\n| 1 |") == 3 and "B/A MB/s" in md
