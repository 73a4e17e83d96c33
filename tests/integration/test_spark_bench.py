"""The Spark read benchmark runs end to end in its CI size and writes its reports."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_spark_bench_tiny_reports_throughput_per_partition_count(tmp_path):
    out = tmp_path / "spark_bench_tiny"
    proc = subprocess.run([sys.executable, str(REPO / "perf" / "spark_bench.py"), "--tiny", "--out", str(out)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    res = json.loads(out.with_suffix(".json").read_text())
    assert [(r["partitions"], r["tasks"]) for r in res["spark"]] == [(1, 1), (2, 2)]
    assert all(r["records_per_s"] > 0 for r in res["spark"]) and res["client_one_partition"]["records_per_s"] > 0
    assert res["decode"]["arrow_records_per_s"] > 0 and res["decode"]["per_record_records_per_s"] > 0
    assert res["stages"]["fetch_seconds"] > 0 and res["stages"]["task_body_seconds"] > 0
    # the 1-partition topic also read by two tasks (minPartitions=2), and Spark's own cost
    split, mem = res["spark_one_partition_min_partitions_2"], res["spark_in_memory_one_partition"]
    assert (split["tasks"], mem["tasks"]) == (2, 1) and split["records_per_s"] > 0 and mem["records_per_s"] > 0
    assert res["spark_empty_query_seconds"] > 0 and res["spark_in_memory_empty_query_seconds"] > 0
    # the JVM columnar reader beside them, by partition count too
    assert res["spark_jvm_columnar_one_partition"]["records_per_s"] > 0
    assert [(r["partitions"], r["tasks"]) for r in res["spark_jvm_columnar"]] == [(1, 1), (2, 2)]
    md = out.with_suffix(".md").read_text()
    assert "| partitions | tasks | local[2] records/s |" in md and "## One partition: where the time goes" in md
    assert "`minPartitions=2`: 2 tasks" in md and "### Where Spark's time goes" in md
    assert out.with_suffix(".png").stat().st_size > 0
