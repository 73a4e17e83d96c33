"""Helpers of the storage fault tests (tests/fault/): produce without retries, read a
partition back with a real client, check that no worker died, fill a small file system."""
from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkafast.client import KafkaConsumer, TopicPartition
from tests.support.broker_process import BrokerProcess


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> tuple[dict, list]:
    """Produce without retries: ({offset: value} acknowledged, [error codes of the others])."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 2,
                  "message.timeout.ms": 20000, "enable.idempotence": False})
    acked: dict[int, bytes] = {}
    errors: list = []

    def report(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err.code())

    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=report)
    assert p.flush(30) == 0
    return acked, errors


def read_all(bootstrap: str, topic: str, partition: int, end: int) -> dict[int, bytes]:
    """Every record below `end` with kafkafast's own consumer (no group: nothing is written)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(out) < end and time.monotonic() < deadline:
            for records in c.poll(1000).values():
                for r in records:
                    out[r.offset] = r.value
        return out
    finally:
        c.close()


def assert_readable(b: BrokerProcess, topic: str, partition: int, acked: dict[int, bytes]) -> None:
    got = read_all(b.bootstrap, topic, partition, max(acked) + 1)
    assert {o: got.get(o) for o in acked} == acked
    assert sorted(got) == list(range(max(acked) + 1))


def assert_no_worker_died(b: BrokerProcess) -> None:
    assert b.proc.poll() is None, b.log_tail()
    assert "starting a replacement" not in b.log_path.read_text(errors="replace"), b.log_tail()


def top_up(mount: Path) -> None:
    """Take every page left on the small file system (into its filler file)."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_APPEND)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
