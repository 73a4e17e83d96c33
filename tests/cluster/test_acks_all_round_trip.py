"""acks=all in one follower fetch round, with no timer in the path (issue 25).

The followers long-poll their leader with replica.fetch.wait.max.ms=5000 here, so any step
of an acks=all produce that waited for a parked follower Fetch to time out would take
seconds: the append wakes the followers' parked fetches, their next Fetch (at the new log
end) moves the high watermark and answers the produce, and the leader answers those
fetches with the new high watermark with the next records, or after
kafkafast.replica.fetch.hw.delay.ms (HOLD_MS here) when none come (the followers learn it
without waiting out the fetch wait).
Measured on a quiet cluster with a raw client (one connection, one request at a time);
with 2 workers the requests may land on a worker that does not own the partition."""
from __future__ import annotations

import os
import select
import signal
import statistics
import time

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from tests.cluster.test_rolling import MetricsCluster
from tests.integration.test_metrics import scrape, value
from tests.support.cluster import KafkaCluster
from tests.support.raw_client import RawClient

FETCH_WAIT_MS = 5000
BOUND_S = 1.5  # well within the fetch wait: no timer of replica.fetch.wait.max.ms in the path
HOLD_MS = 400  # how long an answer carrying only a new high watermark waits for records


@pytest.fixture(scope="module", params=[0, 2], ids=["workers0", "workers2"])
def long_poll_cluster(tmp_path_factory, request):
    c = KafkaCluster(tmp_path_factory.mktemp(f"ackround-w{request.param}"), workers=request.param,
                     settings={"replica.fetch.wait.max.ms": str(FETCH_WAIT_MS),
                               "kafkafast.replica.fetch.hw.delay.ms": str(HOLD_MS)})
    try:
        yield c.start()
    finally:
        c.close()


def _produce_request(topic: str, value: bytes, partition: int = 0) -> ProduceRequest:
    """An acks=all Produce of one record to `partition`."""
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


def _produce(rc: RawClient, topic: str, value: bytes, partition: int = 0) -> tuple[int, int]:
    """(error code, base offset) of one acks=all Produce v8 of one record to `partition`."""
    pr = rc.request(_produce_request(topic, value, partition), 8).responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def _high_watermark(port: int, topic: str, partition: int = 0) -> int:
    """The high watermark a replica knows: a consumer's Fetch v11 at offset 0 (KIP-392 lets a
    follower serve it, up to the high watermark it learnt from its leader), not waiting."""
    F = FetchRequest
    req = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[F.FetchTopic(topic=topic, partitions=[
                F.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                 partition_max_bytes=1024)])])
    with RawClient(port, timeout=10) as rc:
        pd = rc.request(req, 11).responses[0].partitions[0]
    assert pd.error_code == 0, pd.error_code
    return pd.high_watermark


def test_acks_all_completes_within_one_follower_fetch_round(long_poll_cluster):
    c = long_poll_cluster
    c.create_topic("ackround", 1, 3, {"min.insync.replicas": "2"})
    state = c.partition_state("ackround", 0)
    leader = state["leader"]
    followers = [r for r in state["isr"] if r != leader]  # (created with the full ISR)
    with RawClient(c.brokers[leader].port, timeout=30) as rc:
        # connections and fetch sessions set up (retried while a worker that does not own the
        # partition has not applied the LeaderAndIsr yet)
        c.wait_for(lambda: _produce(rc, "ackround", b"warm-up")[0] == 0, 15, "an acks=all produce accepted")
        first = _high_watermark(c.brokers[leader].port, "ackround")
        # the followers' fetches are parked at the leader now (nothing new for up to 5 s)
        c.wait_for(lambda: all(_high_watermark(c.brokers[f].port, "ackround") == first for f in followers),
                   2 * FETCH_WAIT_MS / 1000, "the followers knowing the warm-up is replicated")
        took, learnt = [], []
        for i in range(first, first + 5):
            start = time.monotonic()
            assert _produce(rc, "ackround", b"v%d" % i) == (0, i)
            took.append(time.monotonic() - start)
            # the followers learn the new high watermark without waiting out their parked fetch
            c.wait_for(lambda: all(_high_watermark(c.brokers[f].port, "ackround") == i + 1 for f in followers),
                       2 * FETCH_WAIT_MS / 1000, f"the followers' high watermark at {i + 1}")
            learnt.append(time.monotonic() - start)
    assert statistics.median(took) < BOUND_S, took
    assert statistics.median(learnt) < BOUND_S, learnt
    assert max(learnt) < FETCH_WAIT_MS / 1000, learnt


def test_a_new_high_watermark_goes_to_the_followers_with_the_next_records(long_poll_cluster):
    """A follower's Fetch whose answer would carry only the moved high watermark is held for
    records (one round trip per append under load, not two), up to HOLD_MS when none come."""
    c = long_poll_cluster
    c.create_topic("hwnews", 1, 3, {"min.insync.replicas": "2"})
    state = c.partition_state("hwnews", 0)
    leader = state["leader"]
    followers = [r for r in state["isr"] if r != leader]

    def followers_know(hw: int) -> bool:
        return all(_high_watermark(c.brokers[f].port, "hwnews") >= hw for f in followers)

    with RawClient(c.brokers[leader].port, timeout=30) as rc:
        c.wait_for(lambda: _produce(rc, "hwnews", b"warm-up")[0] == 0, 15, "an acks=all produce accepted")
        first = _high_watermark(c.brokers[leader].port, "hwnews")
        c.wait_for(lambda: followers_know(first), 2 * FETCH_WAIT_MS / 1000, "the followers knowing the warm-up")
        # idle after one produce: the high watermark alone goes out after the hold, not at once
        start = time.monotonic()
        assert _produce(rc, "hwnews", b"alone") == (0, first)
        c.wait_for(lambda: followers_know(first + 1), 2 * FETCH_WAIT_MS / 1000, "the followers learning it")
        assert time.monotonic() - start >= HOLD_MS / 1000
        # the next produce's records carry it at once
        start = time.monotonic()
        assert _produce(rc, "hwnews", b"first") == (0, first + 1)
        assert _produce(rc, "hwnews", b"next") == (0, first + 2)
        c.wait_for(lambda: followers_know(first + 2), 2 * FETCH_WAIT_MS / 1000, "the followers learning it")
        assert time.monotonic() - start < HOLD_MS / 1000


def test_quiet_partitions_of_a_follower_session_get_their_records_and_high_watermark(long_poll_cluster):
    """A follower's incremental fetch passes over the session's partitions with nothing new for
    it (at the log end, offsets answered already): each partition, written in turn while the
    others stay quiet, still reaches both followers' logs (acks=all, min.insync.replicas=3) and
    they learn its new high watermark within the hold, not at the end of their fetch wait; the
    followers stay in the ISR."""
    c = long_poll_cluster
    parts = 6
    c.create_topic("quiet", parts, 3, {"min.insync.replicas": "3"})
    states = {p: c.partition_state("quiet", p) for p in range(parts)}
    for p, state in states.items():
        leader = state["leader"]
        followers = [r for r in state["isr"] if r != leader]
        with RawClient(c.brokers[leader].port, timeout=30) as rc:
            c.wait_for(lambda: _produce(rc, "quiet", b"warm-up", p)[0] == 0, 15, f"an acks=all produce to [{p}]")
            for n in range(2, 4):
                start = time.monotonic()
                assert _produce(rc, "quiet", b"v%d" % n, p) == (0, n - 1)
                c.wait_for(lambda: all(_high_watermark(c.brokers[f].port, "quiet", p) == n for f in followers),
                           2 * FETCH_WAIT_MS / 1000, f"the followers' high watermark of [{p}] at {n}")
                assert time.monotonic() - start < FETCH_WAIT_MS / 1000
    for p in range(parts):  # the quiet ones kept theirs, and no ISR changed
        state = c.partition_state("quiet", p)
        assert sorted(state["isr"]) == sorted(states[p]["isr"]) and len(state["isr"]) == 3, state
        assert state["leader_epoch"] == states[p]["leader_epoch"], (states[p], state)
        for f in state["isr"]:
            assert _high_watermark(c.brokers[f].port, "quiet", p) == 3


# Answers with which a round is tried again: the leader could not confirm its leadership in
# time (its ZooKeeper lease, on a loaded machine), or a follower had just left the ISR.
RETRIABLE = {6: "NOT_LEADER_OR_FOLLOWER", 19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND"}


def test_the_next_produce_is_appended_while_an_acks_all_produce_waits(long_poll_cluster):
    """A connection handles its next request while an acks=all produce waits for replication
    (the appends in request order, the answers too): with both followers stopped, the second
    of two produces sent back to back on one connection is in the leader's log before the
    first is answered; once the followers run again both are answered, in order. A round
    whose produces were refused with a retriable error (nothing to wait for) is tried again,
    up to three times."""
    c = long_poll_cluster
    c.create_topic("pipelined", 1, 3, {"min.insync.replicas": "2"})
    state = c.partition_state("pipelined", 0)
    leader = state["leader"]
    followers = [r for r in state["isr"] if r != leader]
    log_dir = c.brokers[leader].data_dir / "pipelined-0"

    def log_bytes() -> int:
        return sum(f.stat().st_size for f in log_dir.glob("*.log"))

    with RawClient(c.brokers[leader].port, timeout=30) as rc:
        for attempt in range(3):
            c.wait_for(lambda: _produce(rc, "pipelined", b"warm-up")[0] == 0, 15, "an acks=all produce accepted")
            first = _high_watermark(c.brokers[leader].port, "pipelined")
            requests = [_produce_request("pipelined", b"one"), _produce_request("pipelined", b"two")]
            size = sum(len(r.topic_data[0].partition_data[0].records) for r in requests)
            before = log_bytes()
            base = rc.correlation
            for f in followers:  # (well within replica.lag.time.max.ms: they stay in the ISR)
                os.killpg(c.brokers[f].proc.pid, signal.SIGSTOP)
            try:
                for corr, req in enumerate(requests, start=base + 1):
                    rc.send_raw(api.encode_request(req, 8, corr, rc.client_id))
                rc.correlation = base + len(requests)
                deadline = time.monotonic() + 2.5
                answered_early = False
                while log_bytes() != before + size and time.monotonic() < deadline:
                    if select.select([rc.sock], [], [], 0.02)[0]:
                        answered_early = True  # refused (or, wrongly, answered without the followers)
                        break
                appended = log_bytes() - before
                waiting = select.select([rc.sock], [], [], 0)[0] == []  # the first still waits for the followers
            finally:
                for f in followers:
                    os.killpg(c.brokers[f].proc.pid, signal.SIGCONT)
            answers = []
            for _ in requests:
                corr, body = api.decode_response(0, 8, rc.recv_frame())
                pr = body.responses[0].partition_responses[0]
                answers.append((corr, pr.error_code, pr.base_offset))
            refused = [RETRIABLE[code] for _, code, _ in answers if code in RETRIABLE]
            if refused and attempt < 2:
                print(f"round {attempt}: answered {answers} ({refused}, {appended} of {size} bytes appended): again")
                continue
            break
    assert (appended, answered_early, waiting) == (size, False, True), (appended, size, answers)
    assert answers == [(base + 1, 0, first), (base + 2, 0, first + 1)]


REQUESTS = "kafkafast_fetch_session_incremental_requests_total"
NAMED = "kafkafast_fetch_session_incremental_partitions_total"


@pytest.fixture(scope="module")
def counted_cluster(tmp_path_factory):
    """One process per broker, /metrics on; the followers long-poll and an answer carrying only
    a new high watermark is held for records longer than this module's steps take."""
    c = MetricsCluster(tmp_path_factory.mktemp("ackround-counted"),
                       settings={"replica.fetch.wait.max.ms": str(FETCH_WAIT_MS),
                                 "kafkafast.replica.fetch.hw.delay.ms": str(FETCH_WAIT_MS - 1000)})
    try:
        yield c.start()
    finally:
        c.close()


def test_produces_received_together_ride_one_follower_answer(counted_cluster):
    """Two acks=all produces to two partitions of one leader, sent back to back on one
    connection while the followers' fetches are parked there: the fetch woken by the first
    append reads after the second append too (handlers/fetch.py `_appends_first`), so each
    follower's next Fetch names both partitions and moves both high watermarks: one request per
    follower, not one per produce (counted on the leader)."""
    c = counted_cluster
    c.create_topic("together", 6, 3, {"min.insync.replicas": "2"})
    states = {p: c.partition_state("together", p) for p in range(6)}
    by_leader: dict[int, list[int]] = {}
    for p, state in states.items():
        by_leader.setdefault(state["leader"], []).append(p)
    leader, (pa, pb) = next((b, ps[:2]) for b, ps in by_leader.items() if len(ps) >= 2)
    followers = [r for r in states[pa]["isr"] if r != leader]
    assert sorted(followers) == sorted(r for r in states[pb]["isr"] if r != leader)

    def counts() -> tuple[float, float]:
        m = scrape(c.metrics_ports[leader])
        return value(m, REQUESTS, follower="true"), value(m, NAMED, follower="true")

    with RawClient(c.brokers[leader].port, timeout=30) as rc:
        for p in (pa, pb):
            c.wait_for(lambda: _produce(rc, "together", b"warm-up", p)[0] == 0, 15, f"an acks=all produce to [{p}]")
        # the followers know both high watermarks (after the hold): their next fetches park, named nothing
        c.wait_for(lambda: all(_high_watermark(c.brokers[f].port, "together", p) == 1
                               for f in followers for p in (pa, pb)),
                   2 * FETCH_WAIT_MS / 1000, "the followers knowing the warm-ups")
        time.sleep(0.2)
        before = counts()
        requests = [_produce_request("together", b"a", pa), _produce_request("together", b"b", pb)]
        rc.send_raw(b"".join(api.encode_request(req, 8, corr, rc.client_id)
                             for corr, req in enumerate(requests, start=rc.correlation + 1)))
        answers = []
        for _ in requests:
            _, body = api.decode_response(0, 8, rc.recv_frame())
            pr = body.responses[0].partition_responses[0]
            answers.append((pr.error_code, pr.base_offset))
        after = counts()
    assert answers == [(0, 1), (0, 1)]
    # each follower's Fetch after the answer named both partitions (whose log ends moved): one
    # request per follower (2 naming 4 partitions; a fetch whose long poll ran out meanwhile
    # adds a request naming none), where an answer per produce takes one request per partition
    requests_made, named = after[0] - before[0], after[1] - before[1]
    assert named == 2 * len(followers) and requests_made < named, (requests_made, named)
