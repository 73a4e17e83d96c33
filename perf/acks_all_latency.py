"""acks=all produce latency: three kafkafast brokers (ZooKeeper mode), one partition of
replication factor 3 with min.insync.replicas=2, sequential acks=all produces of one 1 KiB
record (one request in flight: each waits for the previous answer), so every produce pays the
whole replication round (issue 25's "acks=all in one round trip"). Two code trees compared in
one run, rounds alternated, a fresh cluster per round and tree.

    python -m perf.acks_all_latency --before /path/to/other/tree [--rounds 3] [--produces 2000] [--workers 0]

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
import time
from pathlib import Path

from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from perf.brokers import REPO, Kafkafast
from perf.cluster import SIZE, three_brokers
from perf.forwarding import Conn

TOPIC = "acks-all"


def create_topic(bootstrap: str) -> int:
    """Creates the topic; returns its leader once the ISR is full and every broker knows it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    for _ in range(150):
        md = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if md is not None and md.error is None and md.partitions and md.partitions[0].leader > 0 \
                and len(md.partitions[0].isrs) == 3:
            return md.partitions[0].leader
        time.sleep(0.2)
    raise RuntimeError(f"topic {TOPIC} not ready")


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


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.acks_all_latency")
    ap.add_argument("--before", required=True, help="the other code tree (same twins as this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--produces", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args(argv)
    trees = {"before": Path(args.before).resolve(), "after": REPO}
    root = Path(tempfile.mkdtemp(prefix="kafkafast-acks-all-"))
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
