"""perf/share_groups.py runs end to end in its smoke size (seconds): a broker it starts, every
share and classic configuration reading the whole preloaded topic, the reports written. No
speed is asserted."""
from __future__ import annotations

import json

import pytest

from perf import share_groups


@pytest.mark.timeout(240)
def test_share_groups_bench_smoke_reads_every_record_in_every_configuration(tmp_path):
    out = tmp_path / "share_groups"
    assert share_groups.main(["--smoke", "--out", str(out)]) == 0  # consumer processes spawned, a broker started
    res = json.loads(out.with_suffix(".json").read_text())
    runs = {(r["kind"], r["members"], r["work_us"]): r for r in res["runs"]}
    assert set(runs) == {("classic", 1, 0), ("classic", 4, 0), ("share", 1, 0), ("share", 4, 0), ("share", 16, 0),
                         ("classic", 4, 200), ("share", 4, 200), ("share", 16, 200)}  # --work-us 200 by default
    for r in runs.values():  # every record of the topic read, none with an error, none twice
        assert r["complete"] and r["received"] >= r["expect"] == 3000 and r["errors"] == 0, r
        assert r["duplicates"] == r["redelivered"] == 0, r  # each consumer accepts its last poll before closing
        assert r["requests"]["share_fetches" if r["kind"] == "share" else "fetches"] > 0, r  # the broker's metrics
    assert runs[("classic", 4, 0)]["members_with_records"] == 4  # one partition each: the group formed before the clock
    ratios = {(r["kind"], r["work_us"]) for r in res["rows"] if "ratio" in r}
    assert ratios == {(k, w) for k in ("share(4)/classic(4)", "share(16)/classic(4)", "share(16)/share(4)")
                      for w in (0, 200)}
    table = out.with_suffix(".md").read_text()
    assert "| 100 | share | 16 | 0 |" in table and "| 100 | share | 16 | 200 |" in table
    assert "| 100 | classic | 4 | 0 |" in table and "share(16)/share(4)" in table
