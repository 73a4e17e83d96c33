"""The leader's cost of answering follower Fetches: three kafkafast brokers (ZooKeeper mode), one
topic of replication factor 3 whose 6 partitions all have broker 1 as leader, two code trees
compared in one run, rounds alternated (issue 25: the leader's side of replication).

    python -m perf.leader_fetch --before /path/to/other/tree [--rounds 3] [--produces 2000] [--count-fetches]
    python -m perf.leader_fetch --profile-leader OUT.prof [--tree TREE] [--produces 600]

Each round and tree: a fresh cluster, then `--produces` acks=all Produce v8 requests, one at a
time on one connection (a plain socket: no client batching, so both trees get the same requests
whatever the machine's load), each one batch of 16 records of 1 KiB per partition (~100 KB a
request). Every produce is answered only once both followers fetched it, so the leader answers
about two follower Fetches with records per produce. Counted on the leader only, from the first
produce until both followers have every byte: its CPU seconds (user+sys, /proc) and, with
`--count-fetches`, the Fetch requests it answered (its /metrics: kafka_network_requestmetrics_requests;
recording metrics costs the leader CPU too, so the CPU rows of such a run are higher). Reported:
leader CPU-ms per produce (the produce and the fetches it causes), the same less the leader's idle
CPU rate (measured for 3 s before the load) times the load's duration, follower Fetches per
produce, leader CPU-s per GB. Every process shares the machine's cores: compare the two trees of
one run, rounds paired. CPU per produce still moves with the machine's other load (by a third
between rounds of one tree on a busy machine: a slower round costs more passes and wake-ups), so
take many rounds or a quiet machine; `perf/reader_reads.py` measures the read alone, in-process.
`--profile-leader OUT`: one round of one tree (`--tree`, default this checkout) with the leader
run under cProfile on the CPU clock, its stats written to OUT when it stops (counted work: calls
per produce do not move with the machine's load).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from perf.brokers import REPO, Kafkafast, free_port
from perf.cluster import PARTITIONS, SIZE, three_brokers
from perf.follower_cpu import TOPIC, caught_up, create_topic, log_bytes, paired_rounds
from perf.forwarding import Conn

BATCH_RECORDS = 16
IDLE_S = 3.0
# the broker's command line under cProfile on the CPU clock: argv[1] the stats file, then its own
PROFILED = ("import cProfile, sys, time\nfrom kafkafast.cli.main import main\n"
            "prof = cProfile.Profile(time.process_time)\nprof.enable()\n"
            "try:\n    rc = main(sys.argv[2:])\nfinally:\n    prof.disable()\n    prof.dump_stats(sys.argv[1])\n"
            "sys.exit(rc)\n")


@contextmanager
def leader_profiled(out: Path) -> Iterator[None]:
    """Brokers started meanwhile with broker.id=1 run under cProfile, their stats written to `out`."""
    plain = Kafkafast.command

    def command(self: Kafkafast) -> list[str]:
        cmd = plain(self)  # [python, -m, kafkafast.cli.main, ...]
        return [cmd[0], "-c", PROFILED, str(out)] + cmd[3:] if "broker.id=1" in cmd else cmd

    Kafkafast.command = command  # type: ignore[method-assign]
    try:
        yield
    finally:
        Kafkafast.command = plain  # type: ignore[method-assign]


def requests_answered(port: int) -> dict[str, float]:
    """Requests answered by API (all versions), from the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as f:
        text = f.read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(r'^kafka_network_requestmetrics_requests_total\{([^}]*)\} (\S+)$', text, re.M):
        api = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))).get("request", "")
        out[api] = out.get(api, 0.0) + float(m.group(2))
    return out


def produce_request() -> ProduceRequest:
    batch = encode_batch([(1_700_000_000_000 + i, None, bytes([i]) * SIZE, []) for i in range(BATCH_RECORDS)])
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=batch) for p in range(PARTITIONS)])])


def one_round(root: Path, tree: Path, produces: int, count_fetches: bool = False) -> dict:
    ports = [free_port() for _ in range(3)] if count_fetches else None
    with three_brokers(root, settings={"zookeeper.session.timeout.ms": "30000"}, tree=tree,
                       metrics_ports=ports) as brokers:
        create_topic(",".join(b.bootstrap for b in brokers))
        leader = brokers[0]
        conn = Conn(leader.port)
        try:
            req = produce_request()
            for _ in range(20):  # warm-up: connections, fetch sessions
                conn.request(req, 8)
            caught_up(brokers)
            idle0, t0 = leader.cpu_seconds(), time.monotonic()
            time.sleep(IDLE_S)
            idle = (leader.cpu_seconds() - idle0) / (time.monotonic() - t0)  # CPU-s/s with no load
            start, cpu0 = log_bytes(leader), leader.cpu_seconds()
            fetch0 = requests_answered(ports[0]).get("Fetch", 0.0) if ports else 0.0
            t0 = time.monotonic()
            for _ in range(produces):
                resp = conn.request(req, 8)
                codes = {p.error_code for t in resp.responses for p in t.partition_responses}
                if codes != {0}:
                    raise RuntimeError(f"produce answered {codes}")
            caught_up(brokers)
            cpu = leader.cpu_seconds() - cpu0
            seconds = time.monotonic() - t0
            fetches = requests_answered(ports[0]).get("Fetch", 0.0) - fetch0 if ports else float("nan")
            gb = (log_bytes(leader) - start) / 1e9
        finally:
            conn.sock.close()
        return {"tree": str(tree), "gb": gb, "seconds": seconds, "leader_cpu_s": cpu, "idle_cpu_s_per_s": idle,
                "fetches": fetches,
                "leader_cpu_ms_per_produce": 1000 * cpu / produces,
                "net_leader_cpu_ms_per_produce": 1000 * (cpu - idle * seconds) / produces,
                "fetches_per_produce": fetches / produces,
                "leader_cpu_s_per_gb": cpu / gb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.leader_fetch")
    ap.add_argument("--before", help="the other code tree (Cython twins built)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--produces", type=int, default=2000)
    ap.add_argument("--count-fetches", action="store_true", help="serve /metrics to count the leader's Fetch requests")
    ap.add_argument("--profile-leader", type=Path, help="one round, the leader under cProfile: its stats file")
    ap.add_argument("--tree", type=Path, default=REPO, help="with --profile-leader: the code tree")
    args = ap.parse_args(argv)
    if args.profile_leader:
        with leader_profiled(args.profile_leader.resolve()), \
                tempfile.TemporaryDirectory(prefix="kafkafast-leader-profile-") as root:
            print(json.dumps(one_round(Path(root), args.tree.resolve(), args.produces, args.count_fetches)))
        return 0
    if not args.before:
        ap.error("--before is needed (or --profile-leader)")
    rows = paired_rounds(args.before, args.rounds, "kafkafast-leader-fetch-",
                         lambda root, tree: one_round(root, tree, args.produces, args.count_fetches))
    for name, rs in rows.items():
        print(f"{name}: " + "; ".join(
            f"{what} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" for what, v in (
                ("leader CPU-ms/produce", [x["leader_cpu_ms_per_produce"] for x in rs]),
                ("less its idle CPU", [x["net_leader_cpu_ms_per_produce"] for x in rs]),
                ("follower Fetches/produce", [x["fetches_per_produce"] for x in rs]),
                ("leader CPU-s/GB", [x["leader_cpu_s_per_gb"] for x in rs]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
