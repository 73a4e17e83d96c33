"""The first test of a pytest session with a kafka_broker: how long from the start of its
set-up to the first acknowledged produce, fork server start included, and the same for the
test after it (the fork server then ready).

    python -m perf.testing_first_test [--sessions 7] [--out perf/results/testing_first_test.json]

Each session is a fresh `python -m pytest` in an empty directory running one file of two
tests (a user's file: the fixture comes from the installed plugin); each test sets up
`kafka_broker` and produces one record with confluent-kafka (linger.ms=0), waiting for
its acknowledgement. The times are taken in the test file and written to a JSON file.
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
                   # CPU the fork server has used (its start: it idles between forks), and this process
                   "fork_server_cpu_s": cpu_seconds(kafka_broker.proc.server.proc.pid),
                   "pytest_cpu_s": sum(os.times()[:2])}
    with open(os.environ["FIRST_TEST_OUT"], "w") as fh:
        json.dump(TIMES, fh)
'''


def one_session(directory: Path) -> dict:
    (directory / "test_first.py").write_text(USER_FILE)
    out = directory / "times.json"
    env = dict(os.environ, FIRST_TEST_OUT=str(out),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.time()
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_first.py"], cwd=directory,
                   env=env, check=True, capture_output=True, timeout=300)
    times = json.loads(out.read_text())
    times["session_s"] = time.time() - started
    return times


def summary(values: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(values), 3), "min_s": round(min(values), 3),
            "max_s": round(max(values), 3), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=7)
    parser.add_argument("--out", default="perf/results/testing_first_test.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    sessions = []
    with tempfile.TemporaryDirectory(prefix="kafkafast-first-test-") as tmp:
        for i in range(args.sessions):
            directory = Path(tmp) / f"s{i}"
            directory.mkdir()
            sessions.append(one_session(directory))
    results = {
        "command": f"python -m perf.testing_first_test --sessions {args.sessions}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
                   f"{platform.python_version()}, shared with other jobs (1-minute load average "
                   f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after)",
        "first_test_to_first_ack": summary([s["first"]["to_first_ack_s"] for s in sessions]),
        "first_test_set_up": summary([s["first"]["set_up_s"] for s in sessions]),
        "second_test_to_first_ack": summary([s["second"]["to_first_ack_s"] for s in sessions]),
        "fork_server_cpu": summary([s["first"]["fork_server_cpu_s"] for s in sessions]),
        "pytest_cpu_at_first_ack": summary([s["first"]["pytest_cpu_s"] for s in sessions]),
        "whole_session": summary([s["session_s"] for s in sessions]),
        "sessions": sessions,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    rows = [("first test: set-up start to the first acknowledged produce", "first_test_to_first_ack"),
            ("first test: kafka_broker set-up alone", "first_test_set_up"),
            ("second test: set-up start to its acknowledged produce", "second_test_to_first_ack"),
            ("whole pytest session (start to exit, two brokers stopped)", "whole_session"),
            ("CPU time of the fork server's start (its import)", "fork_server_cpu"),
            ("CPU time of the pytest process up to the first acknowledgement", "pytest_cpu_at_first_ack")]
    lines = ["# kafkafast.testing: the first test of a session, to its first acknowledged produce", "",
             f"Command: `{results['command']}`. Machine: {results['machine']}. Each session is a fresh "
             "`python -m pytest` of a user's file of two tests, each setting up `kafka_broker` and producing one "
             "record with confluent-kafka (linger.ms=0) until it is acknowledged.", "",
             "| what | median s | min s | max s | sessions |", "|---|---:|---:|---:|---:|"]
    for label, key in rows:
        s = results[key]
        lines.append(f"| {label} | {s['median_s']} | {s['min_s']} | {s['max_s']} | {s['n']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
