"""Worker faults and shutdown of the multi-process runtime: a SIGKILLed worker is replaced
within a second and loses no acknowledged record; SIGTERM stops everything cleanly and
the next start performs no recovery scan."""
from __future__ import annotations

import os
import re
import signal
import threading
import time

import psutil

WORKERS = 2
SCAN = re.compile(r"worker (\d+) \(incarnation (\d+)\): \d+ owned partitions loaded .* recovery scan of (\d+) bytes")


def worker_pids(b) -> set[int]:
    return {p.pid for p in psutil.Process(b.proc.pid).children()}


def scans(log_text: str) -> list[tuple[int, int, int]]:
    """(worker, incarnation, bytes scanned) per worker start in the broker log."""
    return [tuple(map(int, m.groups())) for m in SCAN.finditer(log_text)]  # type: ignore[misc]


def read_log(b, since: int = 0) -> str:
    return b.log_path.read_bytes()[since:].decode(errors="replace")


def worker_starts(b, since: int) -> list[tuple[int, int, int]]:
    """The start lines of every worker after `since` (the broker answers as soon as one
    worker serves; the others may log a moment later)."""
    deadline = time.monotonic() + 15
    while True:
        found = scans(read_log(b, since))
        if len(found) >= WORKERS or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_sigkilled_worker_is_replaced_and_every_acknowledged_record_is_read_once(broker_factory):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory("kill", workers=WORKERS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("crash", 4, 1)])["crash"].result(10)
    acked: list[bytes] = []
    failed = [0]

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed[0] += 1

    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 2, "message.timeout.ms": 30000, "reconnect.backoff.ms": 20,
                         "retry.backoff.ms": 20})
    consumed: list[bytes] = []
    stop_consuming = threading.Event()

    def consume() -> None:  # a live consumer through the crash as well
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "live", "enable.auto.commit": False,
                      "reconnect.backoff.ms": 20, "fetch.wait.max.ms": 50})
        c.assign([TopicPartition("crash", p, 0) for p in range(4)])
        while not stop_consuming.is_set():
            for m in c.consume(500, 0.1):
                if m.error() is None:
                    consumed.append(m.value())
        c.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    before = worker_pids(b)
    victim = min(before)
    replaced_after = None
    for i in range(30000):
        producer.produce("crash", value=b"rec-%06d" % i, on_delivery=on_delivery)
        if i % 100 == 0:
            producer.poll(0)
            time.sleep(0.001)
        if i == 10000:
            while len(acked) < 5000:  # the victim holds acknowledged data when it dies
                producer.poll(0.01)
            os.kill(victim, signal.SIGKILL)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5:
                now = worker_pids(b)
                if victim not in now and len(now) == WORKERS:
                    replaced_after = time.monotonic() - t0
                    break
                time.sleep(0.01)
    assert producer.flush(60) == 0
    assert replaced_after is not None and replaced_after < 1.0, f"replacement after {replaced_after}"
    after = worker_pids(b)
    assert len(after) == WORKERS and victim not in after and len(after & before) == WORKERS - 1

    # Every acknowledged record exactly once, read back from the beginning...
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition("crash", p, 0) for p in range(4)])
    read: list[bytes] = []
    deadline = time.time() + 60
    while time.time() < deadline and len(set(read)) < len(set(acked)):
        read += [m.value() for m in c.consume(1000, 0.5) if m.error() is None]
    c.close()
    assert failed[0] == 0 and len(acked) == 30000
    assert set(acked) <= set(read)
    assert len(read) == len(set(read)), "a record was stored twice"
    # ...and by the consumer that ran through the crash.
    deadline = time.time() + 30
    while time.time() < deadline and len(set(consumed)) < len(set(acked)):
        time.sleep(0.1)
    stop_consuming.set()
    consumer.join(10)
    assert set(acked) <= set(consumed)
    assert len(consumed) == len(set(consumed))
    replacement = [s for s in worker_starts(b, 0) if s[1] == 2]
    assert replacement and replacement[0][2] > 0, "the replacement recovered the killed worker's partitions"


def test_sigterm_exits_zero_within_ten_seconds_and_the_next_start_scans_nothing(broker_factory):
    from confluent_kafka import Producer

    b = broker_factory("term", workers=WORKERS)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2})
    for i in range(5000):
        p.produce("auto-created", value=b"x" * 100, partition=-1)
    assert p.flush(30) == 0
    t0 = time.monotonic()
    assert b.stop(timeout=15) == 0
    assert time.monotonic() - t0 < 10.0
    assert (b.data_dir / ".kafka_cleanshutdown").exists()
    mark = b.log_path.stat().st_size
    b.start()
    starts = worker_starts(b, mark)
    assert len(starts) == WORKERS and all(s[2] == 0 for s in starts), starts
    assert "unclean" not in read_log(b, mark)

    # The same check after a crash of the whole broker does see a scan.
    b.kill()
    mark = b.log_path.stat().st_size
    b.start()
    starts = worker_starts(b, mark)
    assert len(starts) == WORKERS and sum(s[2] for s in starts) > 0, starts


WORKER_STARTED = re.compile(r"worker (\d+) started: pid (\d+) \(incarnation (\d+)\)")


def latest_worker_pid(b, index: int) -> tuple[int, int] | None:
    """(pid, incarnation) of the newest start of worker `index` in the broker log."""
    found = [(int(m.group(2)), int(m.group(3))) for m in WORKER_STARTED.finditer(read_log(b))
             if int(m.group(1)) == index]
    return found[-1] if found else None


def test_a_crash_looping_worker_backs_off_and_the_broker_keeps_serving(broker_factory):
    """A worker killed over and over (an OOM killer, a bug) no longer makes the supervisor
    give up on the whole broker: the worker is restarted with a growing delay, the other
    worker keeps serving, and every partition is back once the worker stays up."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory("loop", workers=WORKERS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("loop", 4, 1)])["loop"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2})
    for i in range(400):
        p.produce("loop", value=b"v-%04d" % i, partition=i % 4)
    assert p.flush(30) == 0

    killed = set()
    deadline = time.monotonic() + 60
    while len(killed) < 12 and time.monotonic() < deadline:  # more than CRASH_LOOP_LIMIT deaths in 30 s
        assert b.proc.poll() is None, f"the supervisor gave up:\n{b.log_tail()}"
        latest = latest_worker_pid(b, 0)
        if latest is None or latest[1] in killed:
            time.sleep(0.02)
            continue
        try:
            os.kill(latest[0], signal.SIGKILL)
        except ProcessLookupError:
            pass
        killed.add(latest[1])
    assert len(killed) == 12
    assert b.proc.poll() is None, f"the supervisor gave up:\n{b.log_tail()}"
    assert "worker 0 keeps dying" in read_log(b)
    # Worker 0 comes back after its delay; then every partition is served again.
    while latest_worker_pid(b, 0)[1] in killed and time.monotonic() < deadline:
        time.sleep(0.1)
    assert latest_worker_pid(b, 0)[1] not in killed
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "loop-reader", "enable.auto.commit": False})
    c.assign([TopicPartition("loop", part, 0) for part in range(4)])
    got = set()
    while len(got) < 400 and time.monotonic() < deadline:
        got |= {m.value() for m in c.consume(500, 0.5) if m.error() is None}
    c.close()
    assert got == {b"v-%04d" % i for i in range(400)}
    assert b.stop() == 0


def test_a_replaced_worker_takes_a_partitions_leader_epoch_from_its_owner(broker_factory):
    """A worker names the leader epoch of a partition another worker owns as the owner published
    it in the partition's slot (the epoch it leads at), not as the partition's checkpoint file
    says: worker 0, replaced after a SIGKILL, names worker 1's epoch 3 though the file, rewritten
    here meanwhile, says 0."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkafast.protocol._generated.metadata import MetadataRequest
    from kafkafast.runtime.shm import owner_for
    from tests.support.raw_client import RawClient

    b = broker_factory("epochs", workers=WORKERS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("epochs", 4, 1)])["epochs"].result(10)
    owned_by_1 = next(p for p in range(4) if owner_for("epochs", p, WORKERS) == 1)
    b.stop()
    checkpoint = b.data_dir / f"epochs-{owned_by_1}" / "leader-epoch-checkpoint"
    checkpoint.parent.mkdir(exist_ok=True)
    checkpoint.write_text("0\n1\n3 0\n")
    b.start()

    def epochs_named(connections: int) -> set[int]:
        """The partition's leader epoch in Metadata, over new connections (landing on either
        worker), once it has a leader."""
        named = set()
        deadline = time.monotonic() + 10
        while len(named) < connections and time.monotonic() < deadline:
            with RawClient(b.port) as c:
                meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="epochs")]), 9)
            part = meta.topics[0].partitions[owned_by_1]
            if part.leader_id >= 0:
                named.add((len(named), part.leader_epoch))
            else:
                time.sleep(0.02)
        return {epoch for _, epoch in named}

    assert epochs_named(4) == {3}
    checkpoint.write_text("0\n1\n0 0\n")  # (worker 1 leads on at epoch 3: it writes the file at a change only)
    mark = b.log_path.stat().st_size
    pid, incarnation = latest_worker_pid(b, 0)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while not any(s[:2] == (0, incarnation + 1) for s in scans(read_log(b, mark))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert epochs_named(12) == {3}
