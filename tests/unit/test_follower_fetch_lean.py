"""A follower's steady incremental Fetch takes the lean path (`handlers/fetch.py`:
`follower_fetch`, `answer_follower_fetch`) and answers the very bytes the general handler
answers; anything else (a full fetch, a partition added or forgotten, a leader epoch that does
not match, a partition no longer led here) is left to the general handler, and a lean fetch
that parks and finds a partition no longer led hands over to it.

Two brokers (node 1, in this process) lead the same partitions (replicas 1, 2, 3) with the same
records; the same follower requests go to both: to one through the lean path where it takes
them, to the other through the general handler only. Their answers are compared byte for byte
(the second broker's topic ids, drawn at creation, written as the first's)."""
from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafast.broker.broker import Broker, RequestContext
from kafkafast.broker.handlers import fetch
from kafkafast.config import BrokerConfig
from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequestLeaderAndIsrPartitionState as PS
from kafkafast.protocol.errors import ErrorCode
from kafkafast.protocol.primitives import FileRegion
from kafkafast.records.batch import encode_batch

F = FetchRequest
REPO = Path(__file__).resolve().parents[2]
TOPICS = {"a": 3, "b": 2}
MAX = 1 << 20


def batch(seed: int, n: int = 3) -> bytearray:
    return bytearray(encode_batch([(1_700_000_000_000 + seed, None, bytes([seed % 256]) * (50 + i), [])
                                   for i in range(n)]))


class Twin:
    """One of the two brokers and what the test's follower requests know of it."""

    def __init__(self, broker: Broker, lean: bool) -> None:
        self.broker = broker
        self.lean = lean
        self.node = broker.node_id

    def part(self, topic: str, index: int):
        return self.broker.partitions[(topic, index)]

    def lead(self, topic: str, index: int, epoch: int, leader: int | None = None) -> None:
        n = self.node
        self.broker.replicas.become(self.part(topic, index), PS(
            topic_name=topic, partition_index=index, controller_epoch=1, leader=n if leader is None else leader,
            leader_epoch=epoch, isr=[n, n + 1, n + 2], partition_epoch=epoch, replicas=[n, n + 1, n + 2]))

    def append(self, topic: str, index: int, seed: int) -> None:
        self.broker.append(self.part(topic, index), batch(seed))

    def frame(self, version: int, follower: int, session_id: int, epoch: int, parts: dict, forget: list = (),
              max_wait_ms: int = 0, min_bytes: int = 0) -> bytes:
        """A follower's Fetch: `parts` {(topic, index): (fetch offset, current leader epoch)}."""
        topics: dict[str, list] = {}
        for (topic, index), (offset, leader_epoch) in parts.items():
            topics.setdefault(topic, []).append(F.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=0, partition_max_bytes=MAX))
        ids = {name: meta.topic_id for name, meta in ((t, self.broker.topics.get(t)) for t in TOPICS)}
        req = F(replica_id=follower, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=10 * MAX,
                isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
                topics=[F.FetchTopic(topic=t, topic_id=ids[t], partitions=ps) for t, ps in topics.items()],
                forgotten_topics_data=[F.ForgottenTopic(topic=t, topic_id=ids[t], partitions=[i]) for t, i in forget])
        if version >= 15:
            req.replica_state = F.ReplicaState(replica_id=follower, replica_epoch=-1)
        return api.encode_request(req, version, 4242, f"replica-{follower}")[4:]

    async def ask(self, frame: bytes, *, lean_expected: bool, during=None) -> bytes:
        """The answer's bytes; `during` runs once the fetch is under way (parked, if it parks)."""
        if self.lean:
            lean = fetch.follower_fetch(self.broker, frame, None, False)
            assert (lean is not None) == lean_expected
            if lean is not None:
                task = asyncio.ensure_future(fetch.answer_follower_fetch(self.broker, lean, None, False))
            else:
                task = asyncio.ensure_future(self.broker.dispatch(frame))
        else:
            header, req = api.decode_request(frame)
            ctx = RequestContext(header, header.request_api_version, header.client_id, None, False)

            async def general():
                resp = await fetch.handle(self.broker, ctx, req, header.request_api_version)
                return api.encode_response(1, header.request_api_version, header.correlation_id, resp)
            task = asyncio.ensure_future(general())
        if during is not None:
            await asyncio.sleep(0.05)
            during(self)
        parts = await task
        return b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)

    def session_of(self, answer: bytes) -> int:
        return int.from_bytes(answer[15:19], "big", signed=True)  # size, correlation id, tags, throttle, error


async def twins(tmp_path):
    out = []
    for name, lean in (("lean", True), ("general", False)):
        broker = Broker(BrokerConfig.load(overrides={
            "log.dirs": str(tmp_path / name), "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092",
            "kafkafast.replica.fetch.hw.delay.ms": "0"}))
        await broker.start()
        t = Twin(broker, lean)
        for topic, n in TOPICS.items():
            broker.create_topic(topic, n)
            for i in range(n):
                t.lead(topic, i, 5)
        for seed, (topic, i) in enumerate([("a", 0), ("a", 0), ("b", 1)]):
            t.append(topic, i, seed)
        out.append(t)
    return out


def same(lean: Twin, general: Twin, a: bytes, b: bytes) -> None:
    for topic in TOPICS:
        b = b.replace(general.broker.topics.get(topic).topic_id, lean.broker.topics.get(topic).topic_id)
    assert a == b


async def both(twins_, make_frame, *, lean_expected: bool, during=None) -> bytes:
    """The answer of both brokers to the request `make_frame(twin)` builds, compared; random
    seeded alike so that a new session gets the same id on both."""
    answers = []
    for t in twins_:
        random.seed(25)
        answers.append(await t.ask(make_frame(t), lean_expected=lean_expected and t.lean, during=during))
    same(twins_[0], twins_[1], *answers)
    return answers[0]


def offsets(twin: Twin, parts, epoch: int = 5) -> dict:
    """The follower caught up: each partition's fetch offset its log end."""
    return {(t, i): (twin.part(t, i).log.log_end_offset, epoch) for t, i in parts}


ALL = [(t, i) for t, n in TOPICS.items() for i in range(n)]


@pytest.mark.parametrize("version", [12, 13, 15, 16, 17])
def test_lean_answers_are_the_general_answers_byte_for_byte(tmp_path, version):
    async def main():
        pair = await twins(tmp_path)
        try:
            await scenario(pair, version)
        finally:
            for t in pair:
                await t.broker.stop()
    asyncio.run(main())


async def scenario(pair, v):
    lean, general = pair
    start = {p: (0, 5) for p in ALL[:4]}
    # follower 2: a full fetch (the general way) makes its session, with records
    s2 = lean.session_of(await both(pair, lambda t: t.frame(v, 2, 0, 0, start), lean_expected=False))
    assert s2 > 0
    # follower 2 adds b-1: general (a new partition in the session)
    await both(pair, lambda t: t.frame(v, 2, s2, 1, {("b", 1): (0, 5)}), lean_expected=False)
    # caught up: lean, nothing new (the high watermark waits for follower 3)
    ans = await both(pair, lambda t: t.frame(v, 2, s2, 2, offsets(t, [("a", 0), ("b", 1)])), lean_expected=True)
    assert len(ans) < 40  # no partition listed
    # follower 3 (its own session) catches up: the high watermark moves
    s3 = lean.session_of(await both(pair, lambda t: t.frame(v, 3, 0, 0, {p: (0, 5) for p in ALL}), lean_expected=False))
    await both(pair, lambda t: t.frame(v, 3, s3, 1, offsets(t, [("a", 0), ("b", 1)])), lean_expected=True)
    # follower 2 learns the new high watermarks (lean: answers offsets only), then nothing
    await both(pair, lambda t: t.frame(v, 2, s2, 3, {}), lean_expected=True)
    await both(pair, lambda t: t.frame(v, 2, s2, 4, {}), lean_expected=True)
    # records in two partitions of two topics, one read at a time by the partition limit
    for t in pair:
        t.append("a", 2, 7)
        t.append("b", 0, 8)
        t.append("b", 0, 9)
    await both(pair, lambda t: t.frame(v, 2, s2, 5, {}), lean_expected=True)
    await both(pair, lambda t: t.frame(v, 2, s2, 6, offsets(t, [("a", 2), ("b", 0)])), lean_expected=True)
    await both(pair, lambda t: t.frame(v, 3, s3, 2, offsets(t, [("a", 2), ("b", 0)])), lean_expected=True)
    # news of a high watermark goes out at once (kafkafast.replica.fetch.hw.delay.ms 0), without
    # waiting for min_bytes: the records appended meanwhile are not in it
    ans = await both(pair, lambda t: t.frame(v, 2, s2, 7, {}, max_wait_ms=2000, min_bytes=1), lean_expected=True,
                     during=lambda t: t.append("a", 0, 10))
    assert bytes([10]) * 50 not in ans
    # a parked lean fetch woken by an append answers its records
    await both(pair, lambda t: t.frame(v, 2, s2, 8, offsets(t, [("a", 0)]), max_wait_ms=2000, min_bytes=1),
               lean_expected=True, during=lambda t: t.append("a", 1, 11))
    await both(pair, lambda t: t.frame(v, 2, s2, 9, offsets(t, [("a", 1)])), lean_expected=True)
    # a new leader epoch here the follower has not learnt: general, FENCED_LEADER_EPOCH
    for t in pair:
        t.lead("b", 0, 6)
    ans = await both(pair, lambda t: t.frame(v, 2, s2, 10, {}), lean_expected=False)
    await both(pair, lambda t: t.frame(v, 2, s2, 11, {("b", 0): (t.part("b", 0).log.log_end_offset, 6)}),
               lean_expected=True)
    # forgetting a partition: general
    await both(pair, lambda t: t.frame(v, 2, s2, 12, {}, forget=[("a", 1)]), lean_expected=False)
    await both(pair, lambda t: t.frame(v, 2, s2, 13, {}), lean_expected=True)
    # a parked lean fetch whose partition moves to another leader hands over to the general path
    await both(pair, lambda t: t.frame(v, 2, s2, 14, {}, max_wait_ms=300, min_bytes=1), lean_expected=True,
               during=lambda t: t.lead("a", 2, 6, leader=t.node + 1))
    # that partition led elsewhere: general, NOT_LEADER_OR_FOLLOWER
    ans = await both(pair, lambda t: t.frame(v, 2, s2, 15, {}), lean_expected=False)
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.to_bytes(2, "big") in ans
    # the session of the other follower still lean where it can be: not after the move
    await both(pair, lambda t: t.frame(v, 3, s3, 3, {}), lean_expected=False)
    # a stale session epoch: general, INVALID_FETCH_SESSION_EPOCH
    ans = await both(pair, lambda t: t.frame(v, 2, s2, 3, {}), lean_expected=False)


def test_with_the_metrics_recorder_on_lean_answers_are_the_same_and_counted(tmp_path):
    """The recorder on (in a child: enabling it is process-wide): the same bytes, and each
    partition a lean fetch answered counted in its topic's fetch request total, as the general
    path's `Broker.dispatch` counts them."""
    script = f"""
import asyncio, pathlib
from kafkafast.metrics import recorder
from kafkafast.protocol import api
from tests.unit import test_follower_fetch_lean as T
pathlib.Path({str(tmp_path / "metrics")!r}).mkdir()
recorder.enable({str(tmp_path / "metrics")!r})

async def main():
    pair = await T.twins(pathlib.Path({str(tmp_path)!r}))
    lean = pair[0]
    try:
        await T.scenario(pair, 13)
        before = recorder._rates(1, "a")[0]._value.get()
        frame = lean.frame(13, 2, 0, 0, {{("a", 0): (0, 5), ("a", 1): (0, 5)}})
        sid = lean.session_of(api.encode_response(1, 13, 0, await T.fetch.handle(
            lean.broker, T.RequestContext(*api.decode_request(frame)[:1], 13, "c", None, False),
            api.decode_request(frame)[1], 13))[0])
        lean.append("a", 0, 40)
        lean.append("a", 1, 41)
        taken = T.fetch.follower_fetch(lean.broker, lean.frame(13, 2, sid, 1, {{}}), None, False)
        assert taken is not None
        await T.fetch.answer_follower_fetch(lean.broker, taken, None, False)
        await asyncio.sleep(0)
        print("counted", recorder._rates(1, "a")[0]._value.get() - before)
    finally:
        for t in pair:
            await t.broker.stop()
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "counted 2.0" in out.stdout


@pytest.mark.parametrize("version", [12, 13])
def test_a_session_reordered_between_lean_fetches_is_answered_in_its_new_order(tmp_path, version):
    """The lean path keeps its walk of a session's partitions between fetches
    (`FetchSession.lean`); an answer that moves partitions to the end of the session changes the
    topic responses of the next answer (a-1, b-0, a-0: two responses of topic a), which must be
    the general path's."""
    async def main():
        pair = await twins(tmp_path)
        try:
            mine = [("a", 0), ("a", 1), ("b", 0)]
            v = version
            s2 = pair[0].session_of(await both(pair, lambda t: t.frame(v, 2, 0, 0, offsets(t, mine)),
                                               lean_expected=False))
            await both(pair, lambda t: t.frame(v, 2, s2, 1, {}), lean_expected=True)
            await both(pair, lambda t: t.frame(v, 2, s2, 2, {}), lean_expected=True)  # the walk kept
            for t in pair:
                t.append("a", 0, 50)
            await both(pair, lambda t: t.frame(v, 2, s2, 3, {}), lean_expected=True)  # a-0 moves to the end
            lean = pair[0].broker.fetch_sessions.sessions[s2]
            assert list(lean.partitions) == [("a", 1), ("b", 0), ("a", 0)]
            at = {id(t): offsets(t, [("a", 0)]) for t in pair}  # a-0 read: the follower's next offset
            for t in pair:
                t.append("a", 0, 51)
                t.append("a", 1, 52)
            ans = await both(pair, lambda t: t.frame(v, 2, s2, 4, at[id(t)]), lean_expected=True)
            assert bytes([51]) * 50 in ans and bytes([52]) * 50 in ans
            assert list(lean.partitions) == [("b", 0), ("a", 1), ("a", 0)]
            await both(pair, lambda t: t.frame(v, 2, s2, 5, offsets(t, [("a", 0), ("a", 1)])), lean_expected=True)
        finally:
            for t in pair:
                await t.broker.stop()
    asyncio.run(main())


def test_a_partition_made_again_is_walked_anew(tmp_path):
    """A topic deleted and created again under the same name (v12 names topics): the kept walk
    holds the old Partition; the next fetch walks the session anew and goes on lean."""
    async def main():
        pair = await twins(tmp_path)
        try:
            mine = [("a", 0), ("b", 0)]
            s2 = pair[0].session_of(await both(pair, lambda t: t.frame(12, 2, 0, 0, offsets(t, mine)),
                                               lean_expected=False))
            await both(pair, lambda t: t.frame(12, 2, s2, 1, {}), lean_expected=True)
            for t in pair:
                t.broker.local_delete_topic("b")
                t.broker.create_topic("b", TOPICS["b"])
                for i in range(TOPICS["b"]):
                    t.lead("b", i, 5)
                t.append("b", 0, 60)
            ans = await both(pair, lambda t: t.frame(12, 2, s2, 2, {}), lean_expected=True)  # the old offset
            assert ErrorCode.OFFSET_OUT_OF_RANGE.to_bytes(2, "big") in ans
            ans = await both(pair, lambda t: t.frame(12, 2, s2, 3, {("b", 0): (0, 5)}), lean_expected=True)
            assert bytes([60]) * 50 in ans
            await both(pair, lambda t: t.frame(12, 2, s2, 4, offsets(t, [("b", 0)])), lean_expected=True)
        finally:
            for t in pair:
                await t.broker.stop()
    asyncio.run(main())
