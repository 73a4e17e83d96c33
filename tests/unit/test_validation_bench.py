"""perf/validation_bench.py runs (tiny) and reports both paths for both codecs; no speed is asserted."""
from __future__ import annotations

from perf import validation_bench


def test_validation_bench_runs_tiny_and_reports_both_paths(tmp_path) -> None:
    res = validation_bench.measure(mib=1, repeats=1, pure_mib=1, log_dir=str(tmp_path))
    res["command"] = "python -m perf.validation_bench --mib 1 --repeats 1"
    assert [r["codec"] for r in res["rows"]] == ["lz4", "zstd"]
    for r in res["rows"]:
        assert r["record_bytes"] == r["batches"] * 1000 * 1024 and r["wire_bytes"] < r["record_bytes"]
        assert set(r["cpu_s_per_gb_records"]) == {"old", "validated", "compiled_check", "pure_check", "decompress_only"}
    text = validation_bench.markdown(res)
    assert "| lz4 |" in text and "| zstd |" in text
    validation_bench.chart(res, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 1000
    assert list(tmp_path.iterdir()) == [tmp_path / "chart.png"]  # the logs were removed
