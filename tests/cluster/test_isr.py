"""ISR shrink and expansion through AlterPartition, min.insync.replicas, unclean election and
truncation by leader epoch (brokers with 30 s ZooKeeper sessions: SIGSTOP does not expire them)."""
from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from tests.support.raw_client import RawClient

NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


def _produce_raw(port: int, topic: str, values: list[bytes], acks: int = -1) -> tuple[int, int]:
    """(error code, base offset) of one Produce v8 to partition 0."""
    now = int(time.time() * 1000)
    batch = encode_batch([(now, None, v, []) for v in values])
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    with RawClient(port, timeout=30) as rc:
        resp = rc.request(req, 8)
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def _acks_all_until_refused_before_append(port: int, topic: str, within_s: float = 10.0) -> list[int]:
    """The codes of acks=all produces, repeated while they answer NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (the leader has not yet applied an ISR shrink ZooKeeper already shows) and for at most
    `within_s`; the last is the first other answer."""
    deadline = time.monotonic() + within_s
    codes = [_produce_raw(port, topic, [b"c"])[0]]
    while codes[-1] == NOT_ENOUGH_REPLICAS_AFTER_APPEND and time.monotonic() < deadline:
        time.sleep(0.1)
        codes.append(_produce_raw(port, topic, [b"c"])[0])
    return codes


def _produce_to_leader(c, broker_id: int, topic: str, values: list[bytes]) -> tuple[int, int]:
    """acks=1 produce, retried while the broker has not yet applied its LeaderAndIsr (a
    restarted broker knows nothing of the topic until then: UNKNOWN_TOPIC_OR_PARTITION)."""
    return c.wait_for(lambda: (r := _produce_raw(c.brokers[broker_id].port, topic, values, acks=1))[0] not in (3, 6)
                      and r,
                      15, f"broker {broker_id} leading {topic}")


def test_stopped_followers_leave_the_isr_and_acks_all_needs_min_isr(slow_session_cluster):
    c = slow_session_cluster
    # the controller leads: ISR changes need a running controller (as in Kafka)
    ctrl = c.controller_id()
    c.create_topic("isr", 1, 3, {"min.insync.replicas": "2"}, [[ctrl] + [b for b in c.brokers if b != ctrl]])
    state = c.partition_state("isr", 0)
    leader, epoch = state["leader"], state["leader_epoch"]
    f1, f2 = [r for r in state["isr"] if r != leader]
    lead = c.brokers[leader]
    assert _produce_raw(lead.port, "isr", [b"a"])[0] == 0
    os.killpg(c.brokers[f1].proc.pid, signal.SIGSTOP)
    try:
        # a follower whose log end equals the leader's is in sync however long it is silent
        # (Kafka's rule), so the log moves on with acks=1 while the follower is stopped
        assert _produce_raw(lead.port, "isr", [b"moves-on"], acks=1)[0] == 0
        c.wait_for(lambda: sorted(c.partition_state("isr", 0)["isr"]) == sorted([leader, f2]), 20,
                   "the stopped follower out of the ISR")
        assert c.partition_state("isr", 0)["leader_epoch"] == epoch  # an ISR change, not an election
        assert _produce_raw(lead.port, "isr", [b"b"]) == (0, 2)
        os.killpg(c.brokers[f2].proc.pid, signal.SIGSTOP)
        try:
            assert _produce_raw(lead.port, "isr", [b"moves-on-2"], acks=1)[0] == 0
            c.wait_for(lambda: c.partition_state("isr", 0)["isr"] == [leader], 20, "ISR of the leader alone")
            # ZooKeeper holds the new ISR before the leader has read the controller's answer;
            # a produce in between is appended and then refused (AFTER_APPEND, as in Kafka)
            codes = _acks_all_until_refused_before_append(lead.port, "isr")
            assert codes[-1] == NOT_ENOUGH_REPLICAS, codes
            assert _produce_raw(lead.port, "isr", [b"d"], acks=1)[0] == 0  # acks=1 is not held back
        finally:
            os.killpg(c.brokers[f2].proc.pid, signal.SIGCONT)
    finally:
        os.killpg(c.brokers[f1].proc.pid, signal.SIGCONT)
    c.wait_for(lambda: sorted(c.partition_state("isr", 0)["isr"]) == sorted([leader, f1, f2]), 30,
               "both followers back in the ISR")
    assert _produce_raw(lead.port, "isr", [b"e"])[0] == 0


def test_unclean_election_off_keeps_the_partition_offline_until_an_isr_member_returns(slow_session_cluster):
    c = slow_session_cluster
    c.create_topic("clean", 1, 2)
    state = c.partition_state("clean", 0)
    leader = state["leader"]
    follower = next(r for r in state["isr"] if r != leader)
    assert c.brokers[follower].stop() == 0
    c.wait_for(lambda: c.partition_state("clean", 0)["isr"] == [leader], 15, "follower out of the ISR")
    assert c.brokers[leader].stop() == 0
    c.wait_for(lambda: c.leader("clean", 0) == -1, 15, "the partition offline")
    assert c.partition_state("clean", 0)["isr"] == [leader]  # the last ISR member stays
    c.brokers[follower].start(timeout=60)
    time.sleep(3)
    assert c.leader("clean", 0) == -1  # a replica outside the ISR is not elected
    c.brokers[leader].start(timeout=60)
    c.wait_for(lambda: c.leader("clean", 0) == leader, 20, "the ISR member leading again")


def _read(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "read", "enable.auto.commit": False})
    try:
        end = cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        cons.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 60
        while (out[-1][0] + 1 if out else 0) < end:
            assert time.monotonic() < deadline
            m = cons.poll(1.0)
            if m is not None and not m.error():
                out.append((m.offset(), m.value()))
        return out
    finally:
        cons.close()


def test_unclean_leader_and_truncation_by_leader_epoch(slow_session_cluster):
    """The old leader had records 10-14 that the lagging replica never got; the replica becomes
    leader (unclean) and writes 10-12. The old leader's high watermark is 15, so truncating to it
    would keep its 10-14: truncation by leader epoch removes them."""
    c = slow_session_cluster
    ctrl = c.controller_id()
    c.create_topic("diverge", 1, 2, {"unclean.leader.election.enable": "true"},
                   [[ctrl, next(b for b in c.brokers if b != ctrl)]])
    state = c.partition_state("diverge", 0)
    old, lagging = state["leader"], next(r for r in state["isr"] if r != state["leader"])
    assert _produce_raw(c.brokers[old].port, "diverge", [b"common-%d" % i for i in range(10)])[0] == 0
    c.wait_for(lambda: _log_end(c, lagging, "diverge") == 10, 20, "the follower caught up")
    assert c.brokers[lagging].stop() == 0  # out of the ISR at once (its registration is gone)
    c.wait_for(lambda: c.partition_state("diverge", 0)["isr"] == [old], 20, "the follower out of the ISR")
    assert _produce_raw(c.brokers[old].port, "diverge", [b"only-old-%d" % i for i in range(5)], acks=1) == (0, 10)
    assert c.brokers[old].stop() == 0
    c.wait_for(lambda: c.leader("diverge", 0) == -1, 20, "the partition offline")
    c.brokers[lagging].start(timeout=60)
    c.wait_for(lambda: c.leader("diverge", 0) == lagging, 20, "the lagging replica elected (unclean)")
    assert _produce_to_leader(c, lagging, "diverge", [b"new-%d" % i for i in range(3)]) == (0, 10)
    c.brokers[old].start(timeout=60)
    c.wait_for(lambda: sorted(c.partition_state("diverge", 0)["isr"]) == sorted([old, lagging]), 30,
               "the old leader back in the ISR")
    assert c.brokers[lagging].stop() == 0  # now the old leader must serve what the new one wrote
    c.wait_for(lambda: c.leader("diverge", 0) == old, 20, "the old leader leading again")
    records = _read(c.bootstrap, "diverge")
    assert records == [(i, b"common-%d" % i) for i in range(10)] + [(10 + i, b"new-%d" % i) for i in range(3)]
    c.brokers[lagging].start(timeout=60)


def _log_end(c, broker_id: int, topic: str) -> int:
    """A replica's log end offset, from the batch headers in its segment files."""
    end = 0
    for seg in sorted((c.root / f"broker-{broker_id}" / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base = int.from_bytes(data[pos:pos + 8], "big")
            length = int.from_bytes(data[pos + 8:pos + 12], "big")
            last_delta = int.from_bytes(data[pos + 23:pos + 27], "big")
            end = max(end, base + last_delta + 1)
            pos += 12 + length
    return end


@pytest.mark.parametrize("slow_session_cluster", [2], indirect=True, ids=["workers2"])
def test_stopped_followers_leave_the_isr_and_acks_all_needs_min_isr_with_worker_processes(slow_session_cluster):
    """The same, with brokers of two worker processes (replication over the pre-fork runtime)."""
    test_stopped_followers_leave_the_isr_and_acks_all_needs_min_isr(slow_session_cluster)
