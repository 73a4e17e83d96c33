"""Cluster brokers with `--workers 2` vs `--workers 0`, and one tree against another: where a
workers-2 cluster spends its CPU per GB of RF3 acks=all produce.

    python -m perf.cluster_workers [--before TREE] [--rounds 3] [--count 300000] [--acks all]

Three ZooKeeper-mode brokers per setup (topic of 6 partitions, RF 3, min.insync.replicas=2,
the table's `TABLE_SETTINGS`, each load started on a settled disk), all setups up for the
whole run: this tree with `--workers 0`, this tree with `--workers 2`, and with `--before` the
same `--workers 2` cluster from another code tree (its twins built).
Each round sends `--count` 1 KiB records with librdkafka's `rdkafka_performance` to every
setup, the setups' order rotated round by round; per load it records msgs/s and the CPU
seconds per GB of every broker process (supervisor and each worker apart), so the per-process
split shows where the work goes. Prints one JSON line per load and a summary (medians of the
rounds' paired ratios against this tree's `--workers 0` cluster and, with `--before`, of this
tree's `--workers 2` cluster against the other's).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from perf import rdkafka_tools
from perf.brokers import cpu_seconds
from perf.cluster import PARTITIONS, SIZE, TABLE_SETTINGS, create_topic, load, settle_disk, three_brokers

TOPIC = "w2"


def per_process_cpu(brokers: list) -> dict[str, float]:
    out = {}
    for b in brokers:
        pids = sorted(b.pids())
        for i, pid in enumerate(pids):
            out[f"{b.settings['broker.id']}.{i}"] = cpu_seconds([pid])
    return out


def switches(brokers: list) -> int:
    """Context switches (voluntary: a worker's loop went to sleep and was woken) of every broker process."""
    n = 0
    for b in brokers:
        for pid in b.pids():
            try:
                with open(f"/proc/{pid}/status") as fh:
                    for line in fh:
                        if line.startswith("voluntary_ctxt_switches"):
                            n += int(line.split()[1])
            except OSError:
                pass
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster_workers")
    ap.add_argument("--before", type=Path, default=None, help="another code tree, run with --workers 2 as well")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=300_000, help="records per load")
    ap.add_argument("--acks", default="all")
    ap.add_argument("--driver", choices=("rdkafka_performance", "confluent-kafka"), default="rdkafka_performance")
    ap.add_argument("--seconds", type=float, default=3.0, help="confluent-kafka: seconds per load")
    ap.add_argument("--no-w0", action="store_true", help="without the --workers 0 cluster")
    args = ap.parse_args(argv)
    binary = rdkafka_tools.setup(None)
    setups = {} if args.no_w0 else {"w0": (0, None)}
    setups["w2"] = (2, None)
    if args.before:
        setups["w2-before"] = (2, args.before)
    runs: dict[str, list[dict]] = {k: [] for k in setups}
    with tempfile.TemporaryDirectory(prefix="cw-") as tmp, ExitStack() as stack:
        clusters = {}
        for name, (workers, tree) in setups.items():
            # (the table's settings: every setup's page cache bounded, see perf.cluster)
            clusters[name] = stack.enter_context(three_brokers(Path(tmp) / name, workers, dict(TABLE_SETTINGS),
                                                               tree=tree))
            create_topic(",".join(b.bootstrap for b in clusters[name]), TOPIC, 3)
        names = list(setups)
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                brokers = clusters[name]
                settled_mb, _ = settle_disk()  # what the previous load left dirty is not written during this one
                before, sw0 = per_process_cpu(brokers), switches(brokers)
                t0 = time.perf_counter()
                bootstrap = ",".join(b.bootstrap for b in brokers)
                if args.driver == "rdkafka_performance":
                    r = rdkafka_tools.produce(binary, bootstrap, TOPIC, size=SIZE, acks=args.acks, count=args.count)
                else:
                    r = load("produce", {"bootstrap": bootstrap, "topic": TOPIC, "size": SIZE, "acks": args.acks,
                                         "warmup_s": 0.5, "duration_s": args.seconds, "round_robin": PARTITIONS})
                    r = {"delivered": r["acked"] + r.get("warmup_bytes", 0) // SIZE,
                         "msgs_per_s": round(r["acked"] / r["seconds"]), "errors": r["errors"]}
                wall = time.perf_counter() - t0
                time.sleep(0.5)  # the followers' last fetches
                after, sw = per_process_cpu(brokers), switches(brokers) - sw0
                gb = r["delivered"] * SIZE / 1e9
                procs = {k: round((after[k] - before.get(k, 0.0)) / gb, 3) for k in after}
                row = {"round": rnd, "setup": name, "msgs_per_s": r["msgs_per_s"], "wall_s": round(wall, 2),
                       "errors": r["errors"], "cpu_s_per_gb": round(sum(procs.values()), 3),
                       "wakeups_per_gb": round(sw / gb), "settled_mb": round(settled_mb), "per_process": procs}
                runs[name].append(row)
                print(json.dumps(row), flush=True)
    summary = {}
    for name in names:
        tp = [r["msgs_per_s"] for r in runs[name]]
        cpu = [r["cpu_s_per_gb"] for r in runs[name]]
        summary[name] = {"msgs_per_s": statistics.median(tp), "cpu_s_per_gb": statistics.median(cpu),
                         "wakeups_per_gb": statistics.median(r["wakeups_per_gb"] for r in runs[name])}
        if "w0" in runs and name != "w0":
            tpr = [a["msgs_per_s"] / b["msgs_per_s"] for a, b in zip(runs[name], runs["w0"])]
            cpr = [a["cpu_s_per_gb"] / b["cpu_s_per_gb"] for a, b in zip(runs[name], runs["w0"])]
            summary[name]["throughput_vs_w0"] = [round(statistics.median(tpr), 2), round(min(tpr), 2),
                                                 round(max(tpr), 2)]
            summary[name]["cpu_vs_w0"] = [round(statistics.median(cpr), 2), round(min(cpr), 2), round(max(cpr), 2)]
    if "w2-before" in runs:  # this tree against the other, round by round
        cpr = [a["cpu_s_per_gb"] / b["cpu_s_per_gb"] for a, b in zip(runs["w2"], runs["w2-before"])]
        tpr = [a["msgs_per_s"] / b["msgs_per_s"] for a, b in zip(runs["w2"], runs["w2-before"])]
        summary["w2"]["cpu_vs_before"] = [round(statistics.median(cpr), 3), round(min(cpr), 3), round(max(cpr), 3)]
        summary["w2"]["throughput_vs_before"] = [round(statistics.median(tpr), 3), round(min(tpr), 3),
                                                 round(max(tpr), 3)]
    print(json.dumps({"summary": summary, "partitions": PARTITIONS, "count": args.count, "acks": args.acks,
                      "driver": args.driver}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
