"""Durability across restarts: a clean restart keeps every record at its offset and skips
the recovery scan; a SIGKILL during produce loses no acknowledged record and duplicates
none, and the restarted broker recovers the logs."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def read_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 60) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + timeout
    idle = 0
    while time.monotonic() < deadline and (len(out) < expect or idle < 2):
        msgs = c.consume(5000, 1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            assert m.error() is None, m.error()
            out[(m.partition(), m.offset())] = m.value()
        if len(out) >= expect and idle >= 2:
            break
    c.close()
    return out


def test_clean_restart_keeps_records_offsets_and_skips_recovery(broker):
    create(broker.bootstrap, "durable", 4)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    acked = {}
    for i in range(20_000):
        p.produce("durable", key=b"%d" % i, value=b"v%d" % i,
                  on_delivery=lambda err, m: err is None and acked.__setitem__((m.partition(), m.offset()), m.value()))
        if i % 2000 == 0:
            p.poll(0)
    assert p.flush(30) == 0 and len(acked) == 20_000
    assert broker.stop() == 0
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    assert "clean start: no recovery scan" in broker.log_tail(400).split("shutting down")[-1]
    assert read_all(broker.bootstrap, "durable", 4, 20_000) == acked
    # and new records continue at the next offsets
    p = Producer({"bootstrap.servers": broker.bootstrap})
    got = []
    p.produce("durable", value=b"after", partition=0, on_delivery=lambda e, m: got.append(m.offset()))
    p.flush(10)
    assert got == [sum(1 for (pp, _) in acked if pp == 0)]


def test_sigkill_during_produce_loses_no_acknowledged_record(broker):
    create(broker.bootstrap, "crashy", 3)
    acked: dict[tuple[int, int], bytes] = {}
    stop = threading.Event()

    def on_delivery(err, m):
        if err is None:
            acked[(m.partition(), m.offset())] = m.value()

    def produce_loop():
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 2,
                      "message.timeout.ms": 3000, "retries": 0})
        i = 0
        while not stop.is_set():
            try:
                p.produce("crashy", value=b"rec-%08d" % i, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0 if i % 500 else 0.001)
        p.flush(10)

    t = threading.Thread(target=produce_loop)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 30_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()  # SIGKILL while the producer is running
    stop.set()
    t.join(30)
    assert len(acked) >= 1000
    assert not (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    stored = read_all(broker.bootstrap, "crashy", 3, len(acked))
    for where, value in acked.items():
        assert stored.get(where) == value, where
    values = list(stored.values())
    assert len(values) == len(set(values)), "a record is stored twice"


def start_lines(b, since: int, workers: int) -> list[str]:
    """The clean/unclean lines of the start whose log begins at byte `since`: the supervisor's
    (with workers) and each process's that loads partitions, once all of them have logged."""
    deadline = time.monotonic() + 30
    while True:
        with open(b.log_path, "rb") as fh:
            fh.seek(since)
            lines = [line for line in fh.read().decode(errors="replace").splitlines() if "clean start" in line]
        loaders = [line for line in lines if "kafkafast.broker:" in line]
        if len(loaders) >= max(workers, 1):
            return lines
        assert time.monotonic() < deadline, lines
        time.sleep(0.01)


@pytest.mark.parametrize("workers", [0, 2])
def test_supervisor_and_workers_tell_one_story_about_a_clean_or_unclean_start(broker_factory, workers):
    b = broker_factory(workers=workers)  # a fresh data dir: nothing to recover, a clean start
    fresh = start_lines(b, 0, workers)
    assert fresh and all(" clean start" in line for line in fresh), fresh
    if workers:
        assert any("kafkafast.supervisor:" in line for line in fresh), fresh
    create(b.bootstrap, "story", 2)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce("story", value=b"%d" % i, partition=i % 2)
    assert p.flush(10) == 0

    b.kill()  # no clean shutdown: the next start recovers, and every line says so
    since = b.log_path.stat().st_size
    b.start()
    unclean = start_lines(b, since, workers)
    assert len(unclean) == max(workers, 1) + (1 if workers else 0), unclean
    assert all("unclean start" in line for line in unclean), unclean

    assert b.stop() == 0
    since = b.log_path.stat().st_size
    b.start()
    clean = start_lines(b, since, workers)
    assert len(clean) == len(unclean) and all(" clean start" in line for line in clean), clean
