"""acks=all produce latency: three kafkafast brokers (ZooKeeper mode), one partition of
replication factor 3 with min.insync.replicas=2, sequential acks=all produces of one 1 KiB
record (one request in flight: each waits for the previous answer), so every produce pays the
whole replication round (issue 25's "acks=all in one round trip"). Two code trees compared in
one run, rounds alternated, a fresh cluster per round and tree.

    python -m perf.acks_all_latency --before /path/to/other/tree [--rounds 3] [--produces 2000] [--workers 0]
    python -m perf.acks_all_latency --before TREE --rate 20000 [--seconds 15] [--table-settings]

`--rate N`: a fixed-rate mode instead, issue 25's p99 row's load: confluent-kafka (`perf.load
latency`) producing 1 KiB records with acks=all at N msg/s to 6 partitions of replication
factor 3 for `--seconds` (after 1 s of warm-up); its p50/p99/max over each tree's rounds. Each
broker process writes its event-loop lag and garbage-collection pauses (runtime/loop_watch.py,
KAFKAFAST_LOOP_REPORT) and they are summed per tree (a tree without loop_watch writes none);
each broker serves /metrics, and each round also prints the brokers' Produce and Fetch request
times (queue, local, remote, send, total: p50/p99/p99.9 bucket bounds over the three brokers).

The client is a plain blocking socket sending Produce v8 to the partition's leader (no client
library batching or linger in the measurement). Reported per tree: p50/p99/max of all rounds'
produces, and each round's p50. Every process shares the machine's cores: compare the two
trees of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import re
import time
import urllib.request
from pathlib import Path

from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from perf.brokers import REPO, free_port
from perf.cluster import SIZE, TABLE_SETTINGS, create_topic as create_rf3_topic, load, three_brokers
from perf.forwarding import Conn

TOPIC = "acks-all"


def create_topic(bootstrap: str, topic: str = TOPIC) -> int:
    """Creates the topic (1 partition on brokers 1-3, min.insync.replicas=2); returns its
    leader once the ISR is full and every broker knows it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    for _ in range(150):
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and md.partitions and md.partitions[0].leader > 0 \
                and len(md.partitions[0].isrs) == 3:
            return md.partitions[0].leader
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready")


def produce(conn: Conn, value: bytes) -> int:
    """One acks=all Produce v8 of one record to partition 0; its error code."""
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return conn.request(req, 8).responses[0].partition_responses[0].error_code


def one_round(root: Path, tree: Path, produces: int, workers: int) -> list[float]:
    with three_brokers(root, workers, settings={"zookeeper.session.timeout.ms": "30000"}, tree=tree) as brokers:
        leader = create_topic(",".join(b.bootstrap for b in brokers))
        conn = Conn(brokers[leader - 1].port)  # one connection, one request at a time
        try:
            value = os.urandom(SIZE)
            for _ in range(50):  # warm-up: connections, fetch sessions
                produce(conn, value)
            lat = []
            for _ in range(produces):
                t = time.perf_counter()
                code = produce(conn, value)
                lat.append((time.perf_counter() - t) * 1000)
                if code:
                    raise RuntimeError(f"produce answered error {code}")
            return lat
        finally:
            conn.sock.close()


def rate_round(root: Path, tree: Path, rate: int, seconds: float, workers: int,
               settings: dict[str, str] | None = None) -> tuple[dict, list[dict]]:
    """One fixed-rate round: the load's answer, and each broker process's loop report."""
    reports = root / "loop-reports"
    os.environ["KAFKAFAST_LOOP_REPORT"] = str(reports)
    ports = [free_port() for _ in range(3)]
    try:
        with three_brokers(root, workers, settings={"zookeeper.session.timeout.ms": "30000", **(settings or {})},
                           tree=tree, metrics_ports=ports) as brokers:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            create_rf3_topic(bootstrap, TOPIC, 3)
            r = load("latency", {"bootstrap": bootstrap, "topic": TOPIC, "size": SIZE, "acks": "all",
                                 "rate": rate, "warmup_s": 1, "duration_s": seconds})
            r["brokers"] = broker_times(ports)
    finally:
        del os.environ["KAFKAFAST_LOOP_REPORT"]
    return r, [json.loads(f.read_text()) for f in sorted(reports.glob("loop-*.json"))] if reports.is_dir() else []


def time_buckets(ports: list[int]) -> dict[tuple[str, str], dict[float, float]]:
    """The brokers' Produce and Fetch request-time histograms and their event-loop lag's, summed
    over the brokers' /metrics: (request or "", time or "eventloop_lag") -> {le: cumulative count}."""
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    line_re = re.compile(r'^(kafka_network_requestmetrics_(\w+)|kafkafast_eventloop_lag_ms)_bucket\{(.*)\} (\S+)$')
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as f:
            text = f.read().decode()
        for line in text.splitlines():
            m = line_re.match(line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3)))
            key = (labels.get("request", ""), m.group(2) or "eventloop_lag")
            if key[0] in ("Produce", "Fetch", ""):
                le = float(labels["le"])
                buckets.setdefault(key, {})[le] = buckets.setdefault(key, {}).get(le, 0.0) + float(m.group(4))
    return buckets


def broker_times(ports: list[int]) -> str:
    """p50/p99 (bucket upper bounds) of the brokers' request times for Produce and Fetch, and of
    their event-loop lag, summed over the three brokers' /metrics histograms."""
    buckets = time_buckets(ports)
    out = []
    for (request, what), cum in sorted(buckets.items()):
        bounds = sorted(cum)
        total = cum[bounds[-1]]
        if not total:
            continue
        q = {p: next(b for b in bounds if cum[b] >= p * total) for p in (0.5, 0.99, 0.999)}
        out.append(f"{request or '-'} {what}: p50 {q[0.5]:g} p99 {q[0.99]:g} p99.9 {q[0.999]:g} ms (n {total:.0f})")
    return "; ".join(out)


def loop_summary(reports: list[dict]) -> str:
    """Lag probes late by more than 10/50 ms, the largest lag, and GC pauses by generation."""
    if not reports:
        return "no loop reports"

    def over(t: dict, ms: float) -> int:
        return sum(c for b, c in t["le_ms"].items() if float(b) > ms)

    lag = [r["lag"] for r in reports]
    parts = [f"lag probes {sum(t['n'] for t in lag)}, late >10 ms {sum(over(t, 10) for t in lag)}, "
             f">50 ms {sum(over(t, 50) for t in lag)}, max {max(t['max_ms'] for t in lag):.0f} ms"]
    for g in range(3):
        ts = [r["gc"][g] for r in reports]
        parts.append(f"gen{g} GCs {sum(t['n'] for t in ts)} ({sum(t['sum_ms'] for t in ts):.0f} ms, "
                     f"max {max(t['max_ms'] for t in ts):.1f} ms)")
    return "; ".join(parts) + f"; frozen objects {min(r['frozen'] for r in reports)}-{max(r['frozen'] for r in reports)}"


def rate_main(args: argparse.Namespace, trees: dict[str, Path], root: Path) -> None:
    results: dict[str, list[dict]] = {"before": [], "after": []}
    reports: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            res, rep = rate_round(root / f"{name}-{r}", trees[name], args.rate, args.seconds, args.workers,
                                  TABLE_SETTINGS if args.table_settings else None)
            results[name].append(res)
            reports[name] += rep
            print(json.dumps({"setup": name, "round": r, "rate": args.rate, "p50_ms": res["p50_ms"],
                              "p99_ms": res["p99_ms"], "max_ms": res.get("max_ms"), "errors": res["errors"],
                              "loop": loop_summary(rep), "brokers": res["brokers"]}), flush=True)
    for name, rs in results.items():
        print(f"{name} (workers {args.workers}, {args.rate} msg/s acks=all): p50 "
              + ", ".join(f"{x['p50_ms']:.1f}" for x in rs) + " ms; p99 " + ", ".join(f"{x['p99_ms']:.1f}" for x in rs)
              + " ms; max " + ", ".join(f"{x.get('max_ms', float('nan')):.1f}" for x in rs) + " ms (per round)")
        print(f"  brokers: {loop_summary(reports[name])}")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.acks_all_latency")
    ap.add_argument("--before", required=True, help="the other code tree (same twins as this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--produces", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--rate", type=int, default=0, help="fixed-rate mode: msg/s (see the docstring)")
    ap.add_argument("--seconds", type=float, default=15.0, help="fixed-rate mode: seconds measured per round")
    ap.add_argument("--table-settings", action="store_true",
                    help="fixed-rate mode: the brokers run with perf.cluster's TABLE_SETTINGS (64 MiB segments, "
                         "retention.bytes, its check interval) instead of the defaults (1 GiB segments)")
    args = ap.parse_args(argv)
    trees = {"before": Path(args.before).resolve(), "after": REPO}
    root = Path(tempfile.mkdtemp(prefix="kafkafast-acks-all-"))
    if args.rate:
        try:
            rate_main(args, trees, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return 0
    lat: dict[str, list[float]] = {"before": [], "after": []}
    p50s: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for r in range(args.rounds):
            for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                xs = one_round(root / f"{name}-{r}", trees[name], args.produces, args.workers)
                lat[name] += xs
                p50s[name].append(statistics.median(xs))
                print(json.dumps({"setup": name, "round": r, "workers": args.workers, "p50_ms": statistics.median(xs),
                                  "p99_ms": pct(xs, 0.99), "max_ms": max(xs)}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, xs in lat.items():
        print(f"{name} (workers {args.workers}): p50 {statistics.median(xs):.2f} ms, p99 {pct(xs, 0.99):.2f} ms, "
              f"max {max(xs):.1f} ms over {len(xs)} produces; round p50s "
              + ", ".join(f"{x:.2f}" for x in p50s[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
