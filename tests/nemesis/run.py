"""One nemesis run. `run_in_namespace(...)` (the host side, used by the pytest test and the
matrix) creates the namespace, runs this module inside it and removes it again;
`python -m tests.nemesis.run ...` (inside the namespace) does the run itself:

  1. ZooKeeper and three brokers start; topic `nemesis`: 6 partitions, replication factor 3,
     min.insync.replicas=2 (unclean leader election off, the default);
  2. two producers write about 250 records/s in all; after a warm-up the scenario injects
     its fault(s) and ends them;
  3. healing: the time from the end of the last fault until every broker is registered,
     every partition has 3 in-sync replicas, every partition answers a read from offset 0 and
     has acknowledged a write of the load since the fault ended;
  4. the load runs a few seconds more, stops, and flushes; everything is read back and the
     history checked (`history.py`); the verdict is written as JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.nemesis.cluster import NemesisCluster
from tests.nemesis.history import check
from tests.nemesis.load import LoadProducer, probe_reads, read_back
from tests.nemesis.netns import Namespace
from tests.nemesis.scenarios import SCENARIOS, SHORT, TOPIC, TOPIC_CONFIGS, Nemesis, Timing

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 6
RATE = 250.0
HEAL_TIMEOUT_S = 120.0  # a run not healed by then is reported as such (45 s in the CI timing)


def _broker_log_errors(root: Path) -> dict[str, int]:
    counts = {}
    for log in sorted(root.glob("broker-*.log")):
        text = log.read_text(errors="replace")
        counts[log.stem] = sum(1 for line in text.splitlines() if " ERROR " in line or "Traceback" in line)
    return counts


def _state(cluster: NemesisCluster, topic: str, partition: int) -> dict | None:
    try:
        return cluster.partition_state(topic, partition)
    except Exception:  # ZooKeeper unreachable, or no state yet
        return None


def heal_state(cluster: NemesisCluster, topic: str) -> dict:
    """What healing waits for: every broker registered, every partition's ISR full, every
    partition answering a read from offset 0 (`healed` is all three)."""
    state = {"registered": cluster.registered(),
             "partitions": {p: _state(cluster, topic, p) for p in range(PARTITIONS)}}
    full = (len(state["registered"]) == len(cluster.brokers)
            and all(s and len(s["isr"]) == len(cluster.brokers) for s in state["partitions"].values()))
    state["reads"] = full and probe_reads(cluster.bootstrap, topic, PARTITIONS)
    state["healed"] = bool(full and state["reads"])
    return state


def healed(cluster: NemesisCluster, topic: str) -> bool:
    return heal_state(cluster, topic)["healed"]


def writes_resumed(producers: list[LoadProducer], since: float) -> bool:
    """Every partition has acknowledged a record of the load since `since` (a cluster whose
    replicas are in sync and readable but whose leaders refuse every write has not healed)."""
    written = {a.partition for p in producers for a in list(p.acks) if a.at > since}
    return written >= set(range(PARTITIONS))


def run(scenario: str, acks: str, workers: int, seed: int, timing: Timing, root: Path, warmup_s: float,
        tail_s: float, heal_timeout_s: float = HEAL_TIMEOUT_S) -> dict:
    started = time.monotonic()
    cluster = NemesisCluster(root, workers=workers)
    producers: list[LoadProducer] = []
    try:
        cluster.start()
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2", **TOPIC_CONFIGS.get(scenario, {})})
        setup_s = time.monotonic() - started
        producers = [LoadProducer(f"p{i}", cluster.bootstrap, TOPIC, PARTITIONS, acks, RATE / 2).start()
                     for i in range(2)]
        load_start = time.monotonic()
        nemesis = Nemesis(cluster, timing, random.Random(seed), load_start)
        time.sleep(warmup_s)
        SCENARIOS[scenario](nemesis)
        fault_end = time.monotonic()
        heal_s = None
        while time.monotonic() - fault_end < heal_timeout_s:
            if writes_resumed(producers, fault_end) and healed(cluster, TOPIC):
                heal_s = round(time.monotonic() - fault_end, 1)
                break
            time.sleep(0.5)
        nemesis.note(f"healed after {heal_s} s" if heal_s is not None else
                     f"NOT healed: {heal_state(cluster, TOPIC)}; writes resumed: {writes_resumed(producers, fault_end)}")
        time.sleep(tail_s)
        load_end = time.monotonic()
        unflushed = sum(p.stop(45) for p in producers)
        nemesis.note(f"load stopped; {unflushed} undelivered after the flush")
        if heal_s is not None:  # the flush may have moved leaders again: read from a healed cluster
            deadline = time.monotonic() + 30
            while not healed(cluster, TOPIC) and time.monotonic() < deadline:
                time.sleep(0.5)
        read = read_back(cluster.bootstrap, TOPIC, PARTITIONS)
        acked = [a for p in producers for a in p.acks]
        verdict = check(acked, read, delivery_errors=sum(len(p.errors) for p in producers),
                        load_start=load_start, load_end=load_end)
        return {"scenario": scenario, "acks": acks, "workers": workers, "seed": seed,
                "timing": dataclasses.asdict(timing), "setup_s": round(setup_s, 1),
                "sent": sum(p.sent for p in producers), "unflushed": unflushed,
                "fatal": [f for p in producers for f in p.fatal][:5],
                "healed": heal_s is not None, "heal_s": heal_s, "events": nemesis.events,
                "read_errors": read.errors[:10], "unreadable_from": read.unreadable_from,
                "high_watermarks": read.high_watermarks, "verdict": verdict.as_dict(),
                "broker_log_errors": _broker_log_errors(root), "wall_s": round(time.monotonic() - started, 1)}
    finally:
        for p in producers:
            p.halt()
        cluster.close()


def run_in_namespace(ns: Namespace, scenario: str, acks: str, workers: int, seed: int = 1, *,
                     short: bool = False, timeout: float = 600.0, keep: Path | None = None) -> dict:
    """Runs one scenario inside the (created) namespace `ns`, then SIGKILLs whatever of it
    is still running there and removes the fault rules, whatever happens. The run's files
    (broker and ZooKeeper logs, the verdict) go to a temporary directory removed afterwards
    unless the run failed, did not heal or broke an acks=all guarantee (then the result
    names it under "logs"), or to `keep`."""
    root = Path(tempfile.mkdtemp(prefix="kf-nemesis-")) if keep is None else keep
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # the brokers run as their own uids
    out = root / "verdict.json"
    failed = True
    try:
        cmd = ns.exec_prefix + [sys.executable, "-m", "tests.nemesis.run", "--scenario", scenario, "--acks", acks,
                                "--workers", str(workers), "--seed", str(seed), "--root", str(root),
                                "--out", str(out)] + (["--short"] if short else [])
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"nemesis run {scenario}/acks={acks}/workers={workers} failed ({proc.returncode}):\n"
                               f"{proc.stderr[-4000:]}\nlogs in {root}")
        result = json.loads(out.read_text())
        v = result["verdict"]
        # a run that did not heal, or lost or bent an acks=all record, keeps its logs
        failed = not result["healed"] or (acks == "all" and (v["lost"] or v["unreadable"] or v["duplicates"]
                                                              or v["divergent"] or v["misplaced"]))
        if failed:
            result["logs"] = str(root)
        return result
    finally:
        ns.kill_all()
        ns.heal()
        if keep is None and not failed:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="one nemesis run, inside the namespace (see tests/nemesis)")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    ap.add_argument("--acks", choices=["all", "1"], required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--short", action="store_true", help="the CI timing: shorter faults, a 2-fault mix")
    a = ap.parse_args(argv)
    timing = SHORT if a.short else Timing()
    result = run(a.scenario, a.acks, a.workers, a.seed, timing, a.root,
                 warmup_s=2.0 if a.short else 5.0, tail_s=2.0 if a.short else 5.0,
                 heal_timeout_s=45.0 if a.short else HEAL_TIMEOUT_S)
    a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
