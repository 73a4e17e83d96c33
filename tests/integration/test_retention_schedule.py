"""log.retention.check.interval.ms decides when retention runs (Kafka: every interval, the
first run min(interval, 30 s) after start), through a real broker and a real client."""
from __future__ import annotations

import time

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
