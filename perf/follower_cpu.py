"""Follower CPU per GB: three kafkafast brokers (ZooKeeper mode), one topic of replication
factor 3 whose partitions all have broker 1 as leader, so brokers 2 and 3 only fetch and
append. Two code trees compared in one run, rounds alternated (issue 25's follower path).

    python -m perf.follower_cpu --before /path/to/other/tree [--rounds 3] [--duration 5]

Each round and tree: a fresh cluster, then two measurements of an unthrottled
confluent-kafka producer of 1 KiB records with acks=1 (`--acks all` for the concurrent one)
for `duration` s (`perf.load produce`):

* catch-up: the followers are SIGSTOPped while the leader takes the load, then resumed; their
  CPU from the resume until their segment files are as long as the leader's. Both trees
  fetch the same backlog in the same full answers (replica.fetch.max.bytes per partition),
  so this isolates the cost of receiving and appending an answer.
* concurrent: the followers fetch while the load runs; their CPU from before the load until
  caught up. How many bytes an answer carries then depends on how far behind a follower
  runs, which the machine's other load decides, so this one is noisy; `--rate N` paces the
  producer at N messages/s (`perf.load latency`) so that the load stays the same.

Reported: each follower's CPU seconds per GB it appended (and the leader's, concurrent), and
in the concurrent one each broker's read and write system calls per MB (`/proc/PID/io`: socket
reads and writes, sendfile, pwrite), which count its round trips.
Every process shares the machine's cores: compare the two trees of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from perf.brokers import REPO, Kafkafast
from perf.cluster import PARTITIONS, SIZE, load, three_brokers

TOPIC = "follow"


def log_bytes(b: Kafkafast) -> int:
    return sum(p.stat().st_size for p in b.data.glob(f"{TOPIC}-*/*.log"))


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=[[1, 2, 3]] * PARTITIONS)])[TOPIC].result(30)
    for _ in range(150):
        md = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if md is not None and md.error is None and len(md.partitions) == PARTITIONS and \
                all(p.leader == 1 and len(p.isrs) == 3 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {TOPIC} not ready")


def io_calls(b: Kafkafast) -> int:
    """Read and write system calls of the broker's processes so far (/proc/PID/io syscr +
    syscw: every socket read and write, sendfile and pwrite), a count of its round trips."""
    total = 0
    for pid in b.pids():
        try:
            fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        except OSError:
            continue
        total += int(fields["syscr"]) + int(fields["syscw"])
    return total


def caught_up(brokers: list[Kafkafast]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        target = log_bytes(brokers[0])
        if all(log_bytes(b) == target for b in brokers[1:]):
            return
        time.sleep(0.02)
    raise RuntimeError("followers did not catch up")


def produce(bootstrap: str, duration: float, acks: str = "1") -> dict:
    return load("produce", {"bootstrap": bootstrap, "topic": TOPIC, "size": SIZE, "acks": acks,
                            "warmup_s": 0, "duration_s": duration, "round_robin": PARTITIONS})


def paced(bootstrap: str, duration: float, acks: str, rate: float, linger_ms: int = 5) -> dict:
    """`rate` messages/s (`perf.load latency`): the same load whatever else runs on the machine."""
    r = load("latency", {"bootstrap": bootstrap, "topic": TOPIC, "size": SIZE, "acks": acks, "rate": rate,
                         "linger_ms": linger_ms, "warmup_s": 0, "duration_s": duration})
    return {"bytes": r["acked"] * SIZE, "seconds": r["seconds"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}


def one_round(root: Path, tree: Path, duration: float, acks: str = "1", rate: float = 0.0,
              linger_ms: int = 5) -> dict:
    with three_brokers(root, settings={"zookeeper.session.timeout.ms": "30000"}, tree=tree) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        create_topic(bootstrap)
        followers = brokers[1:]
        for b in followers:
            os.killpg(b.proc.pid, signal.SIGSTOP)
        try:
            start = log_bytes(brokers[0])
            produce(bootstrap, duration)
            gb = (log_bytes(brokers[0]) - start) / 1e9
            cpu0 = [b.cpu_seconds() for b in followers]
        finally:
            for b in followers:
                os.killpg(b.proc.pid, signal.SIGCONT)
        caught_up(brokers)
        catch_up = [(b.cpu_seconds() - c) / gb for b, c in zip(followers, cpu0)]
        start = log_bytes(brokers[0])
        cpu0 = [b.cpu_seconds() for b in brokers]
        io0 = [io_calls(b) for b in brokers]
        tp = paced(bootstrap, duration, acks, rate, linger_ms) if rate else produce(bootstrap, duration, acks)
        caught_up(brokers)
        gb = (log_bytes(brokers[0]) - start) / 1e9
        cpu = [(b.cpu_seconds() - c) / gb for b, c in zip(brokers, cpu0)]
        calls = [(io_calls(b) - c) / gb / 1000 for b, c in zip(brokers, io0)]
        return {"tree": str(tree), "catch_up_cpu_s_per_gb": catch_up, "concurrent_gb": gb,
                "concurrent_mb_per_s": tp["bytes"] / tp["seconds"] / 1e6,
                "concurrent_p50_ms": tp.get("p50_ms"), "concurrent_p99_ms": tp.get("p99_ms"),
                "concurrent_leader_cpu_s_per_gb": cpu[0], "concurrent_follower_cpu_s_per_gb": cpu[1:],
                "concurrent_leader_io_calls_per_mb": calls[0], "concurrent_follower_io_calls_per_mb": calls[1:]}


def paired_rounds(before: str, rounds: int, prefix: str, run: Callable[[Path, Path], dict]) -> dict[str, list[dict]]:
    """`run(directory, tree)` for the `before` tree and this checkout, `rounds` times, alternating
    which goes first; each row printed as it comes. The rows by tree ("before", "after")."""
    trees = {"before": Path(before).resolve(), "after": REPO}
    root = Path(tempfile.mkdtemp(prefix=prefix))
    rows: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        for r in range(rounds):
            for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                row = run(root / f"{name}-{r}", trees[name])
                rows[name].append(row)
                print(json.dumps({"setup": name, "round": r, **row}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.follower_cpu")
    ap.add_argument("--before", required=True, help="the other code tree (Cython twins built)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--acks", default="1", choices=("1", "all"),
                    help="the producer's acks in the concurrent measurement (catch-up is always acks=1)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="messages/s of the concurrent measurement (default: unthrottled); a fixed rate "
                         "keeps the load the same whatever else runs on the machine")
    ap.add_argument("--linger-ms", type=int, default=5, help="the paced producer's linger.ms (smaller: smaller batches)")
    args = ap.parse_args(argv)
    rows = paired_rounds(args.before, args.rounds, "kafkafast-follower-cpu-", lambda root, tree: one_round(
        root, tree, args.duration, args.acks, args.rate, args.linger_ms))
    for name, rs in rows.items():
        print(f"{name}: " + "; ".join(
            f"{what} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for what, v in (
                ("catch-up follower CPU-s/GB", [y for x in rs for y in x["catch_up_cpu_s_per_gb"]]),
                ("concurrent follower CPU-s/GB", [y for x in rs for y in x["concurrent_follower_cpu_s_per_gb"]]),
                ("concurrent leader CPU-s/GB", [x["concurrent_leader_cpu_s_per_gb"] for x in rs]),
                ("concurrent follower read+write calls/MB", [y for x in rs for y in x["concurrent_follower_io_calls_per_mb"]]),
                ("concurrent leader read+write calls/MB", [x["concurrent_leader_io_calls_per_mb"] for x in rs]),
                ("concurrent MB/s", [x["concurrent_mb_per_s"] for x in rs]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
