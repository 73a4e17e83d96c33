"""Shared append vs forwarding in a cluster of pre-fork brokers, rounds alternated: three
kafkafast brokers (ZooKeeper mode) of `--workers` workers each, replication factor 3, once
with `kafkafast.produce.shared.append.cluster=true` (a produce reaching a worker that does not
own the partition is appended by that worker through the append lock) and once with it false
(forwarded to the owner), a fresh cluster per round and setup.

    python -m perf.cluster_shared_append [--rounds 3] [--duration 4] [--rate 1000] [--workers 2] [--acks all]
                                         [--producers N]

Per setup, as `perf.cluster` measures it: an unthrottled confluent-kafka producer's
throughput, produce->ack p50/p99 at `--rate`, and the brokers' CPU seconds per GB. With
`--producers N` (N > 1) instead N such producers at once (N connections to each broker, spread
over its workers by SO_REUSEPORT as a real client population is), their summed throughput and
the brokers' CPU per GB (no latency measurement). Reported:
each round's rows, then medians (ranges) and the paired ratios shared / forwarding. Every
process shares the machine's cores: compare the setups of one run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from perf.cluster import PARTITIONS, SIZE, create_topic, load, measure, three_brokers

SETUPS = {"shared": "true", "forwarding": "false"}
METRICS = ("msgs_per_s", "p50_ms", "p99_ms", "broker_cpu_s_per_gb")
MANY_METRICS = ("msgs_per_s", "broker_cpu_s_per_gb")


def many_producers(name: str, brokers: list, acks: str, args: argparse.Namespace) -> dict:
    """`args.producers` unthrottled producers at once: summed throughput, brokers' CPU per GB."""
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topic = f"bench-{acks}"
    create_topic(bootstrap, topic, 3)
    cpu0 = sum(b.cpu_seconds() for b in brokers)
    spec = {"bootstrap": bootstrap, "topic": topic, "size": SIZE, "acks": acks, "warmup_s": 1,
            "duration_s": args.duration, "round_robin": PARTITIONS}
    with ThreadPoolExecutor(args.producers) as pool:
        results = list(pool.map(lambda _: load("produce", spec), range(args.producers)))
    cpu = sum(b.cpu_seconds() for b in brokers) - cpu0
    acked = sum(r["acked"] for r in results)
    seconds = max(r["seconds"] for r in results)
    gb = sum(r["bytes"] + r["warmup_bytes"] for r in results) / 1e9
    row = {"setup": name, "acks": acks, "producers": args.producers, "msgs_per_s": acked / seconds,
           "errors": sum(r["errors"] for r in results), "broker_cpu_s_per_gb": cpu / gb if gb else float("nan")}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster_shared_append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--acks", nargs="+", default=["all"], choices=["1", "all"])
    ap.add_argument("--producers", type=int, default=1)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="kafkafast-shared-append-bench-"))
    rows: dict[tuple[str, str], list[dict]] = {}
    try:
        for r in range(args.rounds):
            for name in (list(SETUPS) if r % 2 == 0 else list(reversed(SETUPS))):
                settings = {"kafkafast.produce.shared.append.cluster": SETUPS[name]}
                with three_brokers(root / f"{name}-{r}", args.workers, settings) as brokers:
                    got = (measure(name, brokers, 3, args, tuple(args.acks)) if args.producers <= 1 else
                           [many_producers(name, brokers, acks, args) for acks in args.acks])
                    for row in got:
                        rows.setdefault((name, row["acks"]), []).append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    metrics = METRICS if args.producers <= 1 else MANY_METRICS
    for acks in args.acks:
        for name in SETUPS:
            rs = rows[(name, acks)]
            print(f"acks={acks} {name}: " + "; ".join(
                f"{m} {statistics.median(v):,.1f} ({min(v):,.1f}-{max(v):,.1f})"
                for m in metrics for v in [[x[m] for x in rs]]))
        pairs = list(zip(rows[("shared", acks)], rows[("forwarding", acks)]))
        print(f"acks={acks} shared / forwarding, paired by round: " + "; ".join(
            f"{m} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
            for m in metrics for v in [[s[m] / f[m] for s, f in pairs if f[m]]]))
    print(json.dumps({f"{n} acks={a}": v for (n, a), v in rows.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
