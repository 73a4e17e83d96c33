"""The produce round of librdkafka's test 0174 (do_test_1p_4c_1t_4part) against three kafkafast
brokers: an idempotent confluent-kafka producer (acks=all) sends one record to each of a topic's
4 partitions (replication factor 3, leaders on different brokers) and flushes, round after round;
first alone, then with 4 ShareConsumers of one share group reading the topic (in a process of
their own). Brokers as `perf.librdkafka_share_tests --cluster 3` sets them up.

    python -m perf.share_round_latency [--rounds 1000] [--tree TREE] [--before OTHER_TREE] [--pairs 1]
                                       [--spy DIR | --profile DIR]

Reports per phase: the rounds' p50/p90/p99 (ms), the brokers' CPU seconds per round (all three
brokers' processes), and the brokers' Produce and Fetch request times and event-loop lag (p50/p99
bucket bounds of the phase, from /metrics). The share-consumer phase is measured once the
consumers have received 400 records (the group formed, the share state topic created). `--before`:
a second tree, each pair of runs on fresh clusters, one after the other (`--pairs` of them): on a
shared machine compare CPU per round more than latency. `--spy`: py-spy samples of each broker
for 20 s of the share-consumer phase (where its CPU goes); `--profile`: that phase alone with
the brokers under cProfile (CPU time; slow, call counts are exact).
"""
from __future__ import annotations

import argparse
import multiprocessing
import shutil
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path

from perf import cluster as perf_cluster
from perf.acks_all_latency import time_buckets
from perf.brokers import REPO, Kafkafast, free_port
from perf.cluster import three_brokers
from perf.librdkafka_share_tests import BROKER_SETTINGS, cluster_settings

TOPIC = "rounds"
GROUP = "rounds-share"
QUIET = {"log_level": 3}


def _consumers(bootstrap: str, n: int, stop, received) -> None:
    import threading

    from confluent_kafka import ShareConsumer

    def one() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP, **QUIET})
        c.subscribe([TOPIC])
        while not stop.is_set():
            got = c.poll(0.5)
            if got:
                with received.get_lock():
                    received.value += len(got)
        c.close()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def histogram_summary(before: dict, after: dict) -> str:
    out = []
    for key in sorted(after):
        cum = {le: v - before.get(key, {}).get(le, 0.0) for le, v in after[key].items()}
        bounds = sorted(cum)
        total = cum[bounds[-1]]
        if not total:
            continue
        q = {p: next(b for b in bounds if cum[b] >= p * total) for p in (0.5, 0.99)}
        out.append(f"{key[0] or '-'} {key[1]}: p50 {q[0.5]:g} p99 {q[0.99]:g} (n {total:.0f})")
    return "\n    ".join(out)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def rounds(producer, n: int) -> list[float]:
    lat = []
    for i in range(n):
        t = time.perf_counter()
        for p in range(4):
            producer.produce(TOPIC, value=f"msg{i}-{p}".encode(), partition=p)
        if producer.flush(10) != 0:
            raise RuntimeError("flush left records")
        lat.append((time.perf_counter() - t) * 1000)
    return lat


PROFILED = """import cProfile, runpy, sys, time
p = cProfile.Profile(time.process_time)
out = sys.argv[1]
sys.argv = [sys.argv[0]] + sys.argv[2:]
p.enable()
try:
    runpy.run_module("kafkafast.cli.main", run_name="__main__")
finally:
    p.disable(); p.dump_stats(out)
"""


class ProfiledKafkafast(Kafkafast):
    """A broker under cProfile counting CPU time (not wall time: the machine is shared), its
    profile written to <workdir>/cpu.prof when it stops."""

    def command(self) -> list[str]:
        cmd = super().command()  # [python, -m, kafkafast.cli.main, ...]
        return [cmd[0], "-c", PROFILED, str(self.workdir / "cpu.prof")] + cmd[3:]


def one_cluster(root: Path, tree: Path, n: int, profile: bool = False,
                phases: tuple[str, ...] = ("alone", "4 share consumers"), spy: Path | None = None) -> dict[str, dict]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    ports = [free_port() for _ in range(3)]
    settings = {**BROKER_SETTINGS, **cluster_settings(3), "zookeeper.session.timeout.ms": "30000"}
    if profile:
        perf_cluster.Kafkafast = ProfiledKafkafast
    with three_brokers(root, 0, settings=settings, tree=tree, metrics_ports=ports) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=3)])[TOPIC].result(30)
        for _ in range(150):
            md = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
            if md is not None and md.error is None and len(md.partitions) == 4 and all(
                    p.leader > 0 and len(p.isrs) == 3 for p in md.partitions.values()):
                break
            time.sleep(0.2)
        leaders = sorted(p.leader for p in md.partitions.values())
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
        rounds(producer, 50)  # warm-up: connections, producer id, fetch sessions
        out = {}
        for phase in phases:
            stop = proc = None
            if phase != "alone":
                ctx = multiprocessing.get_context("spawn")
                stop, received = ctx.Event(), ctx.Value("q", 0)
                proc = ctx.Process(target=_consumers, args=(bootstrap, 4, stop, received))
                proc.start()
                deadline = time.monotonic() + 60
                while received.value < 400 and time.monotonic() < deadline:
                    rounds(producer, 20)  # the group forms, the share-partitions start, records flow
                rounds(producer, 100)
            h0, cpu0 = time_buckets(ports), sum(b.cpu_seconds() for b in brokers)
            spies = [] if spy is None or phase == "alone" else [subprocess.Popen(
                ["py-spy", "record", "-p", str(b.proc.pid), "-d", "20", "-r", "200", "-f", "raw", "-o",
                 str(spy / f"broker-{i}.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for i, b in enumerate(brokers, 1)]
            lat = rounds(producer, n)
            for s in spies:
                s.wait()
            cpu = sum(b.cpu_seconds() for b in brokers) - cpu0
            out[phase] = {"lat": lat, "cpu_ms_per_round": cpu * 1000 / n,
                          "times": histogram_summary(h0, time_buckets(ports)), "leaders": leaders}
            if stop is not None:
                stop.set()
                proc.join(30)
        producer.flush(10)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--tree", type=Path, default=REPO)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--spy", type=Path, help="sample the brokers with py-spy for 20 s of the share-consumer "
                    "phase (on-CPU samples, collapsed stacks in this directory)")
    ap.add_argument("--profile", type=Path, help="run the share-consumer phase alone, the brokers under cProfile "
                    "(CPU time); their profiles copied to this directory")
    args = ap.parse_args(argv)
    trees = {"tree": args.tree} if args.before is None else {"before": args.before, "tree": args.tree}
    results: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory(prefix="share-rounds-") as tmp:
        for i in range(args.pairs):
            for name, tree in trees.items():
                root = Path(tmp) / f"{name}-{i}"
                if args.profile:
                    r = one_cluster(root, tree, args.rounds, True, ("4 share consumers",))
                    args.profile.mkdir(parents=True, exist_ok=True)
                    for b in (1, 2, 3):
                        shutil.copy(root / f"broker-{b}" / "cpu.prof", args.profile / f"{name}-{i}-broker-{b}.prof")
                elif args.spy:
                    (args.spy / name).mkdir(parents=True, exist_ok=True)
                    r = one_cluster(root, tree, args.rounds, spy=args.spy / name)
                else:
                    r = one_cluster(root, tree, args.rounds)
                for phase, v in r.items():
                    lat = v["lat"]
                    print(f"{name} [{i}] {phase} (leaders {v['leaders']}): p50 {pct(lat, .5):.1f} p90 "
                          f"{pct(lat, .9):.1f} p99 {pct(lat, .99):.1f} mean {statistics.fmean(lat):.1f} ms, "
                          f"brokers' CPU {v['cpu_ms_per_round']:.2f} ms/round\n    {v['times']}", flush=True)
                    results.setdefault(name, {}).setdefault(phase, []).extend(lat)
    for name, phases in results.items():
        for phase, lat in phases.items():
            print(f"{name} {phase}: p50 {pct(lat, .5):.1f} p90 {pct(lat, .9):.1f} p99 {pct(lat, .99):.1f} ms "
                  f"over {len(lat)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
