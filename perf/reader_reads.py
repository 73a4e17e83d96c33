"""CPU per `LogReader.read` as the leader answers a follower keeping up and a consumer bounded by
the high watermark, in-process (no broker, no socket): two code trees compared, each in its own
process, runs alternated.

    python perf/reader_reads.py --before /path/to/other/tree [--reads 5000] [--rounds 4] [--region]

A log under /dev/shm (page cache only) gets `--reads` batches of 16 records of 1 KiB, one at a
time; after each append the follower reads from where its last read ended (up to the log end) and
a consumer reads the batch before the last one, up to a high watermark one batch behind the log
end. Reported per tree: the median over rounds of the mean process time of one read, each kind.
`--region`: the follower reads with `LogReader.region` (what the fetch handler calls since
2026-11-27) in a tree that has it, `read(...).region` in one that does not.
Run as a file (not `-m`), so that each tree's process imports only that tree's kafkafast.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(reads: int, region: bool = False) -> dict[str, float]:
    from kafkafast.records import encode_batch
    from kafkafast.storage import LogConfig
    from kafkafast.storage.log import Log

    root = tempfile.mkdtemp(dir="/dev/shm", prefix="reader-reads-")
    try:
        log = Log.open(root + "/t-0", "t", 0, LogConfig.from_props({"segment.bytes": str(1 << 30)}),
                       needs_recovery=False, recovery_point=0)
        batch = encode_batch([(1_700_000_000_000 + i, None, bytes([i]) * 1024, []) for i in range(16)])
        reader, st = log.reader, log.state
        lean = getattr(reader, "region", None) if region else None
        offset = 0
        follower = consumer = 0.0
        for _ in range(reads):
            log.append(bytearray(batch), 0, now_ms=0)
            t = time.process_time()
            got = lean(offset, 1 << 20) if lean is not None else reader.read(offset, 1 << 20).region
            follower += time.process_time() - t
            previous, offset = offset, st.log_end_offset
            st.high_watermark = previous  # one batch behind the log end
            t = time.process_time()
            bounded = reader.read(max(previous - 16, 0), 1 << 20, upper_bound_offset=previous)
            consumer += time.process_time() - t
            if got is None or (previous and bounded.region is None):
                raise RuntimeError("a read found nothing")
        log.close()
        return {"follower_us": follower / reads * 1e6, "consumer_us": consumer / reads * 1e6}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python perf/reader_reads.py")
    ap.add_argument("--before", help="the other code tree")
    ap.add_argument("--reads", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--region", action="store_true", help="the follower reads with LogReader.region")
    ap.add_argument("--here", action="store_true", help="measure the kafkafast on this process's path")
    args = ap.parse_args(argv)
    if args.here:
        print(json.dumps(measure(args.reads, args.region)))
        return 0
    trees = {"before": Path(args.before).resolve(), "after": Path(__file__).resolve().parents[1]}
    rows: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            env = dict(os.environ, PYTHONPATH=str(trees[name]))
            out = subprocess.run([sys.executable, __file__, "--here", "--reads", str(args.reads)]
                                 + (["--region"] if args.region else []), env=env,
                                 cwd=trees[name], check=True, capture_output=True, text=True, timeout=600)
            rows[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps({"setup": name, "round": r, **rows[name][-1]}), flush=True)
    for name, rs in rows.items():
        print(f"{name}: " + "; ".join(f"{k} {statistics.median(x[k] for x in rs):.1f} us per read "
                                      f"({min(x[k] for x in rs):.1f}-{max(x[k] for x in rs):.1f})"
                                      for k in ("follower_us", "consumer_us")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
