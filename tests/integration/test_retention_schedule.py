"""log.retention.check.interval.ms decides when retention runs, and
log.flush.offset.checkpoint.interval.ms / log.flush.start.offset.checkpoint.interval.ms
when the recovery-point and log-start checkpoints are written (Kafka: every interval, the
first run min(interval, 30 s) after start), through a real broker and a real client."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_admin_and_fetch import offsets, produce_n, segments_within

SETTINGS = {"log.segment.bytes": "2048", "log.retention.bytes": "4096", "log.segment.delete.delay.ms": "0"}


def log_start(b, topic):
    return offsets(b.port, topic, -2).offset


def wait_for_log_start_above(b, topic, floor, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        start = log_start(b, topic)
        if start > floor:
            return start
        time.sleep(0.1)
    return log_start(b, topic)


def test_retention_runs_on_every_short_interval(broker_factory):
    b = broker_factory(settings={**SETTINGS, "log.retention.check.interval.ms": "300"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("short", 1, 1)])["short"].result(10)
    time.sleep(1)
    produce_n(b.bootstrap, "short", 200)
    first = wait_for_log_start_above(b, "short", 0, 10)
    assert first > 0, "retention never ran with log.retention.check.interval.ms=300"
    time.sleep(1)
    produce_n(b.bootstrap, "short", 200)
    segs = segments_within(b.data_dir / "short-0", 4096 + 2048 * 2, timeout=10)
    second = log_start(b, "short")
    assert second > first, "retention ran once, not on every interval"
    assert offsets(b.port, "short", -1).offset == 400
    assert int(min(segs).stem) == second and sum(segs.values()) <= 4096 + 2048 * 2


def test_retention_waits_for_a_long_interval(broker_factory):
    b = broker_factory(settings={**SETTINGS, "log.retention.check.interval.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("long", 1, 1)])["long"].result(10)
    produce_n(b.bootstrap, "long", 200)
    b.restart()  # data over retention.bytes is there from the start
    segments = sorted((b.data_dir / "long-0").glob("*.log"))
    assert len(segments) > 3
    time.sleep(2.5)
    assert log_start(b, "long") == 0
    assert sorted((b.data_dir / "long-0").glob("*.log")) == segments


def checkpoint_entry(b, name, topic):
    """This partition's offset in checkpoint file `name` (None: no file or no entry yet)."""
    try:
        lines = (b.data_dir / name).read_text().splitlines()[2:]
    except FileNotFoundError:
        return None
    found = [int(line.split()[2]) for line in lines if line.split()[:2] == [topic, "0"]]
    return found[0] if found else None


def wait_for_checkpoint(b, name, topic, want, timeout):
    deadline = time.monotonic() + timeout
    while checkpoint_entry(b, name, topic) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return checkpoint_entry(b, name, topic)


@pytest.mark.parametrize("interval_ms", [300, 600000])
def test_offset_checkpoints_are_written_on_their_intervals(broker_factory, interval_ms):
    b = broker_factory(settings={"log.segment.bytes": "2048",
                                 "log.flush.offset.checkpoint.interval.ms": str(interval_ms),
                                 "log.flush.start.offset.checkpoint.interval.ms": str(interval_ms)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("cp", 1, 1)])["cp"].result(10)
    time.sleep(1)  # past the first checkpoint of a short interval: the next ones must follow
    produce_n(b.bootstrap, "cp", 100)
    admin.delete_records([TopicPartition("cp", 0, 60)])[TopicPartition("cp", 0, 60)].result(10)
    segments = sorted(int(p.stem) for p in (b.data_dir / "cp-0").glob("*.log"))
    rolled_to = segments[-1]  # rolled segments are flushed: the recovery point reaches the active one
    if interval_ms == 300:
        assert wait_for_checkpoint(b, "log-start-offset-checkpoint", "cp", 60, 10) == 60
        assert wait_for_checkpoint(b, "recovery-point-offset-checkpoint", "cp", rolled_to, 10) == rolled_to
    else:
        time.sleep(2)
        assert checkpoint_entry(b, "log-start-offset-checkpoint", "cp") is None
        assert checkpoint_entry(b, "recovery-point-offset-checkpoint", "cp") is None
