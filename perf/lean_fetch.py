"""The leader's CPU per follower Fetch, in-process (no socket, no other broker): the lean path
(`handlers/fetch.py`: `follower_fetch`, `answer_follower_fetch`) against the general handler
(request decoded, `handle`, response encoded: what `Broker.dispatch` does when the lean path
declines), in one process on one broker, blocks alternated (issue 25).

    python -m perf.lean_fetch [--cycles 300] [--rounds 5] [--partitions 6] [--profile OUT]

One broker (node 1, log under /dev/shm) leads `--partitions` partitions with replicas 1, 2, 3.
Followers 2 and 3 keep incremental sessions (their requests packed by the follower's own
`protocol/fetch_ask.py`, v12) and fetch as in the steady state of replication: each cycle both
send a fetch naming their new offsets (caught up), which records them and parks; then one
batch of 16 records of 1 KiB is appended to every partition, which wakes both; they read the
batches and answer. Counted: the thread's CPU time per cycle (the appends, the two fetches and
the event loop's part), per path; the appends alone with the two request frames built (no
fetcher parked) are measured in the same blocks, so per follower Fetch = (cycle - appends) / 2. `--profile OUT`: cProfile (CPU clock) of
the lean blocks only, written to OUT.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import shutil
import statistics
import tempfile
import time

from kafkafast.broker.broker import Broker, RequestContext
from kafkafast.broker.handlers import fetch
from kafkafast.config import BrokerConfig
from kafkafast.protocol import api
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequestLeaderAndIsrPartitionState as PS
from kafkafast.protocol.fetch_ask import encode_fetch_ask
from kafkafast.records.batch import encode_batch

TOPIC = "lean"
MAX = 10 << 20


async def general(broker, frame: bytes) -> list:
    header, req = api.decode_request(frame)
    ctx = RequestContext(header, header.request_api_version, header.client_id, None, False)
    resp = await fetch.handle(broker, ctx, req, header.request_api_version)
    return api.encode_response(1, header.request_api_version, header.correlation_id, resp)


async def lean(broker, frame: bytes) -> list:
    taken = fetch.follower_fetch(broker, frame, None, False)
    if taken is None:
        raise RuntimeError("the lean path declined a steady follower fetch")
    return await fetch.answer_follower_fetch(broker, taken, None, False)


class Follower:
    """One follower's session: its request frames, its fetch offsets."""

    def __init__(self, replica_id: int, parts: list) -> None:
        self.replica_id = replica_id
        self.parts = parts
        self.session_id = 0
        self.epoch = 0
        self.sent: dict[int, int] = {}

    def frame(self, max_wait_ms: int) -> bytes:
        named = [(p.index, p.leader_epoch, p.log_end_offset, p.leader_epoch, 0, 1 << 20) for p in self.parts
                 if self.epoch == 0 or self.sent.get(p.index) != p.log_end_offset]
        self.sent = {p.index: p.log_end_offset for p in self.parts}
        ask = encode_fetch_ask(self.replica_id, max_wait_ms, 1, MAX, 0, self.session_id, self.epoch,
                               {TOPIC: named} if named else {}, {})
        return api.encode_request(ask, 12, self.epoch, f"replica-{self.replica_id}")[4:]

    def answered(self, parts: list) -> None:
        session_id = int.from_bytes(bytes(parts[0][15:19]), "big")
        if self.epoch == 0:
            self.session_id = session_id
        self.epoch += 1


async def run(args) -> dict:
    root = tempfile.mkdtemp(dir="/dev/shm", prefix="lean-fetch-")
    broker = Broker(BrokerConfig.load(overrides={
        "log.dirs": root, "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.segment.bytes": str(1 << 30)}))
    await broker.start()
    try:
        broker.create_topic(TOPIC, args.partitions)
        parts = [broker.partitions[(TOPIC, i)] for i in range(args.partitions)]
        for p in parts:
            broker.replicas.become(p, PS(topic_name=TOPIC, partition_index=p.index, controller_epoch=1, leader=1,
                                         leader_epoch=3, isr=[1, 2, 3], partition_epoch=3, replicas=[1, 2, 3]))
        batch = encode_batch([(1_700_000_000_000 + i, None, bytes([i]) * 1024, []) for i in range(16)])
        followers = [Follower(2, parts), Follower(3, parts)]
        for f in followers:  # the full fetch that makes each session
            f.answered(await general(broker, f.frame(0)))

        async def cycle(path) -> None:
            tasks = [asyncio.ensure_future(path(broker, f.frame(500))) for f in followers]
            await asyncio.sleep(0)  # both parked (nothing new: caught up)
            for p in parts:
                broker.append(p, bytearray(batch))
            for f, t in zip(followers, tasks):
                f.answered(await t)

        async def appends_only() -> None:  # (the followers' frames built too: the client's side)
            for f in followers:
                f.frame(500)
            for p in parts:
                broker.append(p, bytearray(batch))
            await asyncio.sleep(0)

        async def block(step, profile=None) -> float:
            t = time.thread_time()
            if profile is not None:
                profile.enable()
            for _ in range(args.cycles):
                await step()
            if profile is not None:
                profile.disable()
            return (time.thread_time() - t) / args.cycles

        # appends_only moves the log ends past the followers: they catch up (general) before the next cycle
        async def catch_up() -> None:
            for f in followers:
                f.answered(await general(broker, f.frame(0)))

        profile = cProfile.Profile(time.thread_time) if args.profile else None
        rows = {"general": [], "lean": [], "appends": []}
        await block(lambda: cycle(general))  # warm-up
        await block(lambda: cycle(lean))
        for r in range(args.rounds):
            order = ("general", "lean") if r % 2 == 0 else ("lean", "general")
            for name in order:
                rows[name].append(await block(lambda: cycle(general if name == "general" else lean),
                                              profile if name == "lean" else None))
            rows["appends"].append(await block(appends_only))
            await catch_up()
        if profile is not None:
            profile.dump_stats(args.profile)
        med = {k: statistics.median(v) for k, v in rows.items()}
        per_fetch = {k: (med[k] - med["appends"]) / 2 for k in ("general", "lean")}
        return {"partitions": args.partitions, "cycles": args.cycles, "rounds": args.rounds,
                "cpu_ms_per_cycle": {k: [round(x * 1000, 4) for x in v] for k, v in rows.items()},
                "cpu_ms_per_follower_fetch": {k: round(v * 1000, 4) for k, v in per_fetch.items()},
                "general_over_lean": round(per_fetch["general"] / per_fetch["lean"], 2)}
    finally:
        await broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.lean_fetch")
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--profile", help="cProfile stats of the lean blocks to this file")
    print(json.dumps(asyncio.run(run(ap.parse_args(argv))), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
