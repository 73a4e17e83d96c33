"""Cluster profile: three kafkafast brokers (ZooKeeper mode) on this machine, replication
factor 3, beside one single-process broker, in the same run.

    python -m perf.cluster [--duration 8] [--rate 2000] [--workers N [--forwarding]] [--out perf/results/cluster.json]

With `--workers N` the three brokers also run as pre-fork brokers of N workers each (a
third setup in the same run); with `--forwarding` as well, a fourth setup of the same with
`kafkafast.produce.shared.append.cluster=false` (a produce reaching a non-owner worker is
forwarded to the owner instead of appended through the shared append lock).

For each setup and acks (1, all): throughput of an unthrottled confluent-kafka producer
of 1 KiB records (`perf.load produce`), produce->ack latency p50/p99 at a fixed rate
(`perf.load latency`), and the brokers' CPU seconds per GB produced (all brokers of the
setup together: the followers' fetching and appending counts). Writes JSON and markdown.
All processes share the machine's cores, so absolute numbers are the machine's; compare
the rows of one run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafkafast.cluster.local import ZooKeeperServer
from perf.brokers import Kafkafast, free_port

SIZE = 1024
PARTITIONS = 6


def load(mode: str, a: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "perf.load", mode, "--json", json.dumps(a)], check=True,
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def create_topic(bootstrap: str, name: str, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, rf, config={"min.insync.replicas": str(min(rf, 2))})]
                        )[name].result(30)
    for _ in range(150):  # leaders elected and known everywhere
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == PARTITIONS and \
                all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name} not ready")


def measure(name: str, brokers: list[Kafkafast], rf: int, args: argparse.Namespace,
            acks_settings: tuple[str, ...] = ("1", "all")) -> list[dict]:
    bootstrap = ",".join(b.bootstrap for b in brokers)
    rows = []
    for acks in acks_settings:
        topic = f"bench-{acks}"
        create_topic(bootstrap, topic, rf)
        cpu0 = sum(b.cpu_seconds() for b in brokers)
        tp = load("produce", {"bootstrap": bootstrap, "topic": topic, "size": SIZE, "acks": acks,
                              "warmup_s": 1, "duration_s": args.duration, "round_robin": PARTITIONS})
        cpu = sum(b.cpu_seconds() for b in brokers) - cpu0
        lat = load("latency", {"bootstrap": bootstrap, "topic": topic, "size": SIZE, "acks": acks,
                               "rate": args.rate, "warmup_s": 1, "duration_s": args.duration / 2})
        gb = tp["bytes"] / 1e9
        rows.append({"setup": name, "replication_factor": rf, "acks": acks,
                     "msgs_per_s": tp["acked"] / tp["seconds"], "mb_per_s": tp["bytes"] / tp["seconds"] / 1e6,
                     "errors": tp["errors"] + lat["errors"], "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"],
                     "latency_rate": args.rate, "broker_cpu_s_per_gb": cpu / gb if gb else float("nan")})
        print(json.dumps(rows[-1]), flush=True)
    return rows


@contextmanager
def three_brokers(root: Path, workers: int = 0, settings: dict[str, str] | None = None,
                  tree: Path | None = None) -> Iterator[list[Kafkafast]]:
    """ZooKeeper and brokers 1-3 (from `tree`, default this checkout), registered; stopped after."""
    zk = ZooKeeperServer(root / "zookeeper", free_port()).start()
    brokers = [Kafkafast(root / f"broker-{i}", workers, {
        "broker.id": str(i), "zookeeper.connect": f"{zk.connect}/kafka", "offsets.topic.replication.factor": "3",
        "log.cleaner.enable": "false", **(settings or {})}, tree=tree) for i in (1, 2, 3)]
    try:
        for b in brokers:
            b.start(timeout=60)
        time.sleep(3)  # registrations and the controller's first UpdateMetadata
        yield brokers
    finally:
        for b in brokers:
            b.stop()
        zk.kill()


def cluster_rows(root: Path, workers: int, name: str, args: argparse.Namespace,
                 settings: dict[str, str] | None = None) -> list[dict]:
    with three_brokers(root, workers, settings) as brokers:
        return measure(name, brokers, 3, args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--workers", type=int, default=0, help="also a cluster of brokers with this many workers")
    ap.add_argument("--forwarding", action="store_true",
                    help="with --workers: also the worker cluster with kafkafast.produce.shared.append.cluster=false")
    ap.add_argument("--out", default="perf/results/cluster.json")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="kafkafast-cluster-bench-"))
    rows: list[dict] = []
    single = Kafkafast(root / "single", 0)
    single.start()
    try:
        rows += measure("single broker", [single], 1, args)
    finally:
        single.stop()
    try:
        rows += cluster_rows(root / "cluster", 0, "3-broker cluster", args)
        if args.workers:
            rows += cluster_rows(root / "cluster-workers", args.workers,
                                 f"3-broker cluster, {args.workers} workers each", args)
        if args.workers and args.forwarding:
            rows += cluster_rows(root / "cluster-workers-fwd", args.workers,
                                 f"3-broker cluster, {args.workers} workers each, forwarding", args,
                                 {"kafkafast.produce.shared.append.cluster": "false"})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    out.write_text(json.dumps({"size": SIZE, "partitions": PARTITIONS, "duration_s": args.duration,
                               "rows": rows}, indent=1))
    lines = ["# Cluster profile: replication factor 3 vs one broker", "",
             f"`python -m perf.cluster --duration {args.duration:g} --rate {args.rate:g}"
             f"{f' --workers {args.workers}' if args.workers else ''}"
             f"{' --forwarding' if args.workers and args.forwarding else ''}`: {SIZE}-byte records, "
             f"{PARTITIONS} partitions, confluent-kafka producer (linger 5 ms); every broker and load generator "
             "on this shared 2-core machine, so compare rows, not absolute numbers. Latency is produce->ack at "
             f"{args.rate:g} msg/s; CPU is all brokers of the setup per GB produced.", "",
             "| setup | RF | acks | msgs/s | MB/s | p50 ms | p99 ms | broker CPU-s/GB | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setup']} | {r['replication_factor']} | {r['acks']} | {r['msgs_per_s']:,.0f} | "
                     f"{r['mb_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                     f"{r['broker_cpu_s_per_gb']:.0f} | {r['errors']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
