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

    python -m perf.cluster --table [--quick | --rounds 4 --duration 8] [--rdkafka-src DIR] [--note "..."]

issue 25's table in one run: a single node (`--workers 0`), three brokers (`--workers 0`) and
three brokers with `--workers 2` all up for the whole run, one topic of 6
partitions (RF 3, min.insync.replicas=2) on each. Every round runs every throughput load
(single acks=1, RF3 acks=all, RF3 acks=1, RF3 acks=all with workers) on its setup with both
load drivers, librdkafka's `rdkafka_performance` (built from source on first use by
`perf.rdkafka_tools`) and the confluent-kafka harness (`perf.load`), then produce->ack latency
at 50% of that round's RF3 acks=all throughput on the cluster (acks=all) and on the single
node (acks=1); the setups' order rotates round by round and the drivers' order alternates.
The issue's ratios are the medians of the rounds' paired ratios, with their ranges. Writes
`perf/results/cluster_table.json` and `.png` and replaces its section of
`perf/results/cluster.md`. `--quick`: 3 rounds of 2 s loads (under 4 minutes); the default,
4 rounds of 8 s, about 10 minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from kafkafast.cluster.local import ZooKeeperServer
from perf import rdkafka_tools
from perf.brokers import Kafkafast, free_port

SIZE = 1024
PARTITIONS = 6
TABLE_TOPIC = "bench"
TABLE_BEGIN = "<!-- perf.cluster --table: begin -->"
TABLE_END = "<!-- perf.cluster --table: end -->"


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
                  tree: Path | None = None, metrics_ports: list[int] | None = None) -> Iterator[list[Kafkafast]]:
    """ZooKeeper and brokers 1-3 (from `tree`, default this checkout), registered; stopped after.
    `metrics_ports`: brokers 1-3 serve /metrics on these."""
    zk = ZooKeeperServer(root / "zookeeper", free_port()).start()
    brokers = [Kafkafast(root / f"broker-{i}", workers, {
        "broker.id": str(i), "zookeeper.connect": f"{zk.connect}/kafka", "offsets.topic.replication.factor": "3",
        "log.cleaner.enable": "false", **(settings or {}),
        **({"metrics.port": str(metrics_ports[i - 1])} if metrics_ports else {})}, tree=tree) for i in (1, 2, 3)]
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


# ---- issue 25's table (`--table`): every row in one run, with two load drivers ----------
DRIVERS = ("rdkafka_performance", "confluent-kafka")
SETUP_LABELS = {"single": "single node, --workers 0", "cluster": "3 brokers, --workers 0",
                "cluster-w2": "3 brokers, --workers 2"}
THROUGHPUT_LOADS = (("single", "1"), ("cluster", "all"), ("cluster", "1"), ("cluster-w2", "all"))
LATENCY_LOADS = (("cluster", "all"), ("single", "1"))
# Every setup keeps its logs, and so its page cache, bounded over a long run (the same settings
# everywhere), to well under the ~10 GB this VM's page cache can grow into at full speed: beyond
# about 12 GB of 24 in use, the page-cache copy of every `pwrite` took 3-6x as long (perf:
# `copy_folio_from_iter_atomic` 60% of a single node's samples instead of 11%; touching the memory
# beforehand did not help) and every setup's CPU per GB doubled, in whichever round the cache
# reached it (the second, in every run). Kafka's 10 s retention check and 60 s delay before a
# deleted segment goes let seven brokers' caches grow past it; here retention looks every second
# and its segments go a second later (perf/results/cluster.md, "The page cache's ceiling").
TABLE_SETTINGS = {"log.segment.bytes": str(64 << 20), "log.retention.bytes": str(128 << 20),
                  "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "1000"}
# issue 25's rows: (label, "today" as the issue states it, goal)
ISSUE_ROWS = {
    "cpu": ("broker CPU-s per GB per replica, RF3 acks=all (all three brokers ÷ 3) vs single node `--workers 0`",
            "1.87 vs 1.09 (1.7x)", "≤ 1.15x"),
    "tp_all": ("RF3 acks=all produce throughput ÷ single-node acks=1", "0.33 (0.27–0.56)", "≥ 0.6"),
    "tp_1": ("RF3 acks=1 ÷ single-node acks=1", "0.69", "≥ 0.9"),
    "p99": ("produce→ack p99 at 50% of the RF3 acks=all maximum, vs single node acks=1 at the same rate",
            "249 vs 40 ms (6.2x)", "≤ 3x"),
    "w2_tp": ("cluster brokers with `--workers 2`: RF3 acks=all vs `--workers 0` cluster, throughput",
              "not measured", "≥ 1.0x"),
    "w2_cpu": ("cluster brokers with `--workers 2`: RF3 acks=all vs `--workers 0` cluster, CPU/GB",
               "not measured", "≤ 1.15x"),
}


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)  # load generators that ended (brokers still run)
    return r.ru_utime + r.ru_stime


def dirty_mb() -> float:
    """The page cache still to be written (Dirty + Writeback in /proc/meminfo), MB."""
    kb = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith(("Dirty:", "Writeback:")):
                kb += int(line.split()[1])
    return kb / 1024


def settle_disk() -> tuple[float, float]:
    """Writes out what earlier loads left in the page cache (`sync`), so that a load starts
    with an idle disk, as every setup's loads alike: (MB that were left, seconds it took)."""
    left, t0 = dirty_mb(), time.perf_counter()
    os.sync()
    return left, time.perf_counter() - t0


def table_load(driver: str, binary: Path, brokers: list[Kafkafast], acks: str, seconds: float,
               warmup_s: float, rate: float = 0.0, count_rate: float = 0.0) -> dict:
    """One load on one setup: unthrottled (rate 0) or at `rate` msg/s for latency, started on
    a settled disk (`settle_disk`: otherwise the pages the previous load, another setup's,
    left dirty are written during this one, and its tail measures that). Broker CPU
    over the whole load. rdkafka_performance sends a count, not for a time: `count_rate` x
    `seconds` messages (`count_rate`: the rate it reached on this load last time, unthrottled
    or paced at `rate`: its pacing waits after every message, so it may fall short of `rate`)."""
    settled_mb, settle_s = settle_disk()
    bootstrap = ",".join(b.bootstrap for b in brokers)
    cpu0, client0, t0 = sum(b.cpu_seconds() for b in brokers), _child_cpu(), time.perf_counter()
    if driver == "rdkafka_performance":
        reach = min(rate, count_rate) if rate else count_rate
        count = int(reach * (seconds + warmup_s)) if rate else int(reach * seconds)
        r = rdkafka_tools.produce(binary, bootstrap, TABLE_TOPIC, size=SIZE, acks=acks, count=max(count, 1000),
                                  rate=rate, skip=int(reach * warmup_s))
        moved, mps = r["delivered"] * SIZE, float(r["msgs_per_s"])
    else:
        a = {"bootstrap": bootstrap, "topic": TABLE_TOPIC, "size": SIZE, "acks": acks, "warmup_s": warmup_s,
             "duration_s": seconds}
        r = load("latency", {**a, "rate": rate}) if rate else load("produce", {**a, "round_robin": PARTITIONS})
        r.pop("sample_ms", None)
        moved = r["acked"] * SIZE + r.get("warmup_bytes", 0) if not rate else r["acked"] * SIZE
        mps = r["acked"] / r["seconds"]
    wall = time.perf_counter() - t0
    cpu = sum(b.cpu_seconds() for b in brokers) - cpu0
    return {"msgs_per_s": mps, "broker_cpu_s_per_gb": cpu / (moved / 1e9) if moved else float("nan"),
            "p50_ms": r.get("p50_ms"), "p99_ms": r.get("p99_ms"), "rate": rate, "errors": r["errors"],
            "client_busy": (_child_cpu() - client0) / wall, "wall_s": wall, "settled_mb": settled_mb,
            "settle_s": settle_s}


def _stat(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}


def table_ratios(runs: dict, driver: str) -> dict:
    """The issue's rows for one driver: per-round paired ratios (median, range) and medians."""
    def tp(setup: str, acks: str) -> list[dict]:
        return runs[f"{driver} | throughput | {setup} acks={acks}"]

    def lat(setup: str, acks: str) -> list[dict]:
        return runs[f"{driver} | latency | {setup} acks={acks}"]

    single, rf3, rf3_1, w2 = tp("single", "1"), tp("cluster", "all"), tp("cluster", "1"), tp("cluster-w2", "all")
    l_rf3, l_single = lat("cluster", "all"), lat("single", "1")

    def pair(xs: list[dict], ys: list[dict], key: str, scale: float = 1.0) -> dict:
        return _stat([x[key] * scale / y[key] for x, y in zip(xs, ys)])

    return {
        "cpu": {"a": _stat([r["broker_cpu_s_per_gb"] / 3 for r in rf3]),
                "b": _stat([r["broker_cpu_s_per_gb"] for r in single]),
                "ratio": pair(rf3, single, "broker_cpu_s_per_gb", 1 / 3)},
        "tp_all": {"ratio": pair(rf3, single, "msgs_per_s")},
        "tp_1": {"ratio": pair(rf3_1, single, "msgs_per_s")},
        "p99": {"a": _stat([r["p99_ms"] for r in l_rf3]), "b": _stat([r["p99_ms"] for r in l_single]),
                "ratio": pair(l_rf3, l_single, "p99_ms"), "rate": _stat([r["rate"] for r in l_rf3])},
        "w2_tp": {"ratio": pair(w2, rf3, "msgs_per_s")},
        "w2_cpu": {"a": _stat([r["broker_cpu_s_per_gb"] / 3 for r in w2]),
                   "b": _stat([r["broker_cpu_s_per_gb"] / 3 for r in rf3]),
                   "ratio": pair(w2, rf3, "broker_cpu_s_per_gb")},
    }


def _rng(s: dict, fmt: str = ".2f") -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def _cell(key: str, row: dict) -> str:
    if key in ("cpu", "p99", "w2_cpu"):
        fmt = ".0f" if key == "p99" else ".2f"
        unit = " ms" if key == "p99" else ""
        r = row["ratio"]
        return (f"{row['a']['median']:{fmt}} vs {row['b']['median']:{fmt}}{unit}: {r['median']:.2f}x "
                f"({r['min']:.2f}–{r['max']:.2f})")
    return _rng(row["ratio"])


def table_markdown(res: dict) -> str:
    lines = [TABLE_BEGIN, "## Issue 25's table: replication factor 3 vs a single node (`perf.cluster --table`)", "",
             f"Command: `{res['command']}` ({res['wall_s']:.0f} s, {res['when']}). "
             f"{res['rounds']} rounds; in each, every load ran on every setup with both load drivers, the "
             "setups' order rotated round by round and the drivers' order alternated; all setups "
             "(a single node with `--workers 0`, three ZooKeeper-mode brokers with `--workers 0`, three with "
             "`--workers 2`) ran for the whole run. A ratio is the median of the rounds' paired ratios (range "
             f"in brackets). {SIZE}-byte records, {PARTITIONS} partitions, replication factor 3 with "
             "min.insync.replicas=2 (the single node: RF 1), linger.ms=5, batch.size=1 MiB, 5 requests in "
             f"flight, no idempotence; {res['seconds']:g} s per load ({res['warmup_s']:g} s warm-up first), "
             "each started on a settled disk (`sync` first: what the previous load left in the page cache, "
             "another setup's, is not written during this one)." if res.get("settled") else
             f"flight, no idempotence; {res['seconds']:g} s per load ({res['warmup_s']:g} s warm-up first).", "",
             f"Machine: {res['machine']['cpu']}, {res['machine']['cpus']} CPUs, load average "
             f"{res['machine']['loadavg_start']} at the start, {res['machine']['loadavg_end']} at the end. "
             f"{res['note']}", "",
             "- **rdkafka_performance**: librdkafka's `examples/rdkafka_performance` built from source "
             f"({res['rdkafka']['source']}) by `perf/rdkafka_tools.py`; `-P -l -A FILE`: throughput from its "
             "summary line (delivered msgs/s from its start to the last delivery; it sends a count, sized "
             "from its previous run's rate on the same load to last about the load's seconds), produce->ack "
             "latency "
             "percentiles from its per-message latency file (`-l` puts the send time in each payload, the "
             "delivery report subtracts it), the first warm-up seconds' messages left out. Its pacing "
             "(`-r`) polls for the gap after every message, so on this shared machine it may reach less than "
             "the rate asked: the msgs/s column of the latency loads below is the rate it reached (it asks both "
             "setups for the same rate); the confluent-kafka harness keeps the rate.",
             "  It is built on first use (about a minute of CPU) and kept in ~/.cache/kafkafast-perf/; "
             "`python -m perf.rdkafka_tools [--rdkafka-src DIR]` builds it alone, `--rdkafka-src DIR` here "
             "builds it from another librdkafka source tree.",
             "- **confluent-kafka**: the Python harness (`perf/load.py` produce and latency, confluent-kafka "
             "on librdkafka), partitions round-robin.",
             "- Broker CPU: user+sys of every process of the setup over the load, per GB acknowledged "
             "(warm-up included on both sides); \"per replica\" divides the three brokers' sum by 3. The "
             "single node's figure is its acks=1 load (with RF 1 acks=all completes at the same append).",
             "- Latency rate: 50% of the RF3 acks=all throughput the same driver measured earlier in the same "
             "round; the single node runs at that same rate.", "",
             f"![issue 25's ratios]({res['chart']})", "",
             "| | today (issue text) | rdkafka_performance (this run) | confluent-kafka (this run) | goal |",
             "|---|---|---|---|---|"]
    for key, (label, today, goal) in ISSUE_ROWS.items():
        cells = [_cell(key, res["table"][d][key]) for d in DRIVERS]
        lines.append(f"| {label} | {today} | " + " | ".join(cells) + f" | {goal} |")
    reached = {load: statistics.median(r["msgs_per_s"] for r in res["runs"][f"rdkafka_performance | latency | "
                                                                               f"{load[0]} acks={load[1]}"])
               for load in LATENCY_LOADS}
    asked = statistics.median(r["rate"] for r in res["runs"]["rdkafka_performance | latency | cluster acks=all"])
    lines += ["", f"The p99 row's rdkafka_performance column is at the rate its pacing reached: "
              f"{reached[('cluster', 'all')]:,.0f} msg/s on the cluster and {reached[('single', '1')]:,.0f} on the "
              f"single node (medians) of the {asked:,.0f} asked; the confluent-kafka column is at the rate asked.",
              "", "Every load, median (min–max) over the rounds:", "",
              "| driver | load | setup | msgs/s | broker CPU-s/GB | p50 ms | p99 ms | client busy | errors |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for key, rs in res["runs"].items():
        driver, kind, setup = key.split(" | ")
        s_name, acks = setup.rsplit(" ", 1)
        what = f"{SETUP_LABELS[s_name]}, {acks}"
        if kind == "latency":
            what += f" at {statistics.median(r['rate'] for r in rs):,.0f} msg/s asked"
        cpu = _rng(_stat([r["broker_cpu_s_per_gb"] for r in rs])) if kind == "throughput" else "–"
        p50 = _rng(_stat([r["p50_ms"] for r in rs]), ".1f") if kind == "latency" else "–"
        p99 = _rng(_stat([r["p99_ms"] for r in rs]), ".1f") if kind == "latency" else "–"
        lines.append(f"| {driver} | {kind} | {what} | {_rng(_stat([r['msgs_per_s'] for r in rs]), ',.0f')} | "
                     f"{cpu} | {p50} | {p99} | {statistics.median(r['client_busy'] for r in rs):.2f} | "
                     f"{sum(r['errors'] for r in rs)} |")
    return "\n".join(lines + ["", TABLE_END]) + "\n"


def table_chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(ISSUE_ROWS)
    names = ["CPU/GB per replica\nRF3 all ÷ single", "throughput\nRF3 all ÷ single 1",
             "throughput\nRF3 1 ÷ single 1", "p99 at 50%\nRF3 all ÷ single 1\n(rdkafka_perf.: rate reached)",
             "throughput\n2 workers ÷ 0", "CPU/GB\n2 workers ÷ 0"]
    goals = [1.15, 0.6, 0.9, 3.0, 1.0, 1.15]
    today = [1.7, 0.33, 0.69, 6.2, None, None]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    w = 0.3
    for i, d in enumerate(DRIVERS):
        rows = [res["table"][d][k]["ratio"] for k in keys]
        med = [r["median"] for r in rows]
        err = [[m - r["min"] for m, r in zip(med, rows)], [r["max"] - m for m, r in zip(med, rows)]]
        ax.bar([x + (i - 0.5) * w for x in range(len(keys))], med, w, yerr=err, capsize=3, label=f"{d} (this run)")
    ax.scatter(range(len(keys)), goals, marker="_", s=900, color="black", zorder=3, label="goal")
    ax.scatter([x for x, t in enumerate(today) if t], [t for t in today if t], marker="x", color="red", zorder=3,
               label="today (issue text)")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_yscale("log")
    ax.set_yticks([0.25, 0.5, 1, 2, 4, 8], ["0.25", "0.5", "1", "2", "4", "8"])
    ax.minorticks_off()
    ax.set_ylabel("ratio (median of rounds, min–max bars)")
    ax.set_title(f"issue 25: RF3 cluster vs single node, 1 KiB records ({res['rounds']} rounds, shared 2-core machine)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _machine() -> dict:
    cpu = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cpus": os.cpu_count(), "loadavg_start": " ".join(f"{x:.1f}" for x in os.getloadavg())}


def run_table(args: argparse.Namespace) -> int:
    started = time.time()
    seconds, warmup_s, rounds, calib = (2.0, 0.5, 3, 20000) if args.quick else (args.duration, 1.0, args.rounds, 50000)
    machine = _machine()
    binary = rdkafka_tools.setup(args.rdkafka_src)
    runs: dict[str, list[dict]] = {}
    root = Path(tempfile.mkdtemp(prefix="kafkafast-cluster-table-"))
    try:
        with ExitStack() as stack:
            single = Kafkafast(root / "single", 0, TABLE_SETTINGS)
            stack.callback(single.stop)
            single.start()
            setups = {"single": [single],
                      "cluster": stack.enter_context(three_brokers(root / "cluster", 0, TABLE_SETTINGS)),
                      "cluster-w2": stack.enter_context(three_brokers(root / "cluster-w2", 2, TABLE_SETTINGS))}
            for name, brokers in setups.items():
                create_topic(",".join(b.bootstrap for b in brokers), TABLE_TOPIC, len(brokers))
            count_rate = {}
            for setup, acks in THROUGHPUT_LOADS:  # warm-up, and the rate that sizes rdkafka_performance's count
                bootstrap = ",".join(b.bootstrap for b in setups[setup])
                r = rdkafka_tools.produce(binary, bootstrap, TABLE_TOPIC, size=SIZE, acks=acks, count=calib)
                count_rate[(setup, acks)] = r["msgs_per_s"]
                print(f"warm-up {setup} acks={acks}: {r['msgs_per_s']:,} msg/s", flush=True)
            paced = 0.5 * count_rate[("cluster", "all")]  # how close rdkafka_performance -r comes to the rate
            r = rdkafka_tools.produce(binary, ",".join(b.bootstrap for b in setups["single"]), TABLE_TOPIC,
                                      size=SIZE, acks="1", count=max(1000, int(paced * warmup_s)), rate=paced)
            paced_reach = {load: max(1.2 * r["msgs_per_s"], 500.0) for load in LATENCY_LOADS}
            print(f"warm-up: rdkafka_performance -r {paced:,.0f} reached {r['msgs_per_s']:,} msg/s", flush=True)
            for rnd in range(rounds):
                drivers = DRIVERS if rnd % 2 == 0 else DRIVERS[::-1]
                turn = rnd % len(THROUGHPUT_LOADS)
                order = THROUGHPUT_LOADS[turn:] + THROUGHPUT_LOADS[:turn]
                for setup, acks in order:
                    for d in drivers:
                        r = table_load(d, binary, setups[setup], acks, seconds, warmup_s,
                                       count_rate=count_rate[(setup, acks)])
                        if d == "rdkafka_performance":  # the next run's count from this run's rate
                            count_rate[(setup, acks)] = r["msgs_per_s"]
                        runs.setdefault(f"{d} | throughput | {setup} acks={acks}", []).append(r)
                        print(f"round {rnd + 1}/{rounds} {d} {setup} acks={acks}: {r['msgs_per_s']:,.0f} msg/s, "
                              f"{r['broker_cpu_s_per_gb']:.2f} CPU-s/GB", flush=True)
                for d in drivers:
                    rate = 0.5 * runs[f"{d} | throughput | cluster acks=all"][-1]["msgs_per_s"]
                    for setup, acks in (LATENCY_LOADS if rnd % 2 == 0 else LATENCY_LOADS[::-1]):
                        r = table_load(d, binary, setups[setup], acks, seconds, warmup_s, rate=rate,
                                       count_rate=paced_reach[(setup, acks)])
                        if d == "rdkafka_performance":  # the rate its pacing reaches varies with the machine
                            paced_reach[(setup, acks)] = max(1.2 * r["msgs_per_s"], 500.0)
                        runs.setdefault(f"{d} | latency | {setup} acks={acks}", []).append(r)
                        print(f"round {rnd + 1}/{rounds} {d} {setup} acks={acks} at {rate:,.0f} msg/s "
                              f"(reached {r['msgs_per_s']:,.0f}): p50 {r['p50_ms']:.1f} p99 {r['p99_ms']:.1f} ms",
                              flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    machine["loadavg_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    out = Path(args.out or "perf/results/cluster_table.json")
    cmd = "python -m perf.cluster --table" + (" --quick" if args.quick else
                                              f" --rounds {args.rounds} --duration {args.duration:g}")
    res = {"command": cmd, "wall_s": time.time() - started, "settled": True,
           "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "rounds": rounds, "seconds": seconds,
           "warmup_s": warmup_s, "size": SIZE, "partitions": PARTITIONS, "machine": machine, "note": args.note,
           "rdkafka": {"binary": str(binary), "source": rdkafka_tools.describe_source(args.rdkafka_src)},
           "chart": out.with_suffix(".png").name, "table": {d: table_ratios(runs, d) for d in DRIVERS}, "runs": runs}
    out.write_text(json.dumps(res, indent=1))
    table_chart(res, out.with_suffix(".png"))
    md = out.parent / "cluster.md"
    text = md.read_text() if md.exists() else ""
    section = table_markdown(res)
    if TABLE_BEGIN in text and TABLE_END in text:
        text = text[:text.index(TABLE_BEGIN)] + section + text[text.index(TABLE_END) + len(TABLE_END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    md.write_text(text)
    print(section)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster")
    ap.add_argument("--table", action="store_true",
                    help="issue 25's table: rdkafka_performance and confluent-kafka loads (see above)")
    ap.add_argument("--rounds", type=int, default=4, help="with --table: rounds (setups alternated in each)")
    ap.add_argument("--quick", action="store_true", help="with --table: 3 rounds of short loads (under 4 minutes)")
    ap.add_argument("--rdkafka-src", type=Path, default=None,
                    help="with --table: librdkafka source tree to build rdkafka_performance from (default: Debian's)")
    ap.add_argument("--note", default="", help="with --table: a line about the machine's state for the results")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--workers", type=int, default=0, help="also a cluster of brokers with this many workers")
    ap.add_argument("--forwarding", action="store_true",
                    help="with --workers: also the worker cluster with kafkafast.produce.shared.append.cluster=false")
    ap.add_argument("--out", default=None, help="JSON results (default perf/results/cluster.json, "
                    "with --table perf/results/cluster_table.json; its markdown goes into perf/results/cluster.md)")
    args = ap.parse_args(argv)
    if args.table:
        return run_table(args)
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
    out = Path(args.out or "perf/results/cluster.json")
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
