"""The follower's handling of one Fetch answer, in-process, the way before issue 25 and now:

* before: the frame received into a `bytearray(size)` made for it (zero-filled), decoded
  into the generated FetchResponse objects, each partition's records copied by `bytes()`
  and appended;
* now: the frame received into the fetcher's reused `ReceiveBuffer`, walked in place
  (`FetchAnswer`), each partition's records appended from a view of it.

The socket is stood in for by one copy of the answer's bytes into the buffer (what
recv_into does). Appends go to real logs under /dev/shm (page cache only, so the file
system's cost does not hide the rest), rolled at 64 MiB and deleted between rounds.

    python -m perf.follower_path [--answers 40] [--rounds 5]
    python -m perf.follower_path --before /path/to/other/tree [--answers 20] [--rounds 6]

The second form compares two code trees (Cython twins built in each) on the "now" path only:
one interpreter per tree (this file, with the tree's `kafkafast` first on the path), both
running, handed each shape's answers in turn (`--rounds` pairs, which tree goes first
alternating), so that both meet the same load from the rest of the machine; it reports per
shape each tree's CPU seconds per GB, the pairs' ratios, and the Python function calls per
appended partition (cProfile's count, which no other load changes). Its 24 KiB shapes have null
aborted transactions, as a kafkafast or Kafka leader answers a follower (read_uncommitted), and
one with the empty list the generated encoder writes for `[]`.

Reports CPU seconds (process time) per GB of records for each shape of answer: six
partitions of 1 MiB (a follower catching up), six of 24 KiB (a follower keeping up), and six of
24 KiB from an idempotent producer (every batch updates the follower's producer state).

Then the follower's Fetch request for six partitions whose offsets all moved (a steady
session names them all), in microseconds of process time per request: built from generated
objects (FetchPartition, SessionRequests.build, FetchRequest, a generated RequestHeader, as
before `protocol/fetch_ask.py`) and packed from the fetch parameters (as the fetcher does now).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from kafkafast.broker.fetch_sessions import SessionRequests
from kafkafast.client.connection import ReceiveBuffer, encode_request_parts
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.fetch import FetchResponse
from kafkafast.protocol.api import decode_response, encode_request, encode_response
from kafkafast.protocol.fetch_ask import encode_fetch_ask
from kafkafast.protocol.fetch_walk import FETCH_WALK_VERSION, FetchAnswer
from kafkafast.records import assign_offsets, encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log

PARTITIONS = 6
RECORD = 1024
BATCH_RECORDS = 16  # 16 KiB batches, as a producer with linger makes them


def answers(partition_bytes: int, count: int, producer_id: int = -1, aborted: list | None = []) -> list[bytes]:
    """`count` consecutive Fetch v12 answers (frames without the size prefix); batches of
    an idempotent producer if `producer_id` >= 0 (each one then updates the producer state);
    each partition's aborted_transactions `aborted` (None: null)."""
    batch = bytearray(encode_batch([(1_700_000_000_000 + i, None, bytes([i]) * RECORD, []) for i in range(BATCH_RECORDS)],
                                   producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                   base_sequence=0 if producer_id >= 0 else -1))
    per = max(1, partition_bytes // len(batch))
    out = []
    offset = 0
    for _ in range(count):
        records = bytearray()
        for i in range(per):
            b = bytearray(batch)
            assign_offsets(b, offset + i * BATCH_RECORDS, 1)
            records += b
        offset += per * BATCH_RECORDS
        R = FetchResponse
        resp = R(throttle_time_ms=0, error_code=0, session_id=1, responses=[R.FetchableTopicResponse(
            topic="t", partitions=[R.PartitionData(partition_index=p, high_watermark=offset, last_stable_offset=offset,
                                                   log_start_offset=0, aborted_transactions=aborted, records=bytes(records))
                                   for p in range(PARTITIONS)])])
        parts = encode_response(FetchResponse.API_KEY, FETCH_WALK_VERSION, 7, resp)
        out.append(b"".join(bytes(p) for p in parts)[4:])
    return out


def open_logs(root: str) -> list[Log]:
    cfg = LogConfig.from_props({"segment.bytes": str(64 << 20)})
    return [Log.open(f"{root}/t-{p}", "t", p, cfg, needs_recovery=False, recovery_point=0) for p in range(PARTITIONS)]


def before(frames: list[bytes], logs: list[Log]) -> None:
    for data in frames:
        frame = bytearray(len(data))
        frame[:] = data
        _, resp = decode_response(FetchResponse.API_KEY, FETCH_WALK_VERSION, frame)
        for tr in resp.responses:
            for pd in tr.partitions:
                logs[pd.partition_index].append_as_follower(bytes(pd.records), now_ms=0)


def after(frames: list[bytes], logs: list[Log]) -> None:
    rb = ReceiveBuffer(cap=64 << 20)
    for data in frames:
        frame = rb.frame(len(data))
        frame[:] = data
        for pd in FetchAnswer(frame).partitions():
            logs[pd.partition].append_as_follower(pd.records, now_ms=0)
        del frame, pd


def requests_generated(n: int) -> None:
    F = FetchRequest
    session = SessionRequests()
    session.answered(0, 5)  # a session exists: incremental requests
    for i in range(n):
        wanted = {("t", p): F.FetchPartition(partition=p, current_leader_epoch=1, fetch_offset=i * 100, last_fetched_epoch=-1,
                                             log_start_offset=0, partition_max_bytes=1 << 20) for p in range(PARTITIONS)}
        session_id, epoch, topics, forgotten = session.build(wanted)
        encode_request(F(replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0,
                         session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten,
                         rack_id=""), FETCH_WALK_VERSION, i, "broker-2-fetcher")


def requests_packed(n: int) -> None:
    session = SessionRequests()
    session.answered(0, 5)
    for i in range(n):
        params = {("t", p): (p, 1, i * 100, -1, 0, 1 << 20) for p in range(PARTITIONS)}
        session_id, epoch, topics, forgotten = session.build_params(params)
        encode_request_parts(encode_fetch_ask(2, 500, 1, 10 << 20, 0, session_id, epoch, topics, forgotten),
                             FETCH_WALK_VERSION, i, "broker-2-fetcher")


def run(path, frames: list[bytes], gb: float) -> float:
    root = tempfile.mkdtemp(dir="/dev/shm", prefix="follower-path-")
    logs = open_logs(root)
    try:
        t0 = time.process_time()
        path(frames, logs)
        return (time.process_time() - t0) / gb
    finally:
        for lg in logs:
            lg.close()
        shutil.rmtree(root, ignore_errors=True)


# --before: (name, bytes per partition, answers per --answers, producer id, aborted transactions)
TREE_SHAPES = (("6 x 1 MiB", 1 << 20, 1, -1, None), ("6 x 24 KiB", 24 << 10, 40, -1, None),
               ("6 x 24 KiB, idempotent producer", 24 << 10, 40, 7, None),
               ("6 x 24 KiB, idempotent producer, aborted []", 24 << 10, 40, 7, []))


def serve_tree(n: int) -> None:
    """The child process of `--before`: builds every shape's answers, then for each line `K` on
    stdin appends shape K's answers once and prints CPU-s/GB; `C K` prints shape K's Python calls
    per partition (cProfile's count)."""
    shapes = []
    for _, partition_bytes, per, producer_id, aborted in TREE_SHAPES:
        frames = answers(partition_bytes, n * per, producer_id, aborted)
        shapes.append((frames, sum(len(f) for f in frames) / 1e9, n * per * PARTITIONS))
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        frames, gb, partitions = shapes[int(words[-1])]
        if words[0] == "C":
            prof = cProfile.Profile()
            prof.runcall(run, after, frames, gb)
            print(pstats.Stats(prof).total_calls / partitions, flush=True)
        else:
            print(run(after, frames, gb), flush=True)


def compare_trees(before: str, n: int, rounds: int) -> None:
    """Both trees' children started at once and given the same shape in turn, `rounds` times
    each (which goes first alternates), so both see the same load from the rest of the machine:
    each pair's ratio is the number to read."""
    trees = {"before": os.path.abspath(before), "this tree": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    children = {label: subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", "--answers", str(n)],
                                        cwd=tree, env={**os.environ, "PYTHONPATH": tree}, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True) for label, tree in trees.items()}
    try:
        for c in children.values():
            assert c.stdout.readline().strip() == "ready"

        def ask(label: str, command: str) -> float:
            c = children[label]
            c.stdin.write(command + "\n")
            c.stdin.flush()
            return float(c.stdout.readline())

        for k, (name, *_) in enumerate(TREE_SHAPES):
            cpu: dict[str, list[float]] = {label: [] for label in trees}
            for r in range(rounds):
                for label in (list(trees) if r % 2 == 0 else list(reversed(list(trees)))):
                    cpu[label].append(ask(label, str(k)))
            calls = {label: ask(label, f"C {k}") for label in trees}
            ratios = [a / b for a, b in zip(cpu["this tree"], cpu["before"])]
            print(f"{name}: " + "; ".join(
                f"{label} {statistics.median(v):.3f} CPU-s/GB ({min(v):.3f}-{max(v):.3f}), {calls[label]:.1f} calls/partition"
                for label, v in cpu.items()) + f"; paired ratio {statistics.median(ratios):.3f} "
                f"({min(ratios):.3f}-{max(ratios):.3f}), this tree lower in {sum(x < 1 for x in ratios)} of {rounds}",
                flush=True)
    finally:
        for c in children.values():
            c.stdin.close()
            c.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.follower_path")
    ap.add_argument("--answers", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", help="another code tree: compare its follower path with this one's")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a --before child
    args = ap.parse_args(argv)
    if args.serve:
        serve_tree(args.answers)
        return 0
    if args.before:
        compare_trees(args.before, args.answers, args.rounds)
        return 0
    for name, partition_bytes, count, producer_id in (
            ("6 x 1 MiB", 1 << 20, args.answers, -1), ("6 x 24 KiB", 24 << 10, args.answers * 40, -1),
            ("6 x 24 KiB, idempotent producer", 24 << 10, args.answers * 40, 7)):
        frames = answers(partition_bytes, count, producer_id)
        gb = sum(len(f) for f in frames) / 1e9
        got: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(args.rounds):
            for label, path in ((("before", before), ("after", after)) if r % 2 == 0 else
                                (("after", after), ("before", before))):
                got[label].append(run(path, frames, gb))
        print(f"{name} ({gb:.2f} GB a round): " + "; ".join(
            f"{k} {statistics.median(v):.3f} CPU-s/GB ({min(v):.3f}-{max(v):.3f})" for k, v in got.items()))
    n = args.answers * 100
    us: dict[str, list[float]] = {"generated": [], "packed": []}
    for r in range(args.rounds):
        for label, build in ((("generated", requests_generated), ("packed", requests_packed)) if r % 2 == 0 else
                             (("packed", requests_packed), ("generated", requests_generated))):
            t0 = time.process_time()
            build(n)
            us[label].append((time.process_time() - t0) / n * 1e6)
    print(f"Fetch request, {PARTITIONS} partitions moved: " + "; ".join(
        f"{k} {statistics.median(v):.1f} us ({min(v):.1f}-{max(v):.1f})" for k, v in us.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
