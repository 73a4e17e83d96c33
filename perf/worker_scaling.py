"""Broker CPU per GB produced as the number of workers grows (issue 17).

    python -m perf.worker_scaling [--workers 1,2,4,8] [--count 300000] [--repeats 3]
                                  [--tree /path/to/other/worktree ...] [--out perf/results/worker_scaling.json]

One confluent-kafka producer (`perf.load produce`, linger 5 ms, batch.size 1 MiB) sends
`--count` records of 1 KiB with acks=1 to a topic of 16 partitions on a kafkafast broker
started with `--workers N`, for each N. A connection lands on a random worker, so with
forwarding (N-1)/N of the produce requests take the hop to the owning worker: the broker's
CPU-seconds per GB (user+sys of the supervisor and every worker, from their CPU-time clocks) show what the
hop costs as N grows. Throughput is reported beside it.

Every broker (each worker count, for this tree and for each `--tree`) runs for the whole
run and the measurements alternate over them, repeat by repeat (each repeat starting at the
next broker), so machine noise hits all alike; the table gives the median and range of the
repeats. `--tree` runs another code tree's broker (its directory first on PYTHONPATH and
as working directory; build its Cython twins first) beside this one: the before/after
comparison in one run.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from perf.brokers import REPO, Kafkafast
from perf.run import machine, run_load

SIZE = 1024
PARTITIONS = 16
LABELS = "ABCDEFGH"  # the trees of a run: A is this checkout, B... the --tree arguments
ISSUE_TARGET = 1.15  # the 8-worker CPU-s/GB within 15% of the 1-worker figure


def describe_tree(tree: Path) -> dict:
    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return res.stdout.strip()

    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    native = sorted(p.name.split(".")[0] for p in (tree / "kafkafast" / "_native").glob("*.so"))
    return {"path": str(tree), "commit": git("rev-parse", "--short", "HEAD"),
            "branch": "detached HEAD" if branch == "HEAD" else branch,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")), "native_modules": native}


def produce_once(b: Kafkafast, count: int, warmup_s: float) -> dict:
    topic = f"scale-{uuid.uuid4().hex[:8]}"
    b.create_topic(topic, PARTITIONS)
    cpu0 = b.cpu_seconds()
    res = run_load("produce", [{"bootstrap": b.bootstrap, "topic": topic, "size": SIZE, "acks": "1",
                                "warmup_s": warmup_s, "count": count}])[0]
    cpu = b.cpu_seconds() - cpu0  # the warm-up's records count in the CPU too: add their bytes
    b.delete_topic(topic)
    warm_bytes = res.get("warmup_bytes", 0)
    gb = (res["bytes"] + warm_bytes) / 1e9
    return {"acked": res["acked"], "errors": res["errors"], "seconds": res["seconds"],
            "MB_per_s": res["bytes"] / res["seconds"] / 1e6, "broker_cpu_s": cpu,
            "broker_cpu_s_per_GB": cpu / gb if gb else float("nan"),
            "client_cpu_busy": res["client_cpu_s"] / res["seconds"]}


def summarize(runs: list[dict]) -> dict:
    def stat(key: str) -> dict:
        vals = [r[key] for r in runs]
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}

    return {"broker_cpu_s_per_GB": stat("broker_cpu_s_per_GB"), "MB_per_s": stat("MB_per_s"),
            "client_cpu_busy": stat("client_cpu_busy"), "errors": sum(r["errors"] for r in runs), "runs": runs}


def measure(trees: list[Path], workers: list[int], count: int, repeats: int, warmup_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="kafkafast-scaling-") as tmp:
        brokers = {(i, n): Kafkafast(Path(tmp) / f"t{i}-w{n}", n, tree=t)
                   for i, t in enumerate(trees) for n in workers}
        runs: dict = {key: [] for key in brokers}
        try:
            for b in brokers.values():
                b.start(timeout=60)
            for rep in range(repeats):
                order = list(brokers.items())
                for (i, n), b in order[rep % len(order):] + order[:rep % len(order)]:  # each repeat starts elsewhere
                    r = produce_once(b, count, warmup_s)
                    runs[(i, n)].append(r)
                    print(f"repeat {rep + 1}/{repeats} {LABELS[i]} ({b.tree}) workers={n}: {r['MB_per_s']:.0f} MB/s, "
                          f"{r['broker_cpu_s_per_GB']:.2f} broker CPU-s/GB", flush=True)
        finally:
            for b in brokers.values():
                b.stop()
    out = {"trees": [], "size": SIZE, "partitions": PARTITIONS, "acks": "1", "count": count, "repeats": repeats,
           "warmup_s": warmup_s, "workers": workers}
    for i, t in enumerate(trees):
        rows = {n: summarize(runs[(i, n)]) for n in workers}
        base = rows[workers[0]]["broker_cpu_s_per_GB"]
        for n in workers:  # a busy machine only adds CPU: the ratio of the minimums is shown too
            cpu = rows[n]["broker_cpu_s_per_GB"]
            rows[n]["cpu_vs_first"] = cpu["median"] / base["median"] if base["median"] else float("nan")
            rows[n]["cpu_vs_first_min"] = cpu["min"] / base["min"] if base["min"] else float("nan")
        out["trees"].append({"label": LABELS[i], **describe_tree(t), "rows": {str(n): rows[n] for n in workers}})
    return out


def _range(s: dict, fmt: str) -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def markdown(res: dict) -> str:
    trees = res["trees"]
    names = [t["label"] for t in trees]
    lines = ["# Broker CPU per GB as workers grow (1 KiB acks=1 produce, 16 partitions)", "",
             *([res["note"], ""] if res.get("note") else []),
             f"Command: `{res['command']}`. One confluent-kafka producer sends {res['count']:,} records of "
             f"{res['size']} B (acks=1, linger 5 ms, batch.size 1 MiB) to {res['partitions']} partitions, after "
             f"{res['warmup_s']:g} s of warm-up, on a broker started with `--workers N`; {res['repeats']} repeats, "
             "alternating over every broker of the run; median (min–max). Broker CPU: user+sys of the supervisor and "
             "every worker over the warm-up and the timed window, per GB produced in both; the ratio to the first "
             "worker count is of the medians, and of the minimums in brackets (a busy machine only adds CPU). "
             f"Issue 17's target: CPU-s/GB at {res['workers'][-1]} workers within 15% of 1 worker "
             f"(ratio ≤ {ISSUE_TARGET}). Client CPU busy near 1.0 means client-bound throughput.", "",
             f"Machine: {res['machine'].get('cpu', '?')}, {res['machine'].get('cpus', '?')} CPUs (shared with other "
             "work: compare within the table, not with other runs).", ""]
    for t in trees:
        lines.append(f"- {t['label']}: `{t['path']}`, {t['branch']} at {t['commit']}"
                     f"{' with uncommitted changes' if t['dirty'] else ''} "
                     f"(compiled twins: {', '.join(t['native_modules']) or 'none'})")
    lines += ["", "| workers | " + " | ".join(f"{n} CPU-s/GB | {n} vs {res['workers'][0]} worker | {n} MB/s | "
                                                f"{n} client busy" for n in names) + " |",
              "|---:|" + "---:|---:|---:|---:|" * len(trees)]
    for w in res["workers"]:
        cells = []
        for t in trees:
            r = t["rows"][str(w)]
            cells += [_range(r["broker_cpu_s_per_GB"], ".2f"),
                      f"{r['cpu_vs_first']:.2f} (min {r['cpu_vs_first_min']:.2f})",
                      _range(r["MB_per_s"], ".0f"), f"{r['client_cpu_busy']['median']:.2f}"]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    if len(trees) > 1:
        lines += ["", "Each tree against A (median CPU-s/GB ratio, throughput ratio):", "",
                  "| workers | " + " | ".join(f"{n} / {names[0]} CPU | MB/s" for n in names[1:]) + " |",
                  "|---:|" + "---:|---:|" * (len(trees) - 1)]
        for w in res["workers"]:
            first = trees[0]["rows"][str(w)]
            cells = []
            for t in trees[1:]:
                r = t["rows"][str(w)]
                cells += [f"{r['broker_cpu_s_per_GB']['median'] / first['broker_cpu_s_per_GB']['median']:.2f}",
                          f"{r['MB_per_s']['median'] / first['MB_per_s']['median']:.2f}"]
            lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_trees(prog: str, argv: list[str] | None, measure_fn: Any, markdown_fn: Any, *, workers: str,
              count: int, count_help: str, repeats: int) -> int:
    """The command line of a run comparing code trees (this one and `--tree`s): worker counts,
    records, repeats and warm-up for `measure_fn(trees, workers, count, repeats, warmup)`, whose
    results `markdown_fn` turns into the table printed and written beside `--out`'s JSON."""
    ap = argparse.ArgumentParser(prog=f"python -m {prog}")
    ap.add_argument("--tree", action="append", default=[],
                    help="another code tree (Cython twins built) to measure beside this one; repeatable")
    ap.add_argument("--workers", default=workers, help="worker counts, comma-separated")
    ap.add_argument("--count", type=int, default=count, help=count_help)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of unthrottled produce before the count")
    ap.add_argument("--out", default=None, help="JSON path; the markdown table goes beside it (.md)")
    ap.add_argument("--note", default="", help="a sentence printed under the title (what the trees are)")
    args = ap.parse_args(argv)
    trees = [REPO] + [Path(t).resolve() for t in args.tree]
    if len(trees) > len(LABELS):
        ap.error(f"at most {len(LABELS) - 1} --tree")
    for t in trees[1:]:
        if not (t / "kafkafast" / "__init__.py").exists():
            ap.error(f"{t} is not a kafkafast code tree")
    t0 = time.time()
    res = measure_fn(trees, [int(w) for w in args.workers.split(",")], args.count, args.repeats, args.warmup)
    res["command"] = f"python -m {prog} " + shlex.join(argv if argv is not None else sys.argv[1:])
    res["machine"] = machine()
    res["note"] = args.note
    res["wall_s"] = round(time.time() - t0, 1)
    md = markdown_fn(res)
    print(md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1))
        out.with_suffix(".md").write_text(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_trees("perf.worker_scaling", argv, measure, markdown, workers="1,2,4,8", count=300_000,
                     count_help="records per measurement", repeats=3)

if __name__ == "__main__":
    sys.exit(main())
