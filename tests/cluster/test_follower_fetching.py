"""Fetching from the closest replica (KIP-392): brokers in racks r1, r2, r3; brokers 1 and 2
with replica.selector.class=RackAwareReplicaSelector, broker 3 without; a confluent-kafka
consumer with client.rack. Which broker served the consumer is read on the broker side, from
its per-topic bytes out (only consumers fetch from a follower). A SIGSTOPped follower leaves
the ISR through its leader after replica.lag.time.max.ms (4 s), well before its ZooKeeper
session (30 s asked, 10 s granted by the test ZooKeeper's tickTime) expires: it stays live."""
from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafkafast.config_def import RACK_AWARE_REPLICA_SELECTOR
from tests.cluster.test_rolling import MetricsCluster
from tests.integration.test_metrics import scrape, value

BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"


class RackCluster(MetricsCluster):
    """Broker N in rack rN; replica.selector.class on brokers 1 and 2."""

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        out = {**super().broker_settings(broker_id), "broker.rack": f"r{broker_id}"}
        if broker_id != 3:
            out["replica.selector.class"] = RACK_AWARE_REPLICA_SELECTOR
        return out


@pytest.fixture(scope="module", params=[0, 2], ids=["workers0", "workers2"])
def racks(tmp_path_factory, request):
    """With 2 workers the leader's connection may land on a worker that does not own the
    partition: it reads the followers' positions and the ISR from the shared slot."""
    c = RackCluster(tmp_path_factory.mktemp(f"racks-w{request.param}"), workers=request.param,
                    settings={"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "4000"})
    try:
        yield c.start()
    finally:
        c.close()


def _values(n: int, start: int = 0) -> list[bytes]:
    return [f"{i:06d}".encode() * 20 for i in range(start, start + n)]  # 120 bytes each


def _produce(c, topic: str, values: list[bytes], acks: str = "all") -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": acks, "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


def _consumer(c, rack: str, topic: str, bootstrap: str | None = None) -> Consumer:
    """read_uncommitted: bounded by the high watermark alone (read_committed stops at the last
    stable offset, which a follower also bounds by its high watermark)."""
    consumer = Consumer({"bootstrap.servers": bootstrap or c.bootstrap, "group.id": f"g-{topic}-{rack}-{time.time()}",
                         "client.rack": rack, "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def _read(consumer: Consumer, count: int, timeout: float = 30.0) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.value()))
    return got


def _bytes_out(c, broker_id: int, topic: str) -> float:
    return value(scrape(c.metrics_ports[broker_id]), BYTES_OUT, topic=topic)


def _produced_and_read(c, topic: str, replicas: list[int], rack: str, count: int) -> list[bytes]:
    """Creates `topic` (one partition on `replicas`, the first leading), produces `count`
    records and reads them with a consumer in `rack`: each once, in order, at its offset."""
    c.create_topic(topic, 1, 3, assignment=[replicas])
    values = _values(count)
    _produce(c, topic, values)
    consumer = _consumer(c, rack, topic)
    try:
        assert _read(consumer, count) == list(enumerate(values))
    finally:
        consumer.close()
    return values


def test_a_consumer_reads_every_record_from_the_follower_in_its_rack(racks):
    c = racks
    values = _produced_and_read(c, "near", [1, 2, 3], "r2", 500)
    # broker 2 (a follower: nobody replicates from it) sent the consumer all of them (a fetch is
    # counted once its answer is sent, so the count may follow the consumer by a loop pass)
    c.wait_for(lambda: _bytes_out(c, 2, "near") >= sum(len(v) for v in values), 10, "broker 2's bytes out")


def test_a_follower_serves_only_up_to_the_high_watermark_it_knows(racks):
    c = racks
    c.create_topic("hw", 1, 3, assignment=[[1, 2, 3]])
    first = _values(10)
    _produce(c, "hw", first)
    consumer = _consumer(c, "r2", "hw")
    try:
        assert _read(consumer, 10) == list(enumerate(first))
        c.wait_for(lambda: _bytes_out(c, 2, "hw") > 0, 10, "broker 2's bytes out")
        segment = c.brokers[2].data_dir / "hw-0" / "00000000000000000000.log"
        size = segment.stat().st_size
        third = c.brokers[3].proc.pid
        os.killpg(third, signal.SIGSTOP)  # still in the ISR for replica.lag.time.max.ms: the HW stays at 10
        try:
            later = _values(5, 10)
            _produce(c, "hw", later, acks="1")
            c.wait_for(lambda: segment.stat().st_size > size, 10, "the records in broker 2's log")
            assert _read(consumer, 1, timeout=0.7) == []  # above the high watermark
            assert consumer.get_watermark_offsets(TopicPartition("hw", 0), cached=True)[1] == 10
            assert 3 in c.partition_state("hw", 0)["isr"]  # (all of it within replica.lag.time.max.ms)
        finally:
            os.killpg(third, signal.SIGCONT)
        assert _read(consumer, 5) == list(enumerate(later, 10))  # once broker 3 has them too
    finally:
        consumer.close()


def test_without_a_replica_selector_the_leader_serves_the_consumer(racks):
    c = racks
    _produced_and_read(c, "far", [3, 2, 1], "r2", 100)  # led by broker 3: no replica.selector.class
    assert _bytes_out(c, 2, "far") == 0


def test_a_follower_out_of_the_isr_is_no_longer_preferred(racks):
    c = racks
    ctrl = c.controller_id()  # stays up: the leader's AlterPartition needs it
    leader = ctrl if ctrl in (1, 2) else 1  # a broker with replica.selector.class
    follower = next(b for b in (2, 3, 1) if b not in (leader, ctrl))
    rack = f"r{follower}"
    values = _produced_and_read(c, "isr", [leader] + [b for b in (1, 2, 3) if b != leader], rack, 50)
    assert _bytes_out(c, follower, "isr") > 0  # preferred while in sync
    pid = c.brokers[follower].proc.pid
    os.killpg(pid, signal.SIGSTOP)
    try:
        more = _values(50, 50)
        _produce(c, "isr", more, acks="1")  # (a follower as far as the leader's log end is in sync however silent)
        c.wait_for(lambda: follower not in c.partition_state("isr", 0)["isr"], 30, "the follower out of the ISR")
        assert follower in c.registered()  # live: left out for being out of sync, not for being gone
        # a consumer sent to the stopped follower would read nothing
        others = ",".join(b.bootstrap for i, b in c.brokers.items() if i != follower)
        consumer = _consumer(c, rack, "isr", bootstrap=others)
        try:
            assert _read(consumer, 100, timeout=20.0) == list(enumerate(values + more))
        finally:
            consumer.close()
    finally:
        os.killpg(pid, signal.SIGCONT)
    c.wait_for(lambda: follower in c.partition_state("isr", 0)["isr"], 30, "the follower back in the ISR")
