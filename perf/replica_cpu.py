"""Where a replica's CPU goes, per GB: the single node (`--workers 0`, acks=1) beside three
`--workers 0` brokers (ZooKeeper mode, replication factor 3, acks=1 and acks=all), each
broker sampled by Linux `perf record` (CPU clock, 999 Hz) for the whole measured load, its
samples sorted into what the data path does (the kernel's socket-read and page-cache copies,
CRC32C, the leader's record walk, the Python interpreter, uvloop, ...). Two code trees
compared in one run, trees alternated each round (issue 25's "CPU per GB per replica").

    python -m perf.replica_cpu --before /path/to/other/tree [--rounds 2] [--out DIR]

Load: `rdkafka_performance` unthrottled (`perf.rdkafka_tools.produce`: 1 KiB records,
linger 5 ms, batch.size 1 MiB, 5 in flight), 6 partitions, `perf.cluster.TABLE_SETTINGS`, a
50,000-message warm-up, then 1,000,000 messages (single node) or 700,000 (each cluster load);
a fresh node and a fresh cluster per tree and round. Reported per broker and per GB produced
(each RF3 broker stores all of it: per replica), the median of the rounds: milliseconds of
samples by part, their total and the CPU clock's. Samples count work done, so they compare
across rounds that the machine's other load slows; the totals still move with throughput
(fewer bytes per follower round cost more per GB). Needs `perf` (linux-perf).
"""
from __future__ import annotations

import argparse
import collections
import json
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from perf import cluster, rdkafka_tools
from perf.brokers import REPO, Kafkafast

SINGLE_COUNT, CLUSTER_COUNT, WARMUP = 1_000_000, 700_000, 50_000
# (part, test on perf's dso and symbol): the first that matches takes a sample
PARTS = [("kernel: socket read copy", lambda dso, sym: sym == "_copy_to_iter"),
         ("kernel: page cache write copy", lambda dso, sym: sym == "copy_folio_from_iter_atomic"),
         ("kernel: other", lambda dso, sym: "kernel" in dso),
         ("CRC32C", lambda dso, sym: "crc32c" in dso),
         ("record walk (leader)", lambda dso, sym: "stream_feed" in sym or "whole_record" in sym),
         ("records twin: other", lambda dso, sym: dso.startswith("records")),
         ("Python interpreter", lambda dso, sym: dso.startswith("libpython")),
         ("uvloop", lambda dso, sym: dso.startswith("loop")),
         ("other", lambda dso, sym: True)]
SETUPS = ["single acks=1", "RF3 acks=1", "RF3 acks=all"]


def _load(binary: Path, brokers: list[Kafkafast], acks: str, count: int, data: Path) -> dict:
    boot = ",".join(b.bootstrap for b in brokers)
    rdkafka_tools.produce(binary, boot, "bench", size=cluster.SIZE, acks=acks, count=WARMUP)
    recorders = [subprocess.Popen(["perf", "record", "-F", "999", "-o", str(data.with_suffix(f".{i}.data")),
                                   "-p", ",".join(map(str, b.pids()))],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i, b in enumerate(brokers)]
    time.sleep(0.3)
    before = [b.cpu_seconds() for b in brokers]
    r = rdkafka_tools.produce(binary, boot, "bench", size=cluster.SIZE, acks=acks, count=count)
    after = [b.cpu_seconds() for b in brokers]
    for p in recorders:
        p.send_signal(signal.SIGINT)
    for p in recorders:
        p.wait()
    gb = count * cluster.SIZE / 1e9
    return {"gb": gb, "msgs_per_s": float(r["msgs_per_s"]), "cpu_per_gb": [(y - x) / gb for x, y in zip(before, after)],
            "files": [str(data.with_suffix(f".{i}.data")) for i in range(len(brokers))]}


def _parts(data_file: str) -> collections.Counter:
    out = subprocess.run(["perf", "report", "-i", data_file, "--no-children", "--sort", "dso,sym",
                          "-F", "sample,dso,sym", "--stdio"], capture_output=True, text=True).stdout
    parts: collections.Counter = collections.Counter()
    for line in out.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        n, dso = int(fields[0]), fields[1]
        sym = fields[2].split("] ", 1)[-1].strip() if len(fields) > 2 else ""
        parts[next(name for name, test in PARTS if test(dso, sym))] += n
    return parts


def per_gb(run: dict) -> dict[str, float]:
    """Milliseconds (samples at 999 Hz) per GB per broker, by part, with the totals."""
    total: collections.Counter = collections.Counter()
    for f in run["files"]:
        total.update(_parts(f))
    n = len(run["files"])
    row = {k: v / run["gb"] / n for k, v in total.items()}
    row["total (samples)"] = sum(total.values()) / run["gb"] / n
    row["total (CPU clock)"] = 1000 * sum(run["cpu_per_gb"]) / n
    row["msg/s (k)"] = run["msgs_per_s"] / 1000
    return row


def table(runs: list[dict]) -> str:
    cols = [(s, t) for s in SETUPS for t in ("before", "after")]
    rows = collections.defaultdict(list)
    for run in runs:
        rows[(run["setup"], run["tree"])].append(per_gb(run))
    names = [p[0] for p in PARTS] + ["total (samples)", "total (CPU clock)", "msg/s (k)"]
    lines = ["| ms per GB per broker, median | " + " | ".join(f"{s}, {t}" for s, t in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(
            f"{statistics.median(r.get(name, 0.0) for r in rows[c]):.0f}" if rows[c] else "-" for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.replica_cpu")
    ap.add_argument("--before", type=Path, required=True, help="the other code tree (twins built)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="keep perf's data and the runs here")
    args = ap.parse_args(argv)
    binary = rdkafka_tools.setup(None)
    trees = {"before": args.before.resolve(), "after": REPO}
    root = Path(tempfile.mkdtemp(prefix="replica-cpu-"))
    out = args.out or root / "perf"
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for rnd in range(args.rounds):
        for name in ("before", "after") if rnd % 2 == 0 else ("after", "before"):
            tree = trees[name]
            single = Kafkafast(root / f"single-{rnd}-{name}", 0, dict(cluster.TABLE_SETTINGS), tree=tree)
            single.start(timeout=60)
            try:
                cluster.create_topic(single.bootstrap, "bench", 1)
                runs.append({"tree": name, "round": rnd, "setup": "single acks=1",
                             **_load(binary, [single], "1", SINGLE_COUNT, out / f"{name}-single-{rnd}")})
            finally:
                single.stop()
            with cluster.three_brokers(root / f"cluster-{rnd}-{name}", 0, cluster.TABLE_SETTINGS, tree=tree) as bs:
                cluster.create_topic(bs[0].bootstrap, "bench", 3)
                time.sleep(2)
                for acks in ("1", "all"):
                    runs.append({"tree": name, "round": rnd, "setup": f"RF3 acks={acks}",
                                 **_load(binary, bs, acks, CLUSTER_COUNT, out / f"{name}-rf3-acks{acks}-{rnd}")})
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "files"}), flush=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
