"""A leader deposed behind its back, whose extra records were truncated when it became a
follower, serves every offset when it leads again in the same process (issue 28, finding 1).

The old leader had mapped its offset index over records that its successor never got; the
truncation rewrote the index; the records fetched since sit at other positions. Before the fix
the reader kept the old index and every Fetch of the partition answered KAFKA_STORAGE_ERROR,
followers' and consumers' alike, until a restart."""
from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.records import iter_record_batches
from tests.cluster.test_isr import _log_end, _produce_raw
from tests.support.raw_client import RawClient

TOPIC = "regain"


def fetch_one(port: int, offset: int) -> tuple[int, dict[int, bytes]]:
    """(error code, {offset: value}) of a consumer Fetch at `offset` with a small partition limit."""
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic=TOPIC, partitions=[FetchRequest.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                               partition_max_bytes=1)])], forgotten_topics_data=[], rack_id="")
    with RawClient(port, timeout=15) as rc:
        p = rc.request(req, 12).responses[0].partitions[0]
    records = bytes(p.records or b"")
    return p.error_code, {r.offset: bytes(r.value) for _, recs in iter_record_batches(records) for r in recs}


def read_every_offset(port: int) -> list[bytes]:
    """The value at each offset up to the high watermark, each fetched on its own."""
    out: list[bytes] = []
    while True:
        code, got = fetch_one(port, len(out))
        assert code == 0, f"offset {len(out)}: error {code}"
        if not got:
            return out
        out.append(got[len(out)])


def produce_each(port: int, values: list[bytes], acks: int) -> None:
    """One batch per value, so the index has an entry for nearly every batch."""
    for v in values:
        assert _produce_raw(port, TOPIC, [v], acks=acks)[0] == 0


@pytest.mark.parametrize("cluster", [0, 2], indirect=True, ids=["workers0", "workers2"])
def test_a_deposed_leader_that_truncated_serves_every_offset_when_it_leads_again(cluster):
    c = cluster
    ctrl = c.controller_id()
    old, other = [b for b in c.brokers if b != ctrl][:2]  # neither is the controller: one failover only
    c.create_topic(TOPIC, 1, 3, {"index.interval.bytes": "1", "min.insync.replicas": "1"}, [[old, other, ctrl]])
    assert c.leader(TOPIC, 0) == old
    common = [b"common-%02d" % i for i in range(10)]
    produce_each(c.brokers[old].port, common, -1)
    c.wait_for(lambda: _log_end(c, other, TOPIC) == 10, 20, "the follower caught up")

    # One follower stops; the leader takes records only it and the other follower will have
    # (that follower's fetches read them through the leader's reader, which maps index entries
    # for them); then the leader stops too, past its ZooKeeper session, and the stopped
    # follower, still in the ISR and first in the assignment, is elected.
    os.killpg(c.brokers[other].proc.pid, signal.SIGSTOP)
    try:
        only_old = [b"only-old-%02d" % i for i in range(20)]
        produce_each(c.brokers[old].port, only_old, 1)
        c.wait_for(lambda: _log_end(c, ctrl, TOPIC) == 30, 3, "the running follower fetched them")
        os.killpg(c.brokers[old].proc.pid, signal.SIGSTOP)
    finally:
        os.killpg(c.brokers[other].proc.pid, signal.SIGCONT)
    try:
        c.wait_for(lambda: c.leader(TOPIC, 0) == other, 30, "the follower elected when the leader's session expired")
        new = [b"new-%02d-" % i + b"x" * (40 + i) for i in range(30)]  # other sizes: old entries land mid-batch
        # (ZooKeeper names the new leader before its LeaderAndIsr reaches every worker of it: until
        # then a produce is answered NOT_LEADER_OR_FOLLOWER and not appended)
        c.wait_for(lambda: _produce_raw(c.brokers[other].port, TOPIC, [new[0]], acks=1)[0] == 0, 15,
                   "the new leader taking produces")
        produce_each(c.brokers[other].port, new[1:], 1)
        # What the new leader holds: the common records, maybe the first few of the old leader's own
        # (a fetch parked before the follower stopped is answered, the records that came while the
        # answer was held for more among them, when the follower runs again), the new.
        want = c.wait_for(lambda: (got := read_every_offset(c.brokers[other].port))[-1:] == new[-1:] and got, 10,
                          "the new leader's high watermark at its log end")
        kept = want[10:-30]
        assert want[:10] == common and want[-30:] == new and kept == only_old[:len(kept)]
        assert len(kept) < 10, "the old leader has records past the new leader's: it must truncate"
    finally:
        os.killpg(c.brokers[old].proc.pid, signal.SIGCONT)

    c.wait_for(lambda: sorted(c.partition_state(TOPIC, 0)["isr"]) == sorted([old, other, ctrl]), 40,
               "the old leader back in the ISR, truncated and caught up")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    deadline = time.monotonic() + 30
    while c.leader(TOPIC, 0) != old:
        assert time.monotonic() < deadline, "the preferred leader was not elected"
        try:
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(15)
        except Exception:  # the controller may still be settling: ask again
            time.sleep(0.5)
    port = c.brokers[old].port

    def every_offset_served() -> bool:
        for o, value in enumerate(want):
            code, got = fetch_one(port, o)
            if code == 6:  # the LeaderAndIsr is still on its way to the old leader
                return False
            assert (code, got.get(o)) == (0, value), f"offset {o}: error {code}, offsets {sorted(got)}"
        return True

    c.wait_for(every_offset_served, 20, "the old leader leading again")
    assert fetch_one(port, len(want)) == (0, {})  # the log end: nothing more, and no error


@pytest.mark.parametrize("cluster", [2], indirect=True, ids=["workers2"])
def test_controller_requests_are_answered_by_the_controller_whichever_worker_takes_them(cluster):
    """Admin requests for the controller (ElectLeaders, ListPartitionReassignments) reach worker 0,
    which runs the controller, from a connection to any worker of the controller broker."""
    from kafkafast.protocol._generated.elect_leaders import ElectLeadersRequest
    from kafkafast.protocol._generated.list_partition_reassignments import ListPartitionReassignmentsRequest

    c = cluster
    c.create_topic("elect", 1, 3)
    port = c.brokers[c.controller_id()].port
    answers = set()
    for _ in range(16):  # SO_REUSEPORT spreads the connections over both workers
        with RawClient(port, timeout=15) as rc:
            listed = rc.request(ListPartitionReassignmentsRequest(timeout_ms=10000, topics=None), 0)
            elected = rc.request(ElectLeadersRequest(election_type=0, topic_partitions=[
                ElectLeadersRequest.TopicPartitions(topic="elect", partitions=[0])], timeout_ms=10000), 1)
        answers.add((listed.error_code, elected.error_code,
                     elected.replica_election_results[0].partition_result[0].error_code))
    assert answers == {(0, 0, 84)}, answers  # ELECTION_NOT_NEEDED: the preferred replica leads
