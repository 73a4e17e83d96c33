"""librdkafka's share-consumer test series (tests/0170-0190 of its source tree) against kafkafast.

    python -m perf.librdkafka_share_tests --src /tmp/librdkafka [--tests 0170,0171] [--jobs 2]
                                          [--timeout 900] [--out perf/results/librdkafka_share_tests.md]
                                          [--cluster 3]

Not part of the test suite (it needs a librdkafka source tree and takes tens of minutes). Builds
librdkafka's test runner in `--src` if `tests/test-runner` is not there yet (`./configure
--disable-curl --disable-lz4-ext --disable-sasl --disable-gssapi`, `make libs`, `make -C tests
test-runner`: gcc, make, libssl-dev, zlib1g-dev and libzstd-dev, which 0171's zstd sub-test needs),
starts one kafkafast broker (this checkout or `--tree`, one process, Kafka's share-group defaults
but for BROKER_SETTINGS, as librdkafka's CI sets its Kafka brokers up) on a free port of
127.0.0.1, and runs each listed test alone (`TESTS=<number> TEST_KAFKA_VERSION=4.2.0
./test-runner`, full mode: not `-Q`, which skips most sub-tests) with a time bound, `--jobs` of
them at a time (the tests use random topic names, and mostly wait). The runner's configuration
file (bootstrap.servers), logs and stats files, and the broker's log, go to `--scratch`, never
into the source tree. One test number may hold two runner entries (`0173_..._local`, which needs
no broker, and `0173_...`); the table has a row per entry, with the sub-test and assertion of a
failure (a failure ends the runner: the sub-tests after it do not run) or a note from NOTES.

`--cluster N` runs the tests against N kafkafast brokers in ZooKeeper mode instead
(`kafkafast.testing.cluster.KafkaTestCluster`: Debian's ZooKeeper and the brokers on free ports
under `--scratch`/cluster), as librdkafka's CI runs them against trivup's 3-broker KafkaCluster:
every broker with BROKER_SETTINGS and CLUSTER_SETTINGS (replication factor min(N, 3), min ISR
min(N, 2), as trivup sets them). Topics of more than one partition then have leaders on
different brokers. Its table replaces the cluster section of `--out` (the one-broker run's table
above it stays, and a one-broker run keeps the cluster section).

The mock tests (0182, 0183: librdkafka's mock cluster, no broker) say nothing about kafkafast and
are not run.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kafkafast.testing.cluster import KafkaTestCluster
from perf.brokers import Kafkafast

TESTS = ["0170", "0171", "0172", "0173", "0174", "0175", "0176", "0177", "0178", "0179", "0180", "0181",
         "0184", "0185", "0186", "0190"]
# Why an entry does not pass against kafkafast when kafkafast is not at fault, or what a pass needed.
NOTES: dict[str, str] = {
    "0171_share_consumer_consume":
        "needs a librdkafka built with zstd (libzstd-dev) for its compression sub-test, else it fails there",
    "0172_share_consumer_acknowledge":
        "its mixed-ack-mode sub-test needs both consumers of a new group to get some of 400 records over 4 "
        "partitions; under load the first member, assigned all 4 partitions while alone, acquired all 400 in one "
        "ShareFetch before the second joined (failed once in the run of 2026-11-27 07:50; this row is a run of "
        "0172 alone after it; its sub-test passed 3 times alone too). Kafka's share-partitions of a new group are "
        "initialised through the share coordinator before the first assignment, which likely hides the race",
    "0173_share_consumer_commit_async":
        "sets share.record.lock.duration.ms=3000 on its group: needs group.share.min.record.lock.duration.ms "
        "at most that on the broker (BROKER_SETTINGS, as librdkafka's CI; Kafka's default minimum is 15000)",
    "0179_share_consumer_destroy":
        "the sub-test expects the first poll to hold one of the two partitions' 50 records: librdkafka's poll "
        "returns one ShareFetch answer, i.e. one broker's partitions, and its CI (trivup's KafkaCluster) runs 3 "
        "brokers, where the 2 partitions have different leaders. Against one broker, kafkafast (as Kafka 4.2, whose "
        "ShareFetch reads every acquirable partition of the request up to MaxRecords 500) answers both in one "
        "ShareFetch: not a broker difference, not changed. The runner stops at this failure, so the sub-tests after "
        "it did not run. Against 3 brokers (`--cluster 3`, below) it passes, all 14 sub-tests",
    "0180_share_consumer_config":
        "fixed: ShareFetch with MaxBytes 0 (fetch.max.bytes=0) acquired and answered a batch; Kafka 4.2 answers none",
    "0184_share_consumer_topic_recreate":
        "fixed: a topic deleted and created again under its name reused the old topic's share-partition, whose "
        "acquired offsets held the new records until their locks expired. Its concurrent-producer sub-test needs "
        "num.partitions of at least 3 (BROKER_SETTINGS: 4, as trivup's KafkaCluster in librdkafka's CI): while the "
        "topic is deleted the producer's Metadata requests auto-create it (as Kafka 4.2's, whose KRaft deletion "
        "leaves nothing in the way), and a record partitioned to [1] or [2] before the deletion fails 'Unknown "
        "partition' on a topic auto-created with 1",
    "0190_share_consumer_telemetry":
        "needs Kafka's client-metrics OTLP reporter plugin and an OpenTelemetry Collector exporting to the topic "
        "client-telemetry-metrics (librdkafka's setup-share-telemetry-testing.sh): outside the broker; the test skips",
}
# What the first `--cluster 3` run (2026-11-27 10:34) found in 5 test numbers: one sub-test each got nothing.
CONFIG_RACE = (
    "fixed (cluster mode): a sub-test got no records: it set share.auto.offset.reset=earliest on its new group "
    "(IncrementalAlterConfigs, answered by one broker once ZooKeeper had it) and subscribed at once, and the "
    "partition's leader, another broker, started the new share-partition at 'latest' some milliseconds before "
    "ZooKeeper's change notification reached it; a new share-partition now reads its group's configs from "
    "ZooKeeper first")
# What the second run (11:10, with that fixed) found in 0172 and 0173, later sub-tests.
STATE_WRITES = (
    "fixed (cluster mode): WriteShareGroupState requests timed out (the brokers' logs: 'share state: a write "
    "failed: no answer from ... in time', 35 s) and the acknowledgements whose write failed were lost (the "
    "records came again): a share coordinator answered a state request only once every pending state write of "
    "its broker was done, its own share-partitions' writes to other share coordinators included, so two brokers "
    "each coordinating state of share-partitions the other leads waited for each other over their inter-broker "
    "connections (each handled in turn) until the timeout; a share coordinator now waits only for the writes of "
    "the keys it serves, and a leader sends one WriteShareGroupState at a time per share coordinator and group, "
    "the writes made meanwhile together in the next (as Kafka's persister)")
# The notes of a `--cluster` run where they differ from NOTES.
CLUSTER_NOTES: dict[str, str] = {
    **{test: "; ".join(n for n in (NOTES.get(test), CONFIG_RACE) if n) for test in (
        "0171_share_consumer_consume", "0176_share_consumer_commit_sync", "0180_share_consumer_config")},
    "0172_share_consumer_acknowledge": f"{CONFIG_RACE}; {STATE_WRITES}",
    "0173_share_consumer_commit_async": f"{NOTES['0173_share_consumer_commit_async']}; {CONFIG_RACE}; {STATE_WRITES}",
    "0174_share_consumer_concurrency":
        "its sub-tests bound their first deliveries by wall time (120 s each) and the harness bounds the run (900 s): "
        "do_test_1p_4c_1t_4part's producer flushes after each round of one record per partition (acks=all, "
        "idempotent, leaders on 3 brokers), 5000 rounds; it failed at 50 ms a round (machine at load 10) and "
        "passed at 17.7 ms a round once a follower's fetch passed over its session's quiet partitions (the internal "
        "topics' 50 each) and a share request waited only for its own state writes (perf/results/"
        "share_round_latency.md); a loaded machine can still make it fail by time",
    "0179_share_consumer_destroy":
        "the 2 partitions of its explicit/implicit-ack sub-tests' topic (replication factor 3) have leaders on "
        "different brokers, so a ShareFetch answer, and so a poll, holds one partition's 50 records, as the "
        "sub-tests expect",
}
CONFIGURE = ["./configure", "--disable-curl", "--disable-lz4-ext", "--disable-sasl", "--disable-gssapi"]
# The broker settings librdkafka's own CI gives its Kafka 4.2 brokers for these tests
# (tests/cluster_testing.py, packaging/tools/run-share-consumer-tests.sh): the tests set
# share.record.lock.duration.ms to a few seconds; trivup's KafkaCluster gives auto-created topics
# 4 partitions (num_partitions), which 0184 relies on when its producer re-creates a deleted topic.
BROKER_SETTINGS = {"group.share.min.record.lock.duration.ms": "1000", "num.partitions": "4"}
# What trivup's KafkaCluster (librdkafka's tests/cluster_testing.py) adds for a cluster of n brokers
# running Kafka 4.2: its internal topics replicated min(n, 3) times with a min ISR of min(n, 2), and
# replication_factor min(n, 3) as the topics' default.
def cluster_settings(n: int) -> dict[str, str]:
    rf, isr = str(min(n, 3)), str(min(n, 2))
    return {"default.replication.factor": rf, "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf, "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf, "share.coordinator.state.topic.min.isr": isr}


CLUSTER_BEGIN = "<!-- perf.librdkafka_share_tests --cluster: begin -->"
CLUSTER_END = "<!-- perf.librdkafka_share_tests --cluster: end -->"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUMMARY_ROW = re.compile(r"^\|\s*(\d{4}\S*)\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|?\s*(.*?)\s*\|?$")
ENDED = re.compile(r"=+ Test (\d{4}\S*) (PASSED|SKIPPED|FAILED)")
DURATION = re.compile(r"\] (\d{4}\S*): duration ([\d.]+)ms")
FAILED_AT = re.compile(r'^### Test "(\d{4}\S*)(?: \((.*)\))?" failed at')
FAILED_TIME = re.compile(r"\[(\d{4}\S*)\s*/\s*([\d.]+)s\] TEST FAILURE")
SKIPPING = re.compile(r"\[(\d{4}\S*)\s*/.*SKIPPING TEST: (.*)")


@dataclass
class Entry:
    test: str  # the runner's name, e.g. 0173_share_consumer_commit_async_local
    status: str  # PASSED, FAILED, SKIPPED, TIMEOUT
    seconds: float
    reason: str


def build(src: Path) -> Path:
    runner = src / "tests" / "test-runner"
    if runner.exists():
        return runner
    nice = ["nice", "-n", "10"]
    subprocess.run(CONFIGURE, cwd=src, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*nice, "make", "-j2", "libs"], cwd=src, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*nice, "make", "-j2", "test-runner"], cwd=src / "tests", check=True, stdout=subprocess.DEVNULL)
    return runner


def parse(lines: list[str]) -> list[Entry]:
    """The runner's entries with their outcome: from its summary table when it got that far,
    else (a failed test aborts the runner before the table) from the per-test end lines and
    the `### Test "..." failed at` blocks (the sub-test and the assertion that failed)."""
    status: dict[str, str] = {}
    seconds: dict[str, float] = {}
    reason: dict[str, str] = {}
    for i, line in enumerate(lines):
        if m := ENDED.search(line):
            status[m[1]] = m[2]
        elif m := DURATION.search(line):
            seconds[m[1]] = float(m[2]) / 1000
        elif m := FAILED_TIME.search(line):
            seconds[m[1]] = float(m[2])
        elif m := SKIPPING.search(line):
            reason[m[1]] = m[2].strip()
        elif (m := FAILED_AT.match(line)) and i + 1 < len(lines):
            status[m[1]] = "FAILED"
            reason.setdefault(m[1], f"{m[2] or ''}: {lines[i + 1].strip()}"[:400])
        elif m := SUMMARY_ROW.match(line):
            status[m[1]] = m[2]
            seconds[m[1]] = float(m[3])
            if m[4] and m[1] not in reason:
                reason[m[1]] = m[4]
    return [Entry(name, st, seconds.get(name, 0.0), reason.get(name, "")) for name, st in status.items()]


def run_test(runner: Path, number: str, conf: Path, scratch: Path, timeout: float) -> list[Entry]:
    workdir = scratch / number
    workdir.mkdir(parents=True, exist_ok=True)
    src = runner.parents[1]
    env = dict(os.environ, TESTS=number, TEST_KAFKA_VERSION="4.2.0", RDKAFKA_TEST_CONF=str(conf),
               LD_LIBRARY_PATH=os.pathsep.join([str(src / "src"), str(src / "src-cpp")]))
    start = time.monotonic()
    with open(workdir / "runner.log", "wb") as log:
        proc = subprocess.Popen([str(runner)], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            timed_out = True
    (workdir / "outcome").write_text(f"{'timeout' if timed_out else proc.returncode} {time.monotonic() - start:.1f}\n")
    return read_run(scratch, number, timeout)


def read_run(scratch: Path, number: str, timeout: float) -> list[Entry]:
    """The entries of one test number's run in `scratch` (its runner log and outcome)."""
    log_path, outcome = scratch / number / "runner.log", scratch / number / "outcome"
    if not log_path.exists():
        return [Entry(number, "NOT RUN", 0.0, "")]
    timed_out, elapsed = False, 0.0
    if outcome.exists():
        code, seconds = outcome.read_text().split()
        timed_out, elapsed = code == "timeout", float(seconds)
    lines = [ANSI.sub("", line) for line in log_path.read_text(errors="replace").splitlines()]
    entries = parse(lines)
    ended = {e.test for e in entries}
    if timed_out or not entries:
        # A test still running when the bound hit (or a runner that never started one).
        running = sorted({m[1] for ln in lines if (m := re.match(r"\[(\d{4}\S*)\s*/", ln))} - ended) or [number]
        last = lines[-1].strip()[:300] if lines else "no output"
        entries += [Entry(name, "TIMEOUT" if timed_out else "FAILED", elapsed,
                          f"still running after {timeout:.0f} s" if timed_out else last) for name in running]
    return entries


def needs_broker(test: str) -> bool:
    """librdkafka's TEST_F_LOCAL entries (`..._local`, and 0186) run against no broker."""
    return not test.endswith("_local") and not test.startswith("0186")


def table(results: dict[str, list[Entry]], broker: str, before: dict[str, list[Entry]] | None = None,
          before_label: str = "", title: str = "# librdkafka share-consumer tests against kafkafast",
          command: str = "python -m perf.librdkafka_share_tests", notes: dict[str, str] = NOTES) -> str:
    """The result table; with `before` (another run's entries) a column of its results too."""
    prior = {e.test: e.status.lower() for entries in (before or {}).values() for e in entries}
    cols = ["test", "broker", *(["before"] if before else []), "result", "seconds", "reason / note"]
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) - 2) + "---:|---|"]
    count = {True: [0, 0], False: [0, 0]}
    for number in sorted(results):
        for e in results[number]:
            count[needs_broker(e.test)][0] += e.status == "PASSED"
            count[needs_broker(e.test)][1] += 1
            note = notes.get(e.test, "")
            text = "; ".join(t for t in (e.reason, note) if t).replace("|", "\\|")
            cells = [e.test, "yes" if needs_broker(e.test) else "no (local)",
                     *([prior.get(e.test, "-")] if before else []), e.status.lower(), f"{e.seconds:.0f}", text]
            rows.append("| " + " | ".join(cells) + " |")
    summary = (f"**{count[True][0]} of {count[True][1]} entries that use the broker passed** "
               f"({count[False][0]} of {count[False][1]} local entries, librdkafka alone, passed)")
    if before:
        b = sum(e.status == "PASSED" for entries in before.values() for e in entries if needs_broker(e.test))
        summary += f"; before: {b} of the broker entries ({before_label})"
    head = (f"{title}\n\n"
            f"`{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): "
            f"librdkafka's tests 0170-0190 (mock tests 0182, 0183 not run), `TEST_KAFKA_VERSION=4.2.0`, full mode, "
            f"against {broker}.\n\n{summary}.\n\n")
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, help="a librdkafka source tree (with tests/0170-0190)")
    ap.add_argument("--tests", default=",".join(TESTS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per test number")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--cluster", type=int, default=0, metavar="N",
                    help="N brokers in ZooKeeper mode (with --workers 0, this checkout) instead of one")
    ap.add_argument("--tree", type=Path, help="run the kafkafast of this code tree (default: this checkout)")
    ap.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "rdk-share-tests",
                    help="the runner's logs, test.conf and stats files, and the broker's log")
    ap.add_argument("--report-only", action="store_true", help="no run: the table of the run in --scratch")
    ap.add_argument("--before", type=Path, help="the --scratch of an earlier run: its results in a column")
    ap.add_argument("--before-label", default="an earlier run")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "librdkafka_share_tests.md")
    args = ap.parse_args(argv)
    if args.cluster and (args.workers or args.tree):
        ap.error("--cluster runs brokers of this checkout with --workers 0")
    scratch = args.scratch.resolve()
    numbers = args.tests.split(",")
    if not args.report_only:
        if args.src is None:
            ap.error("--src is needed to run the tests")
        run_all(build(args.src.resolve()), numbers, scratch, args)
    results = {n: read_run(scratch, n, args.timeout) for n in numbers}
    before = {n: read_run(args.before.resolve(), n, args.timeout) for n in numbers} if args.before else None
    tree = f", tree {args.tree}" if args.tree else ""
    settings = ", ".join(f"`{k}={v}`" for k, v in BROKER_SETTINGS.items())
    if args.cluster:
        section = table(results, f"kafkafast ({args.cluster} brokers in ZooKeeper mode, every one with {settings}, "
                                 f"{', '.join(f'`{k}={v}`' for k, v in cluster_settings(args.cluster).items())})",
                        before, args.before_label, f"## Against a {args.cluster}-broker cluster (`--cluster`)",
                        f"python -m perf.librdkafka_share_tests --cluster {args.cluster}", {**NOTES, **CLUSTER_NOTES})
        text = replace_section(args.out.read_text() if args.out.exists() else "", section)
    else:
        text = table(results, f"kafkafast (one broker, --workers {args.workers}{tree}, {settings})", before,
                     args.before_label)
        old = args.out.read_text() if args.out.exists() else ""
        if CLUSTER_BEGIN in old:  # keep the cluster run's section
            text = replace_section(text, old[old.index(CLUSTER_BEGIN) + len(CLUSTER_BEGIN):old.index(CLUSTER_END)])
    args.out.write_text(text)
    print(text)
    return 0


def replace_section(text: str, section: str) -> str:
    """`text` with its cluster section (between the markers) replaced by `section`, or added at its end."""
    block = f"{CLUSTER_BEGIN}\n{section.strip()}\n{CLUSTER_END}\n"
    if CLUSTER_BEGIN in text:
        return text[:text.index(CLUSTER_BEGIN)] + block + text[text.index(CLUSTER_END) + len(CLUSTER_END):].lstrip("\n")
    return f"{text.rstrip()}\n\n{block}" if text.strip() else block


def run_all(runner: Path, numbers: list[str], scratch: Path, args: argparse.Namespace) -> None:
    if args.cluster:
        cluster = KafkaTestCluster(scratch / "cluster", brokers=args.cluster, spawn="exec",
                                   settings={**BROKER_SETTINGS, **cluster_settings(args.cluster)})
        start, stop, bootstrap = cluster.start, cluster.stop, cluster.bootstrap_servers
    else:
        broker = Kafkafast(scratch / "broker", args.workers, BROKER_SETTINGS, args.tree)
        start, stop, bootstrap = broker.start, broker.stop, broker.bootstrap
    start()
    try:
        conf = scratch / "test.conf"
        conf.write_text(f"bootstrap.servers={bootstrap}\n")
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(run_test, runner, n, conf, scratch, args.timeout): n for n in numbers}
            for fut in concurrent.futures.as_completed(futures):
                for e in fut.result():
                    print(f"{e.test}: {e.status} {e.seconds:.0f}s {e.reason}", file=sys.stderr, flush=True)
    finally:
        stop()


if __name__ == "__main__":
    sys.exit(main())
