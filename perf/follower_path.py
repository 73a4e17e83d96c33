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

Reports CPU seconds (process time) per GB of records for each shape of answer: six
partitions of 1 MiB (a follower catching up), six of 24 KiB (a follower keeping up), and six of
24 KiB from an idempotent producer (every batch updates the follower's producer state).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from kafkafast.client.connection import ReceiveBuffer
from kafkafast.protocol._generated.fetch import FetchResponse
from kafkafast.protocol.api import decode_response, encode_response
from kafkafast.protocol.fetch_walk import FETCH_WALK_VERSION, FetchAnswer
from kafkafast.records import assign_offsets, encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log

PARTITIONS = 6
RECORD = 1024
BATCH_RECORDS = 16  # 16 KiB batches, as a producer with linger makes them


def answers(partition_bytes: int, count: int, producer_id: int = -1) -> list[bytes]:
    """`count` consecutive Fetch v12 answers (frames without the size prefix); batches of
    an idempotent producer if `producer_id` >= 0 (each one then updates the producer state)."""
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
                                                   log_start_offset=0, aborted_transactions=[], records=bytes(records))
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.follower_path")
    ap.add_argument("--answers", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
