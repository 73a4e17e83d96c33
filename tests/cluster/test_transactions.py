"""Transactions in cluster mode: a replicated `__transaction_state` whose partition leaders
coordinate, markers sent to partition leaders on other brokers, read_committed across
leader changes, the coordinator's broker SIGKILLed mid-transaction: all cluster only (the
coordinator moves, markers cross brokers). (The clients' transactions,
the same in both modes, run on a single node and a cluster in tests/integration/test_transactions.py:
commit, abort, offsets in transactions, read_committed, fencing, timeouts.)"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafkafast.cluster.transactions import MARKER_RETRY_S
from kafkafast.protocol._generated.describe_transactions import DescribeTransactionsRequest
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.write_txn_markers import WriteTxnMarkersRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.integration.test_transactions import read_partitions
from tests.support.cluster import FaultyCluster
from tests.support.raw_client import RawClient

TXN_SETTINGS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "zookeeper.session.timeout.ms": "3000",  # a killed coordinator's broker is gone 3 s later, not 6
}
# partition p led by broker p + 1: every transaction has partitions on all three brokers
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


def _cluster(tmp_path_factory, workers: int):
    c = FaultyCluster(tmp_path_factory.mktemp(f"txn-cluster-w{workers}"), workers=workers, settings=TXN_SETTINGS)
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory):
    yield from _cluster(tmp_path_factory, 0)


def live_port(cluster) -> int:
    return next(b.port for b in cluster.brokers.values() if b.proc is not None and b.proc.poll() is None)


def txn_coordinator(cluster, tid: str) -> int:
    with RawClient(live_port(cluster)) as rc:
        resp = rc.request(FindCoordinatorRequest(key=tid, key_type=1), 2)
    return resp.node_id if resp.error_code == 0 else -1


def producer(cluster, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 5,
                  "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    p.init_transactions(60)
    return p


def send(p: Producer, topic: str, values: list[bytes]) -> None:
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 3)
    assert p.flush(60) == 0


def transaction(p: Producer, topic: str, prefix: bytes, *, commit: bool = True) -> list[bytes]:
    """One transaction of 30 records over the topic's three partitions; its values."""
    values = [prefix + b"-%02d" % i for i in range(30)]
    p.begin_transaction()
    send(p, topic, values)
    if commit:
        p.commit_transaction(60)
    else:
        p.abort_transaction(60)
    return values


def read_all(cluster, topic: str, isolation: str, expect: int, timeout: float = 60.0,
             partitions: int = 3) -> list[bytes]:
    return read_partitions(cluster.bootstrap, topic, isolation, expect, partitions, timeout)


def stable_offsets(cluster, topic: str, partitions: int = 3) -> list[tuple[int, int]]:
    """(high watermark, last stable offset) of each partition, asked of its leader."""
    out = []
    for p in range(partitions):
        leader = cluster.wait_for(lambda: max(cluster.leader(topic, p), 0), 30, f"a leader of {topic}-{p}")
        ends = []
        for isolation in (0, 1):
            T = ListOffsetsRequest.ListOffsetsTopic
            req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[T(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1)])])
            with RawClient(cluster.brokers[leader].port) as rc:
                ends.append(rc.request(req, 4).topics[0].partitions[0].offset)
        out.append((ends[0], ends[1]))
    return out


def producer_states(cluster, topic: str, partition: int) -> dict[int, tuple[int, int]]:
    """producer id -> (producer epoch, coordinator epoch of its last marker), asked of the leader."""
    from kafkafast.protocol._generated.describe_producers import DescribeProducersRequest

    leader = cluster.wait_for(lambda: max(cluster.leader(topic, partition), 0), 30, f"a leader of {topic}-{partition}")
    with RawClient(cluster.brokers[leader].port) as rc:
        part = rc.request(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
            name=topic, partition_indexes=[partition])]), 0).topics[0].partitions[0]
    assert part.error_code == 0
    return {s.producer_id: (s.producer_epoch, s.coordinator_epoch) for s in part.active_producers}


def test_coordinator_broker_killed_mid_transaction(txn_cluster):
    c = txn_cluster
    c.create_topic("tx-kill", 3, 3, assignment=ASSIGNMENT)
    tid = "killed-coordinator"
    p = producer(c, tid)
    first = transaction(p, "tx-kill", b"a")
    middle = [b"b-%02d" % i for i in range(30)]
    p.begin_transaction()
    send(p, "tx-kill", middle)
    victim = txn_coordinator(c, tid)
    assert victim in (1, 2, 3)
    [(pid, (_, old_epoch))] = producer_states(c, "tx-kill", 0).items()  # the first commit's marker
    assert old_epoch >= 0
    c.brokers[victim].kill()
    try:
        p.commit_transaction(120)  # the producer finds the new coordinator, which loaded the Ongoing state
        assert c.wait_for(lambda: txn_coordinator(c, tid) not in (-1, victim), 30, "a new coordinator")
        last = transaction(p, "tx-kill", b"c")
        transaction(p, "tx-kill", b"d", commit=False)
        seen = read_all(c, "tx-kill", "read_committed", 90)
        assert sorted(seen) == sorted(first + middle + last)
        ends = stable_offsets(c, "tx-kill")
        for hw, lso in ends:
            assert lso == hw
        # The deposed coordinator's epoch is fenced by a leader on a third broker: the new
        # coordinator's markers (a newer __transaction_state leader epoch) were written there.
        other = next(b for b in (1, 2, 3) if b not in (victim, txn_coordinator(c, tid)))
        q = next(q for q in range(3) if c.leader("tx-kill", q) == other)
        producer_epoch, new_epoch = producer_states(c, "tx-kill", q)[pid]
        assert new_epoch > old_epoch
        W = WriteTxnMarkersRequest
        with RawClient(c.brokers[other].port) as rc:
            resp = rc.request(W(markers=[W.WritableTxnMarker(
                producer_id=pid, producer_epoch=producer_epoch, transaction_result=True, coordinator_epoch=old_epoch,
                topics=[W.WritableTxnMarkerTopic(name="tx-kill", partition_indexes=[q])])]), 1)
        assert resp.markers[0].topics[0].partitions[0].error_code == EC.TRANSACTION_COORDINATOR_FENCED
        assert stable_offsets(c, "tx-kill") == ends  # nothing appended
        assert producer_states(c, "tx-kill", q)[pid] == (producer_epoch, new_epoch)
    finally:
        c.brokers[victim].start(timeout=60)
    c.wait_for(lambda: all(len(c.isr("tx-kill", q)) == 3 for q in range(3)), 60, "the restarted broker in sync")
    # The restarted replica replicated the abort (and markers) as follower; made leader again by a
    # preferred election, its producer state and .txnindex hide the aborted records from read_committed.
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("tx-kill", victim - 1)]).result(30)
    c.wait_for(lambda: c.leader("tx-kill", victim - 1) == victim, 30, "the restarted broker leading again")
    seen = read_all(c, "tx-kill", "read_committed", 90)
    assert sorted(seen) == sorted(first + middle + last)
    for hw, lso in stable_offsets(c, "tx-kill"):
        assert lso == hw


def txn_state(cluster, broker: int, tid: str) -> str:
    with RawClient(cluster.brokers[broker].port) as rc:
        return rc.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0].transaction_state


def test_coordinator_killed_between_end_txn_and_a_marker(txn_cluster):
    """The commit is decided (PrepareCommit replicated) but one marker cannot be written (a disk
    error on that partition's leader); the coordinator's broker dies; the new coordinator loads
    PrepareCommit and completes the commit once the marker can be written."""
    c = txn_cluster
    c.create_topic("tx-pending", 3, 3, assignment=ASSIGNMENT)
    stuck = c.leader("tx-pending", 0)
    c.wait_for(lambda: txn_coordinator(c, "probe") > 0, 30, "transaction coordinators")
    tid = next(t for t in (f"pending-{i}" for i in range(100)) if txn_coordinator(c, t) not in (-1, stuck))
    coordinator = txn_coordinator(c, tid)
    p = producer(c, tid)
    values = [b"p-%02d" % i for i in range(30)]
    p.begin_transaction()
    send(p, "tx-pending", values)
    faults = c.faults(stuck)
    faults.disk_error("tx-pending", 0, count=-1)
    asked = time.monotonic()
    p.commit_transaction(90)  # answered once the decision is replicated, the marker of partition 0 left to retry
    assert time.monotonic() - asked < MARKER_RETRY_S  # not after the marker's retries (Kafka answers at once)
    assert txn_state(c, coordinator, tid) == "PrepareCommit"
    visible = read_all(c, "tx-pending", "read_committed", 20, timeout=10)
    assert sorted(visible) == sorted(v for i, v in enumerate(values) if i % 3 != 0)  # partition 0 held at its LSO
    c.brokers[coordinator].kill()
    try:
        faults.clear()
        new = c.wait_for(lambda: (lambda n: n if n not in (-1, coordinator) else 0)(txn_coordinator(c, tid)), 60,
                         "a new coordinator")
        c.wait_for(lambda: txn_state(c, new, tid) == "CompleteCommit", 60, "the commit completed")
        assert sorted(read_all(c, "tx-pending", "read_committed", 30)) == sorted(values)
        for hw, lso in stable_offsets(c, "tx-pending"):
            assert lso == hw
        p.begin_transaction()  # the producer goes on with the new coordinator
        send(p, "tx-pending", [b"q-%02d" % i for i in range(3)])
        p.commit_transaction(60)
        assert len(read_all(c, "tx-pending", "read_committed", 33)) == 33
    finally:
        c.brokers[coordinator].start(timeout=60)


@pytest.fixture(scope="module")
def txn_workers_cluster(tmp_path_factory):
    yield from _cluster(tmp_path_factory, 2)


def test_transactions_on_multi_worker_brokers(txn_workers_cluster):
    """Cluster only, in brokers of two workers: the transaction APIs reach the worker owning the
    id's replicated __transaction_state partition, and the WriteTxnMarkers a coordinator on
    another broker sends land on either worker of a partition's leader and reach the one owning
    the partition (a single node's markers never cross brokers)."""
    c = txn_workers_cluster
    c.create_topic("tx-w", 3, 3, assignment=ASSIGNMENT)
    c.create_topic("tx-w-in", 1, 3)
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "txn-w-group", "enable.auto.commit": False})
    p = producer(c, "workers-tx")
    committed = []
    for t in range(3):
        values = [b"w%d-%02d" % (t, i) for i in range(30)]
        p.begin_transaction()
        send(p, "tx-w", values)
        p.send_offsets_to_transaction([TopicPartition("tx-w-in", 0, 10 + t)], cons.consumer_group_metadata(), 30)
        if t == 1:
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            committed += values
    assert sorted(read_all(c, "tx-w", "read_committed", len(committed))) == sorted(committed)
    assert len(read_all(c, "tx-w", "read_uncommitted", 90)) == 90
    assert cons.committed([TopicPartition("tx-w-in", 0)], 30)[0].offset == 12
    cons.close()
    for hw, lso in stable_offsets(c, "tx-w"):
        assert lso == hw
