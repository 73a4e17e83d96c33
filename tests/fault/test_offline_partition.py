"""A partition whose log cannot be opened goes offline alone, as Kafka takes a failed log
dir offline: the broker starts and serves every other partition, Metadata lists the
partition without a leader and with this broker in offline_replicas, requests for it
answer KAFKA_STORAGE_ERROR, and nothing of its files is destroyed (once the fault is
gone, a restart serves it again)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import encode_batch
from tests.support.storage_faults import assert_no_worker_died, assert_readable, create, produce
from tests.support.raw_client import RawClient


def confluent_read(bootstrap, topic, partition, expect):
    """{offset: value} of one partition with librdkafka (its leader-less neighbour does not stop it)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "offline-reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    out = {}
    deadline = time.monotonic() + 30
    while len(out) < expect and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            assert m.error() is None, m.error()
            out[m.offset()] = m.value()
    c.close()
    return out


def raw_produce(port, topic, partition):
    with RawClient(port) as c:
        req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(
                index=partition, records=encode_batch([(0, None, b"raw", ())]))])])
        return c.request(req, 9).responses[0].partition_responses[0].error_code


def raw_fetch(port, topic, partition):
    with RawClient(port) as c:
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                   partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        return c.request(req, 12).responses[0].partitions[0].error_code


def raw_latest(port, topic, partition):
    with RawClient(port) as c:
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
        return c.request(req, 7).topics[0].partitions[0]


def metadata(port, topic):
    with RawClient(port) as c:
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
        return sorted(c.request(req, 12).topics[0].partitions, key=lambda p: p.partition_index)


def wait_until_loaded(port, topic):
    """Waits (bounded) until every worker has loaded its partitions of `topic`: each has a
    leader or is offline. Before, the worker that answered lists the partitions another
    worker still loads without a leader and answers their requests NOT_LEADER_OR_FOLLOWER
    (tests/fault/test_partition_loading.py)."""
    deadline = time.monotonic() + 30
    while any(p.leader_id < 0 and not p.offline_replicas for p in metadata(port, topic)):
        assert time.monotonic() < deadline, metadata(port, topic)
        time.sleep(0.01)


@pytest.mark.parametrize("workers", [0, 2])
def test_unopenable_partition_goes_offline_and_the_rest_keeps_serving(broker_factory, workers):
    b = broker_factory(workers=workers)
    create(b.bootstrap, "off", 2)
    acked = {p: produce(b.bootstrap, "off", p, [b"%d-%d" % (p, i) for i in range(50)])[0] for p in (0, 1)}
    assert all(len(a) == 50 for a in acked.values())
    assert b.stop() == 0
    # An unreadable segment file (here: a directory where the file should be) stands in
    # for a failed disk under this partition.
    segment = b.data_dir / "off-0" / "00000000000000000000.log"
    segment.rename(segment.with_name("moved-away"))
    segment.mkdir()

    b.start()
    wait_until_loaded(b.port, "off")
    for _ in range(3):  # whichever worker answers
        p0, p1 = metadata(b.port, "off")
        assert (p0.error_code, p0.leader_id, list(p0.offline_replicas), list(p0.isr_nodes)) == \
            (ErrorCode.LEADER_NOT_AVAILABLE, -1, [0], [])
        assert (p1.error_code, p1.leader_id, list(p1.offline_replicas)) == (0, 0, [])
        assert raw_produce(b.port, "off", 0) == ErrorCode.KAFKA_STORAGE_ERROR
        assert raw_fetch(b.port, "off", 0) == ErrorCode.KAFKA_STORAGE_ERROR
        assert raw_latest(b.port, "off", 0).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert raw_latest(b.port, "off", 1).offset == 50
    # Each process that answered the offline partition's Fetch said so at ERROR, once.
    said = [line for line in b.log_path.read_text(errors="replace").splitlines()
            if "off-0: Fetch answered KAFKA_STORAGE_ERROR (offline)" in line]
    assert 1 <= len(said) <= max(workers, 1) and all("ERROR" in line for line in said), said
    more, errors = produce(b.bootstrap, "off", 1, [b"more-%d" % i for i in range(10)])
    assert not errors and sorted(more) == list(range(50, 60))
    acked[1].update(more)
    assert confluent_read(b.bootstrap, "off", 1, 60) == acked[1]
    assert_no_worker_died(b)
    assert b.stop() == 0

    segment.rmdir()
    segment.with_name("moved-away").rename(segment)
    b.start()
    wait_until_loaded(b.port, "off")
    assert metadata(b.port, "off")[0].error_code == 0
    assert_readable(b, "off", 0, acked[0])
    assert_readable(b, "off", 1, acked[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_failed_log_dir_goes_offline_and_the_other_dir_keeps_serving(tmp_path, broker_factory, workers):
    good, bad = tmp_path / "good", tmp_path / "bad"
    b = broker_factory("good", workers=workers, settings={"log.dirs": f"{good},{bad}"})
    create(b.bootstrap, "jbod", 2)
    acked = {p: produce(b.bootstrap, "jbod", p, [b"%d-%d" % (p, i) for i in range(30)])[0] for p in (0, 1)}
    on_bad = [p for p in (0, 1) if (bad / f"jbod-{p}").is_dir()]
    assert len(on_bad) == 1  # one partition in each dir
    lost, kept = on_bad[0], 1 - on_bad[0]
    assert b.stop() == 0
    bad.rename(tmp_path / "bad-away")
    bad.write_bytes(b"")  # the log dir is gone: a file stands where it was

    b.start()
    wait_until_loaded(b.port, "jbod")
    for _ in range(3):
        parts = metadata(b.port, "jbod")
        assert (parts[lost].error_code, parts[lost].leader_id, list(parts[lost].offline_replicas)) == \
            (ErrorCode.LEADER_NOT_AVAILABLE, -1, [0])
        assert (parts[kept].error_code, parts[kept].leader_id) == (0, 0)
        assert raw_produce(b.port, "jbod", lost) == ErrorCode.KAFKA_STORAGE_ERROR
        assert raw_fetch(b.port, "jbod", lost) == ErrorCode.KAFKA_STORAGE_ERROR
    more, errors = produce(b.bootstrap, "jbod", kept, [b"more-%d" % i for i in range(10)])
    assert not errors and sorted(more) == list(range(30, 40))
    acked[kept].update(more)
    assert confluent_read(b.bootstrap, "jbod", kept, 40) == acked[kept]
    assert not (good / f"jbod-{lost}").exists()  # not re-created empty in the other dir
    assert_no_worker_died(b)
    assert b.stop() == 0

    bad.unlink()
    (tmp_path / "bad-away").rename(bad)
    b.start()
    wait_until_loaded(b.port, "jbod")
    assert [p.error_code for p in metadata(b.port, "jbod")] == [0, 0]
    assert_readable(b, "jbod", lost, acked[lost])
    assert_readable(b, "jbod", kept, acked[kept])
