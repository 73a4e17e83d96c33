"""A leader that cannot confirm its leadership stops appending (issue 28, 2; docs/ARCHITECTURE.md,
"Self-fencing of a cut-off leader"): while its ZooKeeper session is suspended or lost, or
ZooKeeper has not answered it for the lease (half the session timeout), or its session
expired since the controller last named it leader, every produce to a partition it leads
is answered NOT_LEADER_OR_FOLLOWER (an acks=0 one by closing the connection, as Kafka does
for any acks=0 error), so clients move to the new leader; its log never takes the records.
A healthy cluster under load is never fenced."""
from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from tests.cluster.conftest import workers_of
from tests.support.cluster import KafkaCluster
from tests.support.raw_client import RawClient

TOPIC = "fenced"
NOT_LEADER_OR_FOLLOWER = 6
PRODUCE_VERSION = 8


def _cluster(tmp_path, request, settings=None):
    c = KafkaCluster(tmp_path, workers=workers_of(request), settings=settings)
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture
def zk_pause_cluster(tmp_path, request):
    """12 s sessions (a 6 s lease): ZooKeeper can be paused past the lease and resumed well
    before any session expires."""
    yield from _cluster(tmp_path, request, {"zookeeper.session.timeout.ms": "12000"})


@pytest.fixture
def pause_cluster(tmp_path, request):
    """6 s sessions (a 3 s lease), replica.lag.time.max.ms=4000."""
    yield from _cluster(tmp_path, request)


def _send_produce(port: int, partition: int, value: bytes, acks: int) -> RawClient:
    """A connection with one produce request sent (not answered yet)."""
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    rc = RawClient(port, timeout=60)
    rc.send_raw(api.encode_request(req, PRODUCE_VERSION, 1, "fencing-test"))
    return rc


def _answer(rc: RawClient) -> int:
    with rc:
        frame = rc.recv_frame()
    assert frame is not None, "the broker closed the connection of an acks=1 produce"
    _, resp = api.decode_response(0, PRODUCE_VERSION, frame)
    return resp.responses[0].partition_responses[0].error_code


def _produce(port: int, partition: int, value: bytes) -> int:
    return _answer(_send_produce(port, partition, value, acks=1))


def _closed_without_answer(rc: RawClient) -> bool:
    """An acks=0 produce the broker refused: it closes the connection (no answer is ever sent)."""
    with rc:
        rc.sock.settimeout(15)
        return rc.recv_frame() is None


def _stored(broker, partition: int, value: bytes) -> bool:
    """Whether any segment file of the broker's replica holds `value` (uncompressed batches)."""
    d = broker.data_dir / f"{TOPIC}-{partition}"
    return any(value in f.read_bytes() for f in d.glob("*.log"))


def test_a_leader_cut_from_zookeeper_refuses_produce_within_the_lease_and_takes_it_again_after(zk_pause_cluster):
    c = zk_pause_cluster
    c.create_topic(TOPIC, 1, 3, assignment=[[1, 2, 3]])
    leader = c.brokers[1]
    assert _produce(leader.port, 0, b"before") == 0
    tag = uuid.uuid4().hex.encode()
    zookeeper = c.zookeeper.proc.pid
    os.killpg(zookeeper, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        sent: list[bytes] = []

        def refused() -> bool:
            sent.append(tag + b"-acks1-%d" % len(sent))
            return _produce(leader.port, 0, sent[-1]) == NOT_LEADER_OR_FOLLOWER

        c.wait_for(refused, 6 + 1.5, "the leader refusing acks=1 produce (6 s lease)", interval=0.2)
        fenced_after = time.monotonic() - paused
        assert _closed_without_answer(_send_produce(leader.port, 0, tag + b"-acks0", acks=0))
        assert not _stored(leader, 0, sent[-1]) and not _stored(leader, 0, tag + b"-acks0")
    finally:
        os.killpg(zookeeper, signal.SIGCONT)
    assert fenced_after <= 6 + 1.5
    c.wait_for(lambda: _produce(leader.port, 0, tag + b"-after") == 0, 30, "the leader taking produce again")
    assert _stored(leader, 0, tag + b"-after")
    assert c.leader(TOPIC, 0) == 1  # no election: the sessions never expired
    log = leader.log_path.read_text(errors="replace")
    assert "fenced-0: not appending as leader at epoch" in log and "fenced-0: leadership at epoch" in log


@pytest.mark.parametrize("pause_cluster", [0, 2], indirect=True)
def test_a_leader_paused_past_its_session_appends_nothing_queued_for_it(pause_cluster):
    c = pause_cluster
    c.create_topic(TOPIC, 2, 3, assignment=[[1, 2, 3], [1, 2, 3]])  # with 2 workers each worker owns one
    leader = c.brokers[1]
    for p in range(2):
        assert _produce(leader.port, p, b"before") == 0
    tag = uuid.uuid4().hex.encode()
    group = os.getpgid(leader.proc.pid)
    os.killpg(group, signal.SIGSTOP)  # the supervisor and every worker
    try:
        # queued in the stopped broker's sockets (connections land on any worker)
        acks1 = [(i % 2, tag + b"-acks1-%d" % i) for i in range(6)]
        acks0 = [(i % 2, tag + b"-acks0-%d" % i) for i in range(4)]
        waiting = [_send_produce(leader.port, p, v, acks=1) for p, v in acks1]
        unanswered = [_send_produce(leader.port, p, v, acks=0) for p, v in acks0]
        c.wait_for(lambda: 1 not in c.registered(), 6 + 15, "the stopped leader's session expired")
        c.wait_for(lambda: all(c.leader(TOPIC, p) in (2, 3) for p in range(2)), 15, "new leaders elected")
    finally:
        os.killpg(group, signal.SIGCONT)
    assert [_answer(rc) for rc in waiting] == [NOT_LEADER_OR_FOLLOWER] * len(acks1)
    assert all(_closed_without_answer(rc) for rc in unanswered)
    for p, v in acks1 + acks0:
        assert not _stored(leader, p, v), f"{v!r} in broker 1's log of {TOPIC}-{p}"
    c.wait_for(lambda: all(sorted(c.isr(TOPIC, p)) == [1, 2, 3] for p in range(2)), 40,
               "the old leader back in every ISR as a follower")
    for b in c.brokers.values():
        for p, v in acks1 + acks0:
            assert not _stored(b, p, v), f"{v!r} in broker {b.data_dir.name}'s log of {TOPIC}-{p}"
    assert "not appending as leader at epoch" in leader.log_path.read_text(errors="replace")


@pytest.mark.parametrize("cluster", [0, 2], indirect=True)
def test_a_healthy_cluster_under_acks1_load_is_never_fenced(cluster):
    c = cluster
    topic_parts = 3
    c.create_topic(TOPIC, topic_parts, 3)
    leaders = {p: c.brokers[c.leader(TOPIC, p)] for p in range(topic_parts)}
    for p in range(topic_parts):  # every worker of the leader has applied the LeaderAndIsr
        c.wait_for(lambda: all(_produce(leaders[p].port, p, b"warm-up") == 0 for _ in range(8)), 15,
                   f"{TOPIC}-{p} taking produce on every connection")
    clients = {p: RawClient(leaders[p].port, timeout=30) for p in range(topic_parts)}
    answers: list[int] = []
    try:
        deadline = time.monotonic() + 4 * 3.0  # four leases of the 6 s sessions
        n = 0
        while time.monotonic() < deadline:
            p = n % topic_parts
            batch = encode_batch([(int(time.time() * 1000), None, b"load-%d" % n, [])])
            req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                    ProduceRequest.PartitionProduceData(index=p, records=batch)])])
            answers.append(clients[p].request(req, PRODUCE_VERSION).responses[0].partition_responses[0].error_code)
            n += 1
    finally:
        for rc in clients.values():
            rc.close()
    assert len(answers) > 100 and set(answers) == {0}
    for b in c.brokers.values():
        assert "not appending as leader" not in b.log_path.read_text(errors="replace")
