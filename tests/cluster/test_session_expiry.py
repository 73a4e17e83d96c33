"""ZooKeeper session expiry of a broker of several worker processes (issue 28, 1b): every
worker has its own kazoo session, but only worker 0's holds the broker's registration, so
after all of them expired the broker registers again in worker 0's session, with the new
broker epoch every worker then carries, and its AlterPartition requests (ISR shrink and
expansion) are taken by the controller again."""
from __future__ import annotations

import os
import signal
import time

import pytest

from kafkafast.protocol._generated.elect_leaders import ElectLeadersRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from kafkafast.runtime.shm import owner_for
from tests.cluster.test_workers import _produce_stored, _worker_pids
from tests.support.cluster import FaultyCluster
from tests.support.raw_client import RawClient

WORKERS = 2
TOPIC = "expiry"
PARTITIONS = 4
ELECTION_NOT_NEEDED = 84


@pytest.fixture
def expiring_cluster(tmp_path):
    """Two brokers of two workers each, with faults; 6 s sessions, replica.lag.time.max.ms=4000."""
    c = FaultyCluster(tmp_path, size=2, workers=WORKERS)
    try:
        yield c.start()
    finally:
        c.close()


def _log_since(broker, offset: int) -> str:
    with open(broker.log_path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _produce(port: int, partition: int, value: bytes, acks: int) -> int:
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    with RawClient(port, timeout=30) as rc:
        return rc.request(req, 8).responses[0].partition_responses[0].error_code


def _elect_preferred(c) -> bool:
    """ElectLeaders (preferred) for every partition of TOPIC, asked of the controller."""
    controller = c.brokers.get(c.controller_id())
    if controller is None:
        return False
    req = ElectLeadersRequest(election_type=0, timeout_ms=30000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=TOPIC, partitions=list(range(PARTITIONS)))])
    with RawClient(controller.port, timeout=30) as rc:
        resp = rc.request(req, 1)
    return resp.error_code == 0 and all(p.error_code in (0, ELECTION_NOT_NEEDED)
                                        for r in resp.replica_election_results for p in r.partition_result)


def test_all_worker_sessions_expired_the_broker_registers_again_and_its_isrs_still_change(expiring_cluster):
    c = expiring_cluster
    b_id, other = sorted(c.brokers)
    broker = c.brokers[b_id]
    c.create_topic(TOPIC, PARTITIONS, 2, assignment=[[b_id, other]] * PARTITIONS)
    assert {owner_for(TOPIC, p, WORKERS) for p in range(PARTITIONS)} == set(range(WORKERS))  # both workers lead
    zk = c.zk()
    path = f"/brokers/ids/{b_id}"
    epoch_before = zk.exists(path).czxid
    workers = c.wait_for(lambda: (w := _worker_pids(broker.proc.pid)) and len(w) == WORKERS and w, 30,
                         "the broker's worker processes")
    for pid in workers.values():
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        c.wait_for(lambda: b_id not in c.registered(), 6 + 15, "the stopped broker's sessions expired")
        c.wait_for(lambda: all(c.leader(TOPIC, p) == other for p in range(PARTITIONS)), 15,
                   "leadership moved to the other broker")
        # The registration's going shows only worker 0's session expired; worker 1's, last
        # heard up to a ping interval later, expires by the stop + 6 s + a 0.5 s tick. Resumed
        # before that, it would carry on in its old session and log no new one.
        time.sleep(max(0.0, stopped + 6 + 1.5 - time.monotonic()))
        mark = broker.log_path.stat().st_size
        # worker 1 first: its new session must not take the broker's registration
        os.kill(workers[1], signal.SIGCONT)
        c.wait_for(lambda: f" {workers[1]} INFO kafkafast.cluster: new ZooKeeper session" in _log_since(broker, mark),
                   30, "worker 1's new session")
        os.kill(workers[0], signal.SIGCONT)
    finally:
        for pid in workers.values():
            os.kill(pid, signal.SIGCONT)
    new = c.wait_for(lambda: (s := zk.exists(path)) is not None and s.czxid != epoch_before and s, 30,
                     "the broker registered again")
    c.wait_for(lambda: all(sorted(c.isr(TOPIC, p)) == sorted([b_id, other]) for p in range(PARTITIONS)), 30,
               "the broker back in every ISR")
    c.wait_for(lambda: _elect_preferred(c) and all(c.leader(TOPIC, p) == b_id for p in range(PARTITIONS)), 30,
               "the broker leading every partition again")
    epochs = [c.partition_state(TOPIC, p)["leader_epoch"] for p in range(PARTITIONS)]

    # its leaders shrink the ISR (AlterPartition with the broker's epoch) when the follower lags ...
    faults = c.faults(b_id)
    rule = faults.error("Fetch", "UNKNOWN_SERVER_ERROR", topic=TOPIC, count=-1)  # the follower's fetches fail
    try:
        for p in range(PARTITIONS):
            c.wait_for(lambda: _produce(broker.port, p, b"lagging", acks=1) == 0, 15, f"an append to {TOPIC}-{p}")
        c.wait_for(lambda: all(c.isr(TOPIC, p) == [b_id] for p in range(PARTITIONS)), 30,
                   "the lagging follower out of every ISR")
    finally:
        faults.remove(rule)
    # ... an ISR change, not an election
    assert [c.partition_state(TOPIC, p)["leader_epoch"] for p in range(PARTITIONS)] == epochs
    # ... and expand it once the follower caught up
    c.wait_for(lambda: all(sorted(c.isr(TOPIC, p)) == sorted([b_id, other]) for p in range(PARTITIONS)), 30,
               "the follower back in every ISR")
    for p in range(PARTITIONS):
        assert _produce_stored(c, TOPIC, p, b"after")[0] == 0
    # worker 0's session made the registration, at the epoch the broker uses
    assert zk.exists(path).ephemeralOwner == new.ephemeralOwner
    assert f" {workers[0]} INFO kafkafast.cluster: registered broker {b_id} in ZooKeeper (epoch {new.czxid})" \
        in _log_since(broker, mark)
    assert f" {workers[1]} INFO kafkafast.cluster: registered broker" not in _log_since(broker, mark)


def test_a_broker_whose_epoch_the_controller_refuses_registers_again(expiring_cluster):
    """The broker's registration is deleted behind its back (its sessions stay alive, so
    nothing tells it): the controller moves its leaderships away, the broker, still leading
    in its own view, asks to shrink an ISR and is answered STALE_BROKER_EPOCH, and instead of
    asking the same forever it registers again (through worker 0, whichever worker asked)."""
    c = expiring_cluster
    b_id, other = sorted(c.brokers)
    broker = c.brokers[b_id]
    c.create_topic(TOPIC, PARTITIONS, 2, assignment=[[b_id, other]] * PARTITIONS)
    zk = c.zk()
    path = f"/brokers/ids/{b_id}"
    epoch_before = zk.exists(path).czxid
    mark = broker.log_path.stat().st_size
    zk.delete(path)
    c.wait_for(lambda: all(c.leader(TOPIC, p) == other for p in range(PARTITIONS)), 15,
               "leadership moved to the other broker")
    for p in range(PARTITIONS):  # taken by the deposed leader, which the other broker no longer follows
        assert _produce(broker.port, p, b"deposed", acks=1) == 0
    c.wait_for(lambda: (s := zk.exists(path)) is not None and s.czxid != epoch_before, 6 + 4 + 20,
               "the broker registered again")
    c.wait_for(lambda: all(sorted(c.isr(TOPIC, p)) == sorted([b_id, other]) for p in range(PARTITIONS)), 30,
               "the broker back in every ISR")
    log = _log_since(broker, mark)
    assert "AlterPartition refused with STALE_BROKER_EPOCH" in log and "registering again" in log
    for p in range(PARTITIONS):
        assert _produce_stored(c, TOPIC, p, b"after")[0] == 0
