"""A full disk degrades a partition or a log dir, never the broker.

Each test mounts a small tmpfs of its own (`mount -t tmpfs -o size=...`; skipped with the
reason where the machine cannot mount) and fills it with a real client's produce until
the broker answers KAFKA_STORAGE_ERROR. Then: SIGTERM stops the broker with exit 0 and
every acknowledged record intact; a restart on the still-full disk serves every
acknowledged record to a real consumer and refuses produce with KAFKA_STORAGE_ERROR
(no crash, no worker crash loop); once space is freed produce works again.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest
from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest
from kafkafast.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from tests.support.storage_faults import assert_no_worker_died, assert_readable, create, produce, top_up

VALUE_BYTES = 4096


@pytest.fixture
def brokers(tmp_path):
    """Brokers with 512 KiB segments; their output goes to tmp_path, never to the small fs."""
    started: list[BrokerProcess] = []

    def make(data_dir: Path, *, workers: int = 0, log_dirs: list[Path] | None = None) -> BrokerProcess:
        settings = {"log.segment.bytes": str(512 * 1024), "offsets.topic.num.partitions": "1"}
        if log_dirs:
            settings["log.dirs"] = ",".join(str(d) for d in log_dirs)
        b = BrokerProcess(data_dir, workers=workers, settings=settings)
        b.log_path = tmp_path / f"broker-{len(started)}.log"
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()


def fill(bootstrap: str, topic: str, partition: int, mount: Path, limit_bytes: int = 8 << 20) -> dict[int, bytes]:
    """Produce 4 KiB records until the broker refuses them with KAFKA_STORAGE_ERROR, then
    take the last pages a smaller write could still use (so every later write fails)."""
    acked: dict[int, bytes] = {}
    for round_ in range(limit_bytes // (VALUE_BYTES * 32) + 2):
        values = [b"%d-%06d-" % (partition, round_ * 32 + i) + os.urandom(VALUE_BYTES // 2).hex().encode()[:VALUE_BYTES]
                  for i in range(32)]
        got, errors = produce(bootstrap, topic, partition, values)
        acked.update(got)
        if errors:
            assert set(errors) == {KafkaError.KAFKA_STORAGE_ERROR}, errors
            break
    else:
        raise AssertionError(f"{limit_bytes} bytes produced without a KAFKA_STORAGE_ERROR")
    top_up(mount)
    return acked


def assert_other_writes_refused_with_an_error(b: BrokerProcess) -> None:
    """Topic changes, producer-id blocks and offset commits need the disk too: each is
    answered with an error code (not a closed connection) and changes nothing."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    with pytest.raises(KafkaException) as failed:
        admin.create_topics([NewTopic("no-room", 1, 1)])["no-room"].result(15)
    assert failed.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
    assert "no-room" not in admin.list_topics(timeout=10).topics
    with RawClient(b.port) as c:
        resp = c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
        assert (resp.error_code, resp.producer_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
        commit = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="full", partitions=[
                OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=5)])])
        assert c.request(commit, 8).topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR  # Kafka's mapping


@pytest.mark.parametrize("workers", [0, 2])
def test_full_disk_stops_cleanly_restarts_serving_reads_and_recovers_when_freed(small_fs, brokers, workers):
    b = brokers(small_fs / "data", workers=workers)
    create(b.bootstrap, "full", 2)
    with RawClient(b.port) as c:  # creates the (still empty) offsets topic
        assert c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4).coordinators[0].error_code == 0
    acked = {0: fill(b.bootstrap, "full", 0, small_fs)}
    acked[1], errors = produce(b.bootstrap, "full", 1, [b"p1-%d" % i for i in range(3)])
    assert errors == [KafkaError.KAFKA_STORAGE_ERROR] * 3 and not acked[1]
    assert len(acked[0]) > 100
    assert_other_writes_refused_with_an_error(b)

    assert b.stop() == 0, b.log_tail()
    assert os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize < 64 * 1024  # still full

    b.start()
    assert_readable(b, "full", 0, acked[0])
    got, errors = produce(b.bootstrap, "full", 0, [b"refused" * 2000])  # more than the last page's room
    assert not got and errors == [KafkaError.KAFKA_STORAGE_ERROR]
    assert_no_worker_died(b)

    os.unlink(small_fs / "ballast")  # free space: produce works again, no restart needed
    more, errors = produce(b.bootstrap, "full", 0, [b"after-%d" % i for i in range(20)])
    assert not errors and sorted(more) == list(range(max(acked[0]) + 1, max(acked[0]) + 21))
    acked[0].update(more)
    assert b.stop() == 0, b.log_tail()
    assert (small_fs / "data" / ".kafka_cleanshutdown").exists()  # with space, a clean stop again
    b.start()
    assert_readable(b, "full", 0, acked[0])
    assert_no_worker_died(b)


def test_second_log_dir_keeps_serving_while_one_is_full(small_fs, tmp_path, brokers):
    big = tmp_path / "big"
    b = brokers(big, log_dirs=[big, small_fs / "data"], workers=2)
    create(b.bootstrap, "two", 2)
    for p in (0, 1):  # each owner opens its partition: one goes to each dir (the emptiest)
        first, errors = produce(b.bootstrap, "two", p, [b"first"])
        assert not errors and list(first) == [0]
    on_small = [p for p in (0, 1) if (small_fs / "data" / f"two-{p}").is_dir()]
    assert len(on_small) == 1 and (big / f"two-{1 - on_small[0]}").is_dir()
    small, other = on_small[0], 1 - on_small[0]
    full = {0: b"first", **fill(b.bootstrap, "two", small, small_fs)}
    ok, errors = produce(b.bootstrap, "two", other, [b"big-%d" % i for i in range(200)])
    assert not errors and sorted(ok) == list(range(1, 201))
    ok[0] = b"first"
    assert_readable(b, "two", other, ok)
    assert_readable(b, "two", small, full)
    create(b.bootstrap, "later", 2)  # new partitions go where there is room
    for p in (0, 1):
        got, errors = produce(b.bootstrap, "later", p, [b"later"])
        assert not errors and list(got) == [0]
        assert (big / f"later-{p}").is_dir() and not (small_fs / "data" / f"later-{p}").exists()

    assert b.stop() == 0, b.log_tail()
    b.start()
    more, errors = produce(b.bootstrap, "two", other, [b"again-%d" % i for i in range(50)])
    assert not errors and len(more) == 50
    ok.update(more)
    refused, errors = produce(b.bootstrap, "two", small, [b"refused" * 2000])
    assert not refused and errors == [KafkaError.KAFKA_STORAGE_ERROR]
    assert_readable(b, "two", other, ok)
    assert_readable(b, "two", small, full)
    assert_no_worker_died(b)
