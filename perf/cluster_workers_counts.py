"""Counted work of a `--workers 2` RF3 cluster per GB of acks=all produce, this tree against
another: every worker profiled (KAFKAFAST_PROFILE, cProfile call counts), the brokers' CPU.

    python -m perf.cluster_workers_counts --before TREE [--loads 2] [--count 200000]

Two clusters of three ZooKeeper-mode brokers with `--workers 2` (topic of 6 partitions, RF 3,
min.insync.replicas=2), up for the whole run: this tree and `--before`. Loads of `--count`
1 KiB records (librdkafka's `rdkafka_performance`, acks=all) alternate between them. Per GB:
the calls of the functions named in `COUNTED` summed over all workers of a cluster (counted
from the clusters' start to their stop, so start-up is in them too: the same for both), and
the CPU-s of all broker processes during the loads. Prints one JSON line per load, then one
per cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import pstats
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from perf import rdkafka_tools
from perf.cluster import SIZE, create_topic, three_brokers
from perf.cluster_workers import per_process_cpu

TOPIC = "w2"
# a follower Fetch at the leader (only sync functions: cProfile counts a coroutine's every resumption
# as a call): the requests, the passes over their partitions (general, lean), the partitions
# passed over as quiet (owner or not), those given the full pass (`on_replica_fetch`), the lean
# path's partitions, the pokes of an owner
COUNTED = {"Fetch requests": ("handlers/fetch.py", "follower_fetch"),  # (called for every Fetch; sync: once)
           "general passes": ("handlers/fetch.py", "_read_all"),
           "lean passes": ("handlers/fetch.py", "_lean_pass"),
           "quiet checks": ("broker/replica_manager.py", "quiet_follower_partition"),
           "quiet checks in a non-owner": ("broker/replica_manager.py", "_quiet_elsewhere"),
           "full passes (on_replica_fetch)": ("broker/replica_manager.py", "on_replica_fetch"),
           "lean partitions": ("broker/replica_manager.py", "steady_follower_fetch"),
           "wake_owner": ("runtime/placement.py", "wake_owner"),
           "owner pokes": ("runtime/placement.py", "poke")}


def calls(profile_dir: Path) -> dict[str, int]:
    out = dict.fromkeys(COUNTED, 0)
    wanted = {v: k for k, v in COUNTED.items()}
    for f in profile_dir.glob("*.prof"):
        for (path, _, name), row in pstats.Stats(str(f)).stats.items():  # type: ignore[attr-defined]
            key = wanted.get(("/".join(Path(path).parts[-2:]), name))
            if key is not None:
                out[key] += row[1]  # (primitive calls, total calls, ...)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster_workers_counts")
    ap.add_argument("--before", type=Path, required=True, help="another code tree (its twins built)")
    ap.add_argument("--loads", type=int, default=2, help="loads per cluster")
    ap.add_argument("--count", type=int, default=200_000, help="records per load")
    args = ap.parse_args(argv)
    binary = rdkafka_tools.setup(None)
    setups = {"w2": None, "w2-before": args.before}
    gb = dict.fromkeys(setups, 0.0)
    cpu = dict.fromkeys(setups, 0.0)
    with tempfile.TemporaryDirectory(prefix="cwc-") as tmp:
        dirs = {name: Path(tmp) / f"prof-{name}" for name in setups}
        with ExitStack() as stack:
            clusters = {}
            for name, tree in setups.items():
                dirs[name].mkdir()
                os.environ["KAFKAFAST_PROFILE"] = str(dirs[name])  # (the brokers inherit it)
                clusters[name] = stack.enter_context(three_brokers(Path(tmp) / name, 2, tree=tree))
                create_topic(",".join(b.bootstrap for b in clusters[name]), TOPIC, 3)
            os.environ.pop("KAFKAFAST_PROFILE")
            names = list(setups)
            for n in range(args.loads):
                for name in names[n % 2:] + names[:n % 2]:
                    brokers = clusters[name]
                    before = per_process_cpu(brokers)
                    r = rdkafka_tools.produce(binary, ",".join(b.bootstrap for b in brokers), TOPIC, size=SIZE,
                                              acks="all", count=args.count)
                    time.sleep(0.5)  # the followers' last fetches
                    after = per_process_cpu(brokers)
                    g = r["delivered"] * SIZE / 1e9
                    used = sum(after[k] - before.get(k, 0.0) for k in after)
                    gb[name] += g
                    cpu[name] += used
                    print(json.dumps({"load": n, "setup": name, "msgs_per_s": r["msgs_per_s"], "errors": r["errors"],
                                      "cpu_s_per_gb": round(used / g, 3)}), flush=True)
        for name in setups:  # (stopped: every worker wrote its profile)
            counted = calls(dirs[name])
            print(json.dumps({"setup": name, "gb": round(gb[name], 3), "cpu_s_per_gb": round(cpu[name] / gb[name], 3),
                              "calls_per_gb": {k: round(v / gb[name]) for k, v in counted.items()}}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
