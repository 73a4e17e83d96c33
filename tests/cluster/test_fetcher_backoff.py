"""What holds a new leadership's first acks=all produces, and no longer does:
- a follower's back-off after an error is brief at first: 50 ms, twice as long after each further
  error in a row, at most replica.fetch.backoff.ms. A leader that does not know the partition yet
  when the follower first fetches it answers UNKNOWN_TOPIC_OR_PARTITION: the LeaderAndIsr reached
  the follower first or, with worker processes, the leader's worker serving the fetch has not
  applied it yet. A fixed back-off held those produces for that long;
- a follower's fetch parked at the leader before the leader took a new partition does not name
  it: the leader answers its parked fetches when it takes a leadership, and until the follower
  fetched the partition (10 s at most) it parks that follower's fetches only briefly (the follower
  may start following after that answer, even a second or more later). Otherwise the partition's
  first fetch waited for that parked one, up to replica.fetch.wait.max.ms;
- a partition that a leader leaves out of its OffsetForLeaderEpoch answer (not keeping to the
  protocol) backs off as after an error; it was asked about again at once, in a loop;
- while a partition backs off, the follower's fetch of the others asks the leader to hold it no
  longer than until that back-off ends; else the partition waited for the long poll of idle ones
  (replica.fetch.wait.max.ms), whatever its back-off."""
from __future__ import annotations

import time

import pytest

from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from kafkafast.runtime.shm import owner_for
from tests.support.cluster import FaultyCluster
from tests.support.raw_client import RawClient

TOPIC = "backoff"
# far above any wait below: a follower that waited the whole back-off, or a whole parked
# fetch, once fails the test (a follower whose log end is the leader's stays in the ISR)
SETTINGS = {"replica.fetch.backoff.ms": "60000", "replica.fetch.wait.max.ms": "30000",
            "replica.lag.time.max.ms": "60000"}
WORKERS = 2  # (the second fixture's)
ERRORS = 4  # in a row: 50 + 100 + 200 + 400 ms of back-off


@pytest.fixture(scope="module", params=[0, WORKERS], ids=["one-process", "workers2"])
def backoff_cluster(tmp_path_factory, request):
    """Two brokers with faults and SETTINGS."""
    c = FaultyCluster(tmp_path_factory.mktemp(f"backoff-w{request.param}"), size=2, workers=request.param,
                      settings=SETTINGS)
    try:
        yield c.start()
    finally:
        c.close()


def _produce(port: int, value: bytes, acks: int, topic: str = TOPIC) -> tuple[int, int]:
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    with RawClient(port, timeout=30) as rc:
        pr = rc.request(req, 8).responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def test_a_follower_refused_several_times_in_a_row_fetches_again_well_within_its_back_off(backoff_cluster):
    c = backoff_cluster
    c.create_topic(TOPIC, 1, 2, {"min.insync.replicas": "2"}, [[1, 2]])
    leader = c.brokers[1]
    assert _produce(leader.port, b"first", -1) == (0, 0)
    faults = c.faults(1)
    # the leader refuses the follower's next fetches of the partition, as a leader that has not
    # applied its LeaderAndIsr yet does; a new record makes the follower name it in its next one
    faults.error("Fetch", "UNKNOWN_TOPIC_OR_PARTITION", topic=TOPIC, partition=0, count=ERRORS)
    assert _produce(leader.port, b"second", 1) == (0, 1)
    c.wait_for(lambda: not faults.active(), 15, f"the follower's {ERRORS} refused fetches")
    # fetched again at once: the acks=all produce completes, with the follower still in the ISR
    assert _produce(leader.port, b"third", -1) == (0, 2)
    assert sorted(c.isr(TOPIC, 0)) == [1, 2]
    # and a follower that fetched without an error since starts again from the shortest back-off
    faults.error("Fetch", "UNKNOWN_TOPIC_OR_PARTITION", topic=TOPIC, partition=0, count=ERRORS)
    assert _produce(leader.port, b"fourth", 1) == (0, 3)
    # (from where the first run stopped, these would take 0.8 + 1.6 + 3.2 + 6.4 s)
    c.wait_for(lambda: not faults.active(), 6, f"the follower's {ERRORS} refused fetches, again")
    assert _produce(leader.port, b"fifth", -1) == (0, 4)


def test_a_new_leadership_answers_the_followers_parked_fetch(backoff_cluster):
    c = backoff_cluster
    leader = c.brokers[1]
    # partition 0 of both topics on the same worker of each broker (with worker processes): the
    # follower's one fetcher to the leader fetches both, one connection, one request at a time
    first = "parked"
    second = next(t for t in (f"new-{i}" for i in range(100)) if owner_for(t, 0, WORKERS) == owner_for(first, 0, WORKERS))
    c.create_topic(first, 1, 2, {"min.insync.replicas": "2"}, [[1, 2]])
    assert _produce(leader.port, b"a", -1, first) == (0, 0)
    time.sleep(2)  # the follower fetched it since: its fetch parks for 30 s
    c.create_topic(second, 1, 2, {"min.insync.replicas": "2"}, [[1, 2]])
    assert _produce(leader.port, b"b", -1, second) == (0, 0)  # (REQUEST_TIMED_OUT behind the parked fetch)
    assert _produce(leader.port, b"c", -1, first) == (0, 1)


def test_a_follower_that_takes_the_leaderships_news_late_fetches_the_partition_at_once(backoff_cluster):
    c = backoff_cluster
    leader = c.brokers[1]
    first = "early"  # (the same worker of each broker, as above)
    second = next(t for t in (f"late-{i}" for i in range(100)) if owner_for(t, 0, WORKERS) == owner_for(first, 0, WORKERS))
    c.create_topic(first, 1, 2, {"min.insync.replicas": "2"}, [[1, 2]])
    assert _produce(leader.port, b"a", -1, first) == (0, 0)
    # the follower applies the controller's LeaderAndIsr 1.5 s after the leader did (a loaded
    # machine): the leader's answer to its parked fetch comes long before it follows the partition
    late = c.faults(2)
    late.delay("LeaderAndIsr", 1500, before=True)
    c.create_topic(second, 1, 2, {"min.insync.replicas": "2"}, [[1, 2]])
    c.wait_for(lambda: not late.active(), 10, "the follower's LeaderAndIsr held")
    assert _produce(leader.port, b"b", -1, second) == (0, 0)  # (REQUEST_TIMED_OUT behind a parked fetch)
    assert _produce(leader.port, b"c", -1, first) == (0, 1)


def test_a_partition_left_out_of_the_leaders_epoch_answer_is_asked_again_after_a_back_off(backoff_cluster):
    c = backoff_cluster
    topic = "omitted"
    # an idle partition fetched beside it (the same fetcher, with worker processes too): the
    # follower's fetch of it parks for 30 s while the other is left out to back off
    steady = next(t for t in (f"steady-{i}" for i in range(100))
                  if owner_for(t, 0, WORKERS) == owner_for(topic, 0, WORKERS))
    leader = c.brokers[1]
    for t in (steady, topic):
        c.create_topic(t, 1, 2, {"min.insync.replicas": "2"}, [[1, 2]])
        assert _produce(leader.port, b"a", -1, t) == (0, 0)
    faults = c.faults(1)
    omitted = faults.omit("OffsetForLeaderEpoch", topic=topic, partition=0, count=ERRORS)
    # an out-of-range answer to its next fetch makes the follower truncate by leader epoch again
    faults.error("Fetch", "OFFSET_OUT_OF_RANGE", topic=topic, partition=0, count=1)
    assert _produce(leader.port, b"b", 1, topic) == (0, 1)
    uses: list[float] = []  # when each left-out answer was given
    left, deadline = ERRORS, time.monotonic() + 15
    while left and time.monotonic() < deadline:
        rule = next((r for r in faults.active() if r["id"] == omitted), None)
        now_left = rule["count"] if rule is not None else 0
        uses += [time.monotonic()] * (left - now_left)
        left = now_left
        time.sleep(0.005)
    assert left == 0, f"{left} of the {ERRORS} left-out answers not used within 15 s: {faults.active()}"
    # 100 + 200 + 400 ms of back-off between the first and the last (asked again at once: a few ms)
    assert uses[-1] - uses[0] >= 0.5, [round(t - uses[0], 3) for t in uses]
    # answered in full at the fifth, the follower fetches again: an acks=all produce completes
    assert _produce(leader.port, b"c", -1, topic) == (0, 2)
    assert sorted(c.isr(topic, 0)) == [1, 2]
