"""A partition whose owner worker is still loading it is not answered by the other workers.

At a broker's start every worker listens once it has loaded its own partitions, so a client
can reach worker A while worker B still loads (recovers) B's partitions. Their shared-memory
slots are zeros until B publishes them: A must not answer from that (ListOffsets "latest" 0
instead of 50, a Fetch at offset 20 OFFSET_OUT_OF_RANGE, so a consumer resets). Until the
owner has loaded the partition it is answered as Kafka answers a partition it does not serve
yet: Metadata without a leader (LEADER_NOT_AVAILABLE), data requests NOT_LEADER_OR_FOLLOWER.

The test holds the owner's load of one partition (`faults.hold_load`), so every request
meets the window, then releases it.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode as EC
from kafkafast.records import encode_batch
from kafkafast.runtime.shm import owner_for
from kafkafast.testing import broker
from tests.support.raw_client import RawClient

TOPIC = "loading"
RECORDS = 50


def list_offsets(port: int, partition: int, timestamp: int, topic: str = TOPIC) -> tuple[int, int]:
    """(error code, offset) of ListOffsets v7 for one partition."""
    L = ListOffsetsRequest
    req = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
        L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
    with RawClient(port) as c:
        p = c.request(req, 7).topics[0].partitions[0]
    return p.error_code, p.offset


def fetch(port: int, partition: int, offset: int) -> tuple[int, int]:
    """(error code, high watermark) of Fetch v11 at `offset`."""
    F = FetchRequest
    req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[F.FetchTopic(topic=TOPIC, partitions=[F.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    with RawClient(port) as c:
        p = c.request(req, 11).responses[0].partitions[0]
    return p.error_code, p.high_watermark


def end_of_epoch(port: int, partition: int) -> tuple[int, int]:
    """(error code, end offset) of OffsetForLeaderEpoch v3 for leader epoch 0."""
    O = OffsetForLeaderEpochRequest
    req = O(replica_id=-1, topics=[O.OffsetForLeaderTopic(topic=TOPIC, partitions=[
        O.OffsetForLeaderPartition(partition=partition, current_leader_epoch=-1, leader_epoch=0)])])
    with RawClient(port) as c:
        p = c.request(req, 3).topics[0].partitions[0]
    return p.error_code, p.end_offset


def produce(port: int, partition: int) -> int:
    """Error code of a Produce v9 of one record (answered within 5 s, or the test fails)."""
    P = ProduceRequest
    req = P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(name=TOPIC, partition_data=[
        P.PartitionProduceData(index=partition, records=encode_batch([(0, None, b"early", ())]))])])
    with RawClient(port, timeout=5) as c:
        return c.request(req, 9).responses[0].partition_responses[0].error_code


def metadata(port: int, topic: str = TOPIC) -> list[tuple[int, int]]:
    """(error code, leader) of each partition of `topic`."""
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    with RawClient(port) as c:
        parts = c.request(req, 9).topics[0].partitions
    return [(p.error_code, p.leader_id) for p in sorted(parts, key=lambda p: p.partition_index)]


def wait_until(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def consume(consumer: Consumer, seconds: float, want: int) -> tuple[list[int], list[str]]:
    """Offsets consumed and errors seen within `seconds` (stops early at `want` offsets)."""
    offsets: list[int] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    while len(offsets) < want and time.monotonic() < deadline:
        for m in consumer.consume(100, 0.2):
            if m.error() is not None:
                errors.append(str(m.error()))
            else:
                offsets.append(m.offset())
    return offsets, errors


def test_a_partition_its_owner_still_loads_is_answered_as_not_led_yet_and_then_from_its_log(tmp_path):
    held, other = 1, 0
    assert owner_for(TOPIC, held, 2) != owner_for(TOPIC, other, 2)  # one partition per worker
    with broker(str(tmp_path), workers=2) as b:
        b.create_topic(TOPIC, partitions=2)
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 5})
        for i in range(RECORDS):
            for part in (held, other):
                producer.produce(TOPIC, value=b"%d-%d" % (part, i), partition=part)
        assert producer.flush(30) == 0
        assert b.stop() == 0

        rule = b.faults.hold_load(TOPIC, held)
        b.start()  # answered by the worker that owns `other`; the owner of `held` waits before loading it
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "loading-reader",
                             "enable.auto.commit": False, "auto.offset.reset": "error"})
        try:
            wait_until(lambda: "holding the load of loading-1" in b.log_path.read_text(), "the owner's load held")
            assert metadata(b.port) == [(0, 0), (EC.LEADER_NOT_AVAILABLE, -1)]
            assert list_offsets(b.port, other, -1) == (0, RECORDS)
            for timestamp in (-1, -2, -3):  # latest, earliest, max timestamp
                assert list_offsets(b.port, held, timestamp) == (EC.NOT_LEADER_OR_FOLLOWER, -1)
            assert fetch(b.port, held, 20) == (EC.NOT_LEADER_OR_FOLLOWER, -1)
            assert end_of_epoch(b.port, held) == (EC.NOT_LEADER_OR_FOLLOWER, -1)
            assert produce(b.port, held) == EC.NOT_LEADER_OR_FOLLOWER  # not parked at the owner meanwhile
            # librdkafka sees no leader and waits for one: no offsets of 0, no out-of-range reset
            with pytest.raises(KafkaException):
                consumer.get_watermark_offsets(TopicPartition(TOPIC, held), timeout=1.0)
            consumer.assign([TopicPartition(TOPIC, held, 20)])
            offsets, errors = consume(consumer, 1.5, 1)
            assert (offsets, errors) == ([], [])
            # A topic created meanwhile is empty: its partitions are answered at once, wherever they live.
            b.create_topic("created-meanwhile", partitions=2)
            assert metadata(b.port, "created-meanwhile") == [(0, 0), (0, 0)]
            assert [list_offsets(b.port, p, -1, "created-meanwhile") for p in (0, 1)] == [(0, 0), (0, 0)]

            assert b.faults.remove(rule)  # the owner loads the partition now
            offsets, errors = consume(consumer, 30, RECORDS - 20)
            assert (offsets, errors) == (list(range(20, RECORDS)), [])
            assert consumer.get_watermark_offsets(TopicPartition(TOPIC, held), timeout=10) == (0, RECORDS)
            assert list_offsets(b.port, held, -1) == (0, RECORDS)
            assert metadata(b.port) == [(0, 0), (0, 0)]
        finally:
            consumer.close()
