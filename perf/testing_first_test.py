"""The first test of a pytest session with a kafka_broker: how long from the start of its
set-up to the first acknowledged produce, fork server start included, and the same for the
test after it (the fork server then ready).

    python -m perf.testing_first_test [--sessions 7] [--bytecode both|cached|env]
                                      [--out perf/results/testing_first_test.json]

Each session is a fresh `python -m pytest` in an empty directory running one file of two
tests (a user's file: the fixture comes from the installed plugin); each test sets up
`kafka_broker` and produces one record with confluent-kafka (linger.ms=0), waiting for
its acknowledgement. The times are taken in the test file and written to a JSON file,
with the time since the pytest process started and the machine's load average when the
session started.

Python's bytecode cache decides much of a first start (the fork server imports nearly all
of kafkafast): "cached" sessions run as an installed kafkafast does, with every module's
bytecode written by an uncounted first session (into a private PYTHONPYCACHEPREFIX, so the
tree is left alone); "env" sessions run with the environment as it is, which on a machine
with PYTHONDONTWRITEBYTECODE=1 and no __pycache__ in the tree compiles kafkafast's sources
in every session. "both" (the default) alternates the two, so they share the load.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

USER_FILE = '''
import json, os, time
import pytest
from confluent_kafka import Producer

COLLECTED = time.time()
TIMES = {}


def process_started():
    """Wall-clock time at which this pytest process started (from /proc)."""
    with open("/proc/self/stat") as fh:
        ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as fh:
        uptime = float(fh.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


STARTED = process_started()


@pytest.fixture
def set_up_at():
    return time.time()  # requested before kafka_broker: its set-up starts after this


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_one(bootstrap):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    acked = []
    p.produce("first", b"v", on_delivery=lambda err, msg: acked.append(err))
    p.flush(30)
    assert acked == [None]


@pytest.mark.parametrize("name", ["first", "second"])
def test_produce(set_up_at, kafka_broker, name):
    ready = time.time()
    produce_one(kafka_broker.bootstrap_servers)
    TIMES[name] = {"set_up_s": ready - set_up_at, "produce_s": time.time() - ready,
                   "to_first_ack_s": time.time() - set_up_at, "collected_to_set_up_s": set_up_at - COLLECTED,
                   "pytest_start_to_ack_s": time.time() - STARTED,
                   # CPU the fork server has used (its start: it idles between forks), and this process
                   "fork_server_cpu_s": cpu_seconds(kafka_broker.proc.server.proc.pid),
                   "pytest_cpu_s": sum(os.times()[:2])}
    with open(os.environ["FIRST_TEST_OUT"], "w") as fh:
        json.dump(TIMES, fh)
'''


def one_session(directory: Path, pycache: Path | None) -> dict:
    """One pytest session; `pycache`: run with the bytecode cache in that directory (None:
    the environment's own setting)."""
    (directory / "test_first.py").write_text(USER_FILE)
    out = directory / "times.json"
    env = dict(os.environ, FIRST_TEST_OUT=str(out),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    load = os.getloadavg()[0]
    started = time.time()
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_first.py"], cwd=directory,
                   env=env, check=True, capture_output=True, timeout=300)
    times = json.loads(out.read_text())
    times["session_s"] = time.time() - started
    times["load_1min"] = load
    return times


def summary(values: list[float], digits: int = 3) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "n": len(values)}


ROWS = [("first test: set-up start to the first acknowledged produce", "first", "to_first_ack_s"),
        ("first test: kafka_broker set-up alone", "first", "set_up_s"),
        ("pytest process start to the first acknowledged produce", "first", "pytest_start_to_ack_s"),
        ("second test: set-up start to its acknowledged produce", "second", "to_first_ack_s"),
        ("whole pytest session (start to exit, two brokers stopped)", None, "session_s"),
        ("CPU time of the fork server's start (its import)", "first", "fork_server_cpu_s"),
        ("CPU time of the pytest process up to the first acknowledgement", "first", "pytest_cpu_s")]


def env_bytecode() -> str:
    """What the environment's own setting means for kafkafast's bytecode."""
    writes = not os.environ.get("PYTHONDONTWRITEBYTECODE")
    cached = (REPO / "kafkafast" / "__pycache__").is_dir() or bool(os.environ.get("PYTHONPYCACHEPREFIX"))
    if writes:
        return "bytecode written and read as Python does by default"
    return ("PYTHONDONTWRITEBYTECODE=1, " + ("with the bytecode cache the tree already has" if cached else
            "no __pycache__ in the tree: kafkafast's sources are compiled in every session"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=7, help="sessions per bytecode mode")
    parser.add_argument("--bytecode", choices=("both", "cached", "env"), default="both",
                        help="cached: as an installed kafkafast (bytecode warm); env: the environment as it is")
    parser.add_argument("--out", default="perf/results/testing_first_test.json")
    args = parser.parse_args()
    modes = ["cached", "env"] if args.bytecode == "both" else [args.bytecode]
    load_before = os.getloadavg()[0]
    sessions: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="kafkafast-first-test-") as tmp:
        pycache = Path(tmp) / "pycache"
        if "cached" in modes:
            warm_up = Path(tmp) / "warm-up"
            warm_up.mkdir()
            one_session(warm_up, pycache)  # writes the bytecode cache; not counted
        for i in range(args.sessions):
            for mode in modes:
                directory = Path(tmp) / f"{mode}-{i}"
                directory.mkdir()
                sessions[mode].append(one_session(directory, pycache if mode == "cached" else None))
    loads = [s["load_1min"] for runs in sessions.values() for s in runs]
    results = {
        "command": f"python -m perf.testing_first_test --sessions {args.sessions} --bytecode {args.bytecode}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
                   f"{platform.python_version()}, shared with other jobs",
        "load_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2),
                      "at_session_starts": summary(loads, 2)},
        "modes": {},
    }
    for mode, runs in sessions.items():
        results["modes"][mode] = {
            "bytecode": "warm, as an installed kafkafast has it (written by an uncounted first session)"
                        if mode == "cached" else env_bytecode(),
            **{key if test is None else f"{test}.{key}":
               summary([run[key] if test is None else run[test][key] for run in runs]) for _, test, key in ROWS},
            "sessions": runs,
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    load = results["load_1min"]
    lines = ["# kafkafast.testing: the first test of a session, to its first acknowledged produce", "",
             f"Command: `{results['command']}`. Machine: {results['machine']}: 1-minute load average "
             f"{load['before']} before, {load['after']} after, {load['at_session_starts']['median']} median "
             f"({load['at_session_starts']['min']}-{load['at_session_starts']['max']}) when a session started. "
             "Each session is a fresh `python -m pytest` of a user's file of two tests, each setting up "
             "`kafka_broker` and producing one record with confluent-kafka (linger.ms=0) until it is acknowledged."]
    for mode, result in results["modes"].items():
        lines += ["", f"## {mode}: {result['bytecode']}", "",
                  "| what | median s | min s | max s | sessions |", "|---|---:|---:|---:|---:|"]
        for label, test, key in ROWS:
            row = result[key if test is None else f"{test}.{key}"]
            lines.append(f"| {label} | {row['median']} | {row['min']} | {row['max']} | {row['n']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
