"""The nemesis matrix, run by hand (as root): every scenario x acks=all/1 x `--workers` 0/2,
each run in a fresh namespace, one run at a time.

    python -m tests.nemesis.matrix                       # everything, seed 1 (about 40 minutes)
    python -m tests.nemesis.matrix --scenarios leader-pause mix --acks 1 --workers 2 --seed 2
    python -m tests.nemesis.matrix --table perf/results/nemesis.json   # the table again

Each run's verdict is appended to `--json` (perf/results/nemesis.json by default) as soon as
it is known, so an interrupted matrix keeps what it measured; the Markdown table of the
runs is printed at the end. A run that fails (an exception in the runner) is recorded as
such, with its logs kept in the printed directory.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tests.nemesis.netns import Namespace
from tests.nemesis.run import REPO, run_in_namespace
from tests.nemesis.scenarios import SCENARIOS

COLUMNS = ("scenario", "acks", "workers", "seed", "acked", "not acked", "lost", "unreadable", "duplicates", "divergent",
           "misplaced", "out of order", "max unavailable s", "heal s")


def row(r: dict) -> list[str]:
    if "error" in r:
        return [r["scenario"], r["acks"], str(r["workers"]), str(r["seed"]), "run failed: " + r["error"].splitlines()[-3][:80]] + \
            [""] * (len(COLUMNS) - 5)
    v = r["verdict"]
    return [r["scenario"], r["acks"], str(r["workers"]), str(r["seed"]), str(v["acked"]), str(v["delivery_errors"] + r["unflushed"]),
            str(v["lost"]),
            str(v["unreadable"]), str(v["duplicates"]), str(v["divergent"]), str(v["misplaced"]),
            str(v["out_of_order"]), str(v["max_unavailable_s"]),
            str(r["heal_s"]) if r["healed"] else "NOT healed"]


def table(results: list[dict]) -> str:
    """One row per run, by workers, then acks (all first), then scenario."""
    order = list(SCENARIOS)
    results = sorted(results, key=lambda r: (r["workers"], r["acks"] != "all", order.index(r["scenario"])))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", choices=sorted(SCENARIOS), default=list(SCENARIOS))
    ap.add_argument("--acks", nargs="+", choices=["all", "1"], default=["all", "1"])
    ap.add_argument("--workers", nargs="+", type=int, default=[0, 2])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=REPO / "perf" / "results" / "nemesis.json")
    ap.add_argument("--table", type=Path, help="print the table of a results file and stop")
    a = ap.parse_args(argv)
    if a.table:
        print(table(json.loads(a.table.read_text())))
        return
    results = json.loads(a.json.read_text()) if a.json.exists() else []
    mine = []
    for workers in a.workers:
        for acks in a.acks:
            for scenario in a.scenarios:
                started = time.monotonic()
                with Namespace() as ns:
                    try:
                        r = run_in_namespace(ns, scenario, acks, workers, a.seed)
                    except Exception as e:  # recorded, and the matrix goes on
                        r = {"scenario": scenario, "acks": acks, "workers": workers, "seed": a.seed, "error": str(e)}
                r["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                mine.append(r)
                results.append(r)
                a.json.write_text(json.dumps(results, indent=1))
                print(" | ".join(row(r)), f"({time.monotonic() - started:.0f} s)", flush=True)
    print(table(mine))


if __name__ == "__main__":
    main()
