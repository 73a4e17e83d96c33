"""Cluster mode with `kafkafast.produce.shared.append.cluster` (on by default): a client's produce to a
partition this broker leads is appended by whichever worker received it (through the
partition's append lock), not forwarded to the owner worker; acks=all is released by the
high watermark the owner moves from the followers' positions, the batches carry the
leader epoch, and after a leader change a follower holds every acknowledged record once."""
from __future__ import annotations

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from kafkafast.runtime.shm import owner_for
from tests.cluster.test_workers import _connections_on, _worker_pids
from tests.support.cluster import KafkaCluster

WORKERS = 2
TOPIC = "shared-cluster"
PARTITIONS = 2
ROUNDS = 20  # produce requests per (connection, partition)
PER_BATCH = 4


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    c = KafkaCluster(tmp_path_factory.mktemp("cluster-shared-append"), size=2, workers=WORKERS,
                     settings={"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "60000"})
    try:
        yield c.start()
    finally:
        c.close()


def _produce(rc, partition: int, values: list[bytes], corr: int):
    batch = encode_batch([(1_700_000_000_000 + i, None, v, []) for i, v in enumerate(values)])
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=20000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    rc.send_raw(api.encode_request(req, 8, corr, "shared-cluster-test"))
    got, resp = api.decode_response(0, 8, rc.recv_frame())
    assert got == corr
    return resp.responses[0].partition_responses[0]


def test_non_owner_worker_appends_acks_all_itself_and_a_new_leader_has_every_record_once(shared_cluster):
    from confluent_kafka import Consumer, TopicPartition

    c = shared_cluster
    leader_id, follower_id = sorted(c.brokers)
    c.create_topic(TOPIC, PARTITIONS, 2, {"min.insync.replicas": "2"}, [[leader_id, follower_id]] * PARTITIONS)
    leader = c.brokers[leader_id]
    workers = c.wait_for(lambda: (w := _worker_pids(leader.proc.pid)) and len(w) == WORKERS and w, 30,
                         "the leader's worker processes")
    epochs = {p: c.partition_state(TOPIC, p)["leader_epoch"] for p in range(PARTITIONS)}
    conns = _connections_on(leader.port, workers, list(range(WORKERS)))
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}  # partition -> offset -> value
    corr = 0
    try:
        for r in range(ROUNDS):
            for w, rc in conns.items():
                for p in range(PARTITIONS):
                    corr += 1
                    values = [b"w%d-p%d-r%d-%d" % (w, p, r, i) for i in range(PER_BATCH)]
                    pr = _produce(rc, p, values, corr)
                    assert pr.error_code == 0, (w, p, r, pr)
                    for i, v in enumerate(values):
                        assert pr.base_offset + i not in acked[p]
                        acked[p][pr.base_offset + i] = v
    finally:
        for rc in conns.values():
            rc.close()
    for p in range(PARTITIONS):  # offsets contiguous over both workers' appends
        assert sorted(acked[p]) == list(range(ROUNDS * WORKERS * PER_BATCH))

    # Each partition's non-owner worker appended itself (its shared writer's log line), none forwarded.
    text = leader.log_path.read_text(errors="replace")
    for p in range(PARTITIONS):
        owner = owner_for(TOPIC, p, WORKERS)
        other = 1 - owner
        assert f"worker {other} appends to {TOPIC}-{p} (owner: worker {owner}) through shared memory" in text

    leader.stop()  # controlled shutdown: the follower becomes the leader
    for p in range(PARTITIONS):
        c.wait_for(lambda p=p: c.leader(TOPIC, p) == follower_id, 30, f"{TOPIC}-{p} led by {follower_id}")
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{c.brokers[follower_id].port}", "group.id": "shared-check",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        total = ROUNDS * WORKERS * PER_BATCH * PARTITIONS
        seen: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        got = 0
        deadline_polls = 300
        while got < total and deadline_polls:
            deadline_polls -= 1
            for m in consumer.consume(500, timeout=0.2):
                assert m.error() is None, m.error()
                assert m.offset() not in seen[m.partition()]
                seen[m.partition()][m.offset()] = m.value()
                assert m.leader_epoch() == epochs[m.partition()]  # stamped by whichever worker appended
                got += 1
    finally:
        consumer.close()
    assert seen == acked
