"""Single-node speed before and after a change of the data path, side by side (issue 24).

    python -m perf.one_broker --tree /path/to/the/before/worktree [--workers 1,2] [--repeats 5]
                              [--out perf/results/one_broker.json] [--note "..."]

Three loads, each on every broker of the run (this checkout is A, `--tree` is B; every tree
with its Cython twins built), with confluent-kafka (librdkafka) clients:

* `produce 1 KiB acks=all`: one producer sends `--count` records of 1 KiB to a topic of 16
  partitions (linger 5 ms, batch.size 1 MiB, after `--warmup` seconds);
* `consume 1 KiB`: one consumer reads that topic back from the beginning with assign()
  (no group join in the timed window; the page cache holds it);
* `produce 100 B acks=1`: `--count` x 4 records of 100 B, 16 partitions.

Broker CPU is user+sys of the supervisor and every worker over the measured window, per GB
moved. Every broker (tree x worker count) runs for the whole run and the measurements
alternate over them, repeat by repeat, each repeat starting at the next broker, so machine
noise hits all alike: compare B with A within one run, by the ratio of medians.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from perf.brokers import Kafkafast
from perf.run import run_load
from perf.worker_scaling import LABELS, describe_tree, run_trees

PARTITIONS = 16
LOADS = ("produce 1 KiB acks=all", "consume 1 KiB", "produce 100 B acks=1")
TARGET = 0.05  # throughput within 5%, CPU-s/GB not higher


def measure_pair(b: Kafkafast, count: int, warmup_s: float) -> dict[str, dict]:
    """One measurement of each load on broker `b`."""
    out = {}
    topic = f"ab-{uuid.uuid4().hex[:8]}"
    b.create_topic(topic, PARTITIONS)
    cpu0 = b.cpu_seconds()
    res = run_load("produce", [{"bootstrap": b.bootstrap, "topic": topic, "size": 1024, "acks": "all",
                                "warmup_s": warmup_s, "count": count}])[0]
    out[LOADS[0]] = _row(res["bytes"] + res.get("warmup_bytes", 0), res["bytes"], res["seconds"],
                         b.cpu_seconds() - cpu0, res["errors"], res["client_cpu_s"])
    total = res["acked"] + res.get("warmup_bytes", 0) // 1024
    cpu0 = b.cpu_seconds()
    res = run_load("consume", [{"bootstrap": b.bootstrap, "topic": topic, "expect": total,
                                "partitions": list(range(PARTITIONS))}])[0]
    out[LOADS[1]] = _row(res["bytes"], res["bytes"], res["seconds"], b.cpu_seconds() - cpu0,
                         res["errors"] + (total - res["messages"]), res["client_cpu_s"])
    b.delete_topic(topic)
    topic = f"ab-{uuid.uuid4().hex[:8]}"
    b.create_topic(topic, PARTITIONS)
    cpu0 = b.cpu_seconds()
    res = run_load("produce", [{"bootstrap": b.bootstrap, "topic": topic, "size": 100, "acks": "1",
                                "warmup_s": warmup_s, "count": count * 4}])[0]
    out[LOADS[2]] = _row(res["bytes"] + res.get("warmup_bytes", 0), res["bytes"], res["seconds"],
                         b.cpu_seconds() - cpu0, res["errors"], res["client_cpu_s"])
    b.delete_topic(topic)
    return out


def _row(cpu_bytes: int, timed_bytes: int, seconds: float, cpu_s: float, errors: int, client_cpu_s: float) -> dict:
    return {"MB_per_s": timed_bytes / seconds / 1e6, "broker_cpu_s_per_GB": cpu_s / (cpu_bytes / 1e9),
            "errors": errors, "client_cpu_busy": client_cpu_s / seconds}


def measure(trees: list[Path], workers: list[int], count: int, repeats: int, warmup_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="kafkafast-ab-") as tmp:
        brokers = {(i, n): Kafkafast(Path(tmp) / f"t{i}-w{n}", n, tree=t)
                   for i, t in enumerate(trees) for n in workers}
        runs: dict = {(key, load): [] for key in brokers for load in LOADS}
        try:
            for b in brokers.values():
                b.start(timeout=60)
            for rep in range(repeats):
                order = list(brokers.items())
                for (i, n), b in order[rep % len(order):] + order[:rep % len(order)]:
                    for load, r in measure_pair(b, count, warmup_s).items():
                        runs[((i, n), load)].append(r)
                        print(f"repeat {rep + 1}/{repeats} {LABELS[i]} workers={n} {load}: {r['MB_per_s']:.1f} MB/s, "
                              f"{r['broker_cpu_s_per_GB']:.2f} CPU-s/GB", flush=True)
        finally:
            for b in brokers.values():
                b.stop()

    def stat(rs: list[dict], key: str) -> dict:
        vals = [r[key] for r in rs]
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}

    out: dict = {"trees": [{"label": LABELS[i], **describe_tree(t)} for i, t in enumerate(trees)],
                 "workers": workers, "count": count, "repeats": repeats, "warmup_s": warmup_s, "rows": []}
    for n in workers:
        for load in LOADS:
            row: dict = {"workers": n, "load": load}
            for i in range(len(trees)):
                rs = runs[((i, n), load)]
                row[LABELS[i]] = {"MB_per_s": stat(rs, "MB_per_s"), "broker_cpu_s_per_GB": stat(rs, "broker_cpu_s_per_GB"),
                                  "client_cpu_busy": stat(rs, "client_cpu_busy"),
                                  "errors": sum(r["errors"] for r in rs), "runs": rs}
            out["rows"].append(row)
    return out


def _range(s: dict, fmt: str) -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def markdown(res: dict) -> str:
    a, others = res["trees"][0], res["trees"][1:]
    lines = ["# Single-node speed before and after (issue 24: one data plane)", "",
             *([res["note"], ""] if res.get("note") else []),
             f"Command: `{res['command']}` ({res['wall_s']:.0f} s). Loads as `perf/one_broker.py` says: "
             f"{res['count']:,} records of 1 KiB with acks=all to 16 partitions, read back with assign(); "
             f"{res['count'] * 4:,} records of 100 B with acks=1; confluent-kafka clients; {res['repeats']} repeats "
             "alternating over every broker of the run; median (min–max). Broker CPU: user+sys of every broker "
             "process over the window, per GB moved. Client busy near 1.0 means client-bound.", "",
             f"Machine: {res['machine'].get('cpu', '?')}, {res['machine'].get('cpus', '?')} CPUs (shared: compare "
             "within the table).", ""]
    for t in res["trees"]:
        lines.append(f"- {t['label']}: `{t['path']}`, {t['branch']} at {t['commit']}"
                     f"{' with uncommitted changes' if t['dirty'] else ''} "
                     f"(compiled twins: {', '.join(t['native_modules']) or 'none'})")
    head = "| workers | load | " + " | ".join(f"{t['label']} MB/s | {t['label']} CPU-s/GB" for t in res["trees"])
    head += "".join(f" | {t['label']}/{a['label']} MB/s | {t['label']}/{a['label']} CPU" for t in others) + " |"
    lines += ["", head, "|---:|---|" + "---:|---:|" * len(res["trees"]) + "---:|---:|" * len(others)]
    for row in res["rows"]:
        cells = []
        for t in res["trees"]:
            r = row[t["label"]]
            cells += [_range(r["MB_per_s"], ".1f"), _range(r["broker_cpu_s_per_GB"], ".2f")]
        for t in others:
            r, base = row[t["label"]], row[a["label"]]
            cells += [f"{r['MB_per_s']['median'] / base['MB_per_s']['median']:.3f}",
                      f"{r['broker_cpu_s_per_GB']['median'] / base['broker_cpu_s_per_GB']['median']:.3f}"]
        lines.append(f"| {row['workers']} | {row['load']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return run_trees("perf.one_broker", argv, measure, markdown, workers="1,2", count=200_000,
                     count_help="1 KiB records per measurement (x4 of 100 B)", repeats=5)

if __name__ == "__main__":
    sys.exit(main())
