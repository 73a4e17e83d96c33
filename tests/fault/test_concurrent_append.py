"""Many workers appending to one partition at once, and workers dying in the middle of it
(issue 17): black-box, so they hold for forwarding to an owner worker and for appends
through shared memory alike.

* Concurrency: a 3-worker broker, raw connections pinned to every worker (found with
  psutil) plus confluent-kafka producers, idempotent and not, all appending to one
  partition (small segments, so it rolls meanwhile) for DURATION_S while a raw reader
  fetches it live. Then the segment files are read back: whole batches with good CRCs,
  contiguous offsets, every acknowledged record exactly once where its response said,
  every idempotent producer's sequences unbroken although its batches went through
  different workers, and exactly what the live reader was served. Duplicates sent through
  another worker answer with the original offset, a gap answers
  OUT_OF_ORDER_SEQUENCE_NUMBER.
* Crash: SIGKILL a worker while everything appends, CRASH_ROUNDS times, rotating over the
  workers; each time every surviving worker accepts a write again (the time is reported,
  the issue's target is WRITABLE_TARGET_S), and at the end the log holds no torn batch,
  every acknowledged record once, and what the live reader was served.

Every test runs its broker with the compiled twins and with the pure ones.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import decode_batch, encode_batch, scan_valid_prefix
from kafkafast.records.batch import iter_entries
from tests.fault.test_worker_failures import latest_worker_pid, worker_pids
from tests.support.raw_client import RawClient

WORKERS = 3
DURATION_S = 5.0  # the issue asks 30 s; bounded for the CI run (still ~80 000 records, ~10 segment rolls)
CONNS_PER_WORKER = 2  # plain raw appenders pinned to each worker; the first one's records are big
BULK_KEY_BYTES = 4096  # key size of the big records: longer writes, more chances to die in one
IDEMPOTENT_APPENDERS = 2  # raw idempotent producers, each with one connection on every worker
KAFKA_PRODUCERS = 4  # confluent-kafka producers (every other one idempotent), landing anywhere
KAFKA_RATE = 2000  # records a second per confluent-kafka producer (bounded: the machine is shared)
CRASH_ROUNDS = 5
APPEND_BEFORE_KILL_S = 1.0
# The target is "writable from the other workers within a second"; the assertion
# allows for a loaded machine, and the observed times are printed and recorded.
WRITABLE_TARGET_S = 1.0
WRITABLE_DEADLINE_S = 5.0
PRODUCE_VERSION = 9
SEGMENT_BYTES = 4 << 20  # small segments: the partition rolls while every worker appends
# the brokers run with the compiled twins and with the pure ones (the lock word, the codec)
TWINS = pytest.mark.parametrize("twins", [{}, {"KAFKAFAST_PURE": "1"}], ids=["compiled", "pure"])


# ---------------------------------------------------------------- connections per worker

def serving_pid(b, client: RawClient, pids: set[int]) -> int | None:
    """The worker holding the broker's end of this connection."""
    port = client.sock.getsockname()[1]
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        if any(c.raddr and c.raddr.port == port and c.laddr.port == b.port for c in conns):
            return pid
    return None


def connections_on(b, pids: set[int], per_worker: int) -> dict[int, list[RawClient]]:
    """`per_worker` connections served by each of `pids` (the kernel spreads new connections
    over the workers' SO_REUSEPORT sockets; the extra ones are closed)."""
    got: dict[int, list[RawClient]] = {pid: [] for pid in pids}
    for _ in range(60 * per_worker * len(pids)):
        if all(len(v) >= per_worker for v in got.values()):
            return got
        c = RawClient(b.port)
        pid = None
        for _ in range(20):  # the worker's accept may trail the client's connect
            pid = serving_pid(b, c, pids)
            if pid is not None:
                break
            time.sleep(0.01)
        if pid is not None and len(got[pid]) < per_worker:
            got[pid].append(c)
        else:
            c.close()
    raise AssertionError(f"could not place {per_worker} connections on each of {sorted(pids)}: "
                         f"{ {p: len(v) for p, v in got.items()} }")


# ---------------------------------------------------------------- produce over raw connections

def bulk(i: int) -> int:
    """Key bytes of the records of the i-th plain appender on a worker."""
    return BULK_KEY_BYTES if i == 0 else 0


def produce_request(topic: str, batch: bytes, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])


def send(c: RawClient, topic: str, batch: bytes) -> tuple[int, int]:
    """(error code, base offset) of one batch appended to partition 0."""
    r = c.request(produce_request(topic, batch), PRODUCE_VERSION).responses[0].partition_responses[0]
    return r.error_code, r.base_offset


def batch_of(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1, key_bytes: int = 0) -> bytes:
    now = int(time.time() * 1000)
    key = b"k" * key_bytes if key_bytes else None
    return encode_batch([(now, key, v, []) for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq)


def init_producer_id(c: RawClient) -> tuple[int, int]:
    r = c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


@dataclass
class Acked:
    """What the broker acknowledged: values, and for raw appends where they went."""
    values: set[bytes] = field(default_factory=set)
    at: dict[int, bytes] = field(default_factory=dict)  # offset -> value (raw appends)
    refused: set[bytes] = field(default_factory=set)  # values answered with an error code
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, values: list[bytes], base_offset: int | None = None) -> None:
        with self.lock:
            self.values.update(values)
            if base_offset is not None:
                for i, v in enumerate(values):
                    self.at[base_offset + i] = v


# ---------------------------------------------------------------- reading the partition's files

@dataclass
class LogContents:
    batches: list  # (BatchHeader, [values]) in offset order
    values: collections.Counter
    at: dict[int, bytes]
    size: int  # bytes in all segments
    segments: int


def read_partition(data_dir: Path, topic: str) -> LogContents:
    """Every segment of partition 0, checked: each file is whole batches with good CRCs (no
    torn or trailing bytes), named by its first offset, none empty but the last, and offsets
    run on without a gap."""
    seg_dir = data_dir / f"{topic}-0"
    segments = sorted(seg_dir.glob("*.log"))
    assert segments, f"no segment in {seg_dir}"
    batches, at = [], {}
    values: collections.Counter = collections.Counter()
    next_offset = None
    size = 0
    for seg in segments:
        data = seg.read_bytes()
        size += len(data)
        valid, found = scan_valid_prefix(data)
        assert valid == len(data), f"{seg.name}: only {valid} of {len(data)} bytes are whole batches with good CRCs"
        # an empty segment before the last one (an unpublished roll left behind) would
        # answer a fetch of the offsets from its base with the next segment's batches
        assert found or seg == segments[-1], f"{seg.name}: an empty segment inside the log"
        if found:
            assert found[0][1].base_offset == int(seg.stem), f"{seg.name} starts at {found[0][1].base_offset}"
        for pos, _h in found:
            header, records = decode_batch(data, pos, check_crc=True)
            if next_offset is not None:
                assert header.base_offset == next_offset, (
                    f"offset gap or overlap: {next_offset} then {header.base_offset}")
            assert header.records_count == header.last_offset_delta + 1 == len(records)
            next_offset = header.next_offset
            vals = [r.value for r in records]
            batches.append((header, vals))
            for r in records:
                values[r.value] += 1
                at[r.offset] = r.value
    assert batches and batches[0][0].base_offset == 0
    return LogContents(batches, values, at, size, len(segments))


def assert_acknowledged_once(log: LogContents, acked: Acked) -> None:
    twice = [v for v, n in log.values.items() if n > 1]
    assert not twice, f"{len(twice)} records stored more than once, e.g. {twice[:3]}"
    missing = acked.values - set(log.values)
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:3]}"
    wrong = {o: v for o, v in acked.at.items() if log.at.get(o) != v}
    assert not wrong, f"{len(wrong)} records not at the offset their response gave, e.g. {list(wrong.items())[:3]}"
    assert not (acked.refused & set(log.values)), "a refused batch was stored"


def assert_sequences_unbroken(log: LogContents) -> dict[tuple[int, int], int]:
    """Per producer id and epoch (idempotent batches only), in offset order, sequences start
    at 0 and each batch's base sequence follows the previous batch's last one. Returns the
    number of batches per (producer id, epoch)."""
    last: dict[tuple[int, int], int] = {}
    count: collections.Counter = collections.Counter()
    for h, _ in log.batches:
        if h.producer_id < 0 or h.base_sequence < 0:
            continue
        key = (h.producer_id, h.producer_epoch)
        expected = last[key] + 1 if key in last else 0
        assert h.base_sequence == expected, f"producer {key}: sequence {h.base_sequence}, expected {expected}"
        last[key] = h.base_sequence + h.last_offset_delta
        count[key] += 1
    return count


# ---------------------------------------------------------------- load

class RawAppender(threading.Thread):
    """Appends small batches over raw connections until stopped.

    Plain (no producer id): one connection; with `survive_crashes`, a lost connection is
    replaced by a new one (landing on any worker) and an error answer is tolerated (the
    batch may or may not be stored: it is just not acknowledged).
    Idempotent: one producer id whose batches rotate over connections on different
    workers, with a duplicate of the previous batch through another worker every 7th batch
    (must answer with the original offset) and an out-of-sequence batch every 11th (must
    answer OUT_OF_ORDER_SEQUENCE_NUMBER and not be stored)."""

    def __init__(self, name: str, port: int, topic: str, conns: list[RawClient], acked: Acked,
                 stop: threading.Event, *, idempotent: bool = False, survive_crashes: bool = False,
                 key_bytes: int = 0) -> None:
        super().__init__(name=name, daemon=True)
        self.port, self.topic, self.conns, self.acked, self.stop_ = port, topic, conns, acked, stop
        self.idempotent, self.survive, self.key_bytes = idempotent, survive_crashes, key_bytes
        self.failures: list[str] = []
        self.sent = self.lost = self.duplicates_checked = self.gaps_checked = 0

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.failures.append(f"{self.name}: {exc!r}")

    def _run(self) -> None:
        pid, epoch = init_producer_id(self.conns[0]) if self.idempotent else (-1, -1)
        seq = n = 0
        prev: tuple[bytes, int] | None = None
        rnd = random.Random(self.name)
        while not self.stop_.is_set():
            i = n % len(self.conns)
            count = rnd.randint(1, 5)
            values = [b"%s-%07d" % (self.name.encode(), n * 8 + k) for k in range(count)]
            batch = batch_of(values, pid, epoch, seq if self.idempotent else -1, self.key_bytes)
            n += 1
            try:
                err, base = send(self.conns[i], self.topic, batch)
            except OSError:  # ConnectionError included
                if not self.survive:
                    raise
                self.lost += 1
                self.conns[i].close()
                self.conns[i] = self._connect()
                continue
            self.sent += 1
            if err != 0:
                if not self.survive:
                    raise AssertionError(f"batch {n}: error {err}")
                self.lost += 1
                time.sleep(0.02)
                continue
            self.acked.add(values, base)
            if not self.idempotent:
                continue
            seq += count
            if prev is not None and n % 7 == 0:
                answer = send(self.conns[n % len(self.conns)], self.topic, prev[0])
                assert answer == (0, prev[1]), f"a duplicate answered {answer}; it is stored at {prev[1]}"
                self.duplicates_checked += 1
            if n % 11 == 0:
                gap = [b"%s-gap-%07d" % (self.name.encode(), n)]
                err, _ = send(self.conns[(n + 1) % len(self.conns)], self.topic, batch_of(gap, pid, epoch, seq + 3))
                assert err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, f"a sequence gap answered {err}"
                with self.acked.lock:
                    self.acked.refused.update(gap)
                self.gaps_checked += 1
            prev = (batch, base)

    def _connect(self) -> RawClient:
        deadline = time.monotonic() + 30
        while True:
            try:
                return RawClient(self.port)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


class KafkaProducerLoad(threading.Thread):
    """A confluent-kafka producer sending numbered values to partition 0 until stopped."""

    def __init__(self, name: str, bootstrap: str, topic: str, acked: Acked, stop: threading.Event,
                 idempotent: bool) -> None:
        super().__init__(name=name, daemon=True)
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": bootstrap, "linger.ms": 2, "message.timeout.ms": 30000,
                "reconnect.backoff.ms": 20, "retry.backoff.ms": 20}
        if idempotent:
            conf.update({"enable.idempotence": True, "acks": "all"})
        else:  # no retries: a retried batch may legitimately be stored twice
            conf.update({"acks": "1", "retries": 0})
        self.producer = Producer(conf)
        self.topic, self.acked, self.stop_ = topic, acked, stop
        self.failures: list[str] = []
        self.sent = 0

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.add([msg.value()])
        else:
            self.failures.append(f"{self.name}: {err}")

    def run(self) -> None:
        prefix = self.name.encode()
        while not self.stop_.is_set():  # at most about KAFKA_RATE records a second
            for _ in range(KAFKA_RATE // 100):
                self.producer.produce(self.topic, value=b"%s-%07d" % (prefix, self.sent), partition=0,
                                      on_delivery=self._delivered)
                self.sent += 1
            self.producer.poll(0.01)
        left = self.producer.flush(60)
        if left:
            self.failures.append(f"{self.name}: {left} records never acknowledged nor failed")
        self.producer = None  # closed before the broker stops


class LiveReader(threading.Thread):
    """Fetches partition 0 from offset 0 on, through any worker, while the appends and the
    crashes go on: every batch it receives must have a good CRC and start where the last
    one ended. Once `stop` is set it reads on until a fetch brings nothing new."""

    def __init__(self, port: int, topic: str, stop: threading.Event) -> None:
        super().__init__(name="reader", daemon=True)
        self.port, self.topic, self.stop_ = port, topic, stop
        self.next_offset = 0
        self.values: collections.Counter = collections.Counter()
        self.failures: list[str] = []
        self.errors: collections.Counter = collections.Counter()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.failures.append(f"reader: {exc!r}")

    def _fetch(self, c: RawClient):
        req = FetchRequest(replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic=self.topic, partitions=[FetchRequest.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=self.next_offset,
                                   log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
        return c.request(req, 11).responses[0].partitions[0]

    def _run(self) -> None:
        c = None
        deadline = None
        while True:
            if self.stop_.is_set() and deadline is None:
                deadline = time.monotonic() + 60
            if deadline is not None and time.monotonic() > deadline:
                raise AssertionError(f"still reading 60 s after the appends stopped, at offset {self.next_offset}")
            try:
                c = c or RawClient(self.port)
                part = self._fetch(c)
            except OSError:  # a worker died under this connection
                c = None
                time.sleep(0.02)
                continue
            if part.error_code != 0:
                self.errors[part.error_code] += 1
                time.sleep(0.02)
                continue
            data = part.records or b""
            for pos, _size, magic in iter_entries(data):
                assert magic == 2, f"magic {magic} at offset {self.next_offset}"
                header, records = decode_batch(data, pos, check_crc=True)  # a torn batch fails here
                assert header.base_offset == self.next_offset, (
                    f"fetched a batch at {header.base_offset}, expected {self.next_offset}")
                self.values.update(r.value for r in records)
                self.next_offset = header.next_offset
            if deadline is not None and not data and self.next_offset >= part.high_watermark:
                return


def start_load(port: int, topic: str, threads: list) -> tuple[LiveReader, threading.Event]:
    """Starts the appending threads and a live reader."""
    stop_reading = threading.Event()
    reader = LiveReader(port, topic, stop_reading)
    reader.start()
    for t in threads:
        t.start()
    return reader, stop_reading


def finish_load(threads: list, stop: threading.Event, reader: LiveReader, stop_reading: threading.Event) -> None:
    """Stops the appending threads, then lets the reader catch up."""
    stop.set()
    for t in threads:
        t.join(90)
    stop_reading.set()
    reader.join(90)


def assert_no_failures(threads: list) -> None:
    assert not any(t.is_alive() for t in threads)
    failures = [f for t in threads for f in t.failures[:3]]
    assert not failures, failures


def assert_reader_saw_the_log(reader: LiveReader, log: LogContents) -> None:
    """What the live reader was served while the appends (and crashes) went on is exactly
    what the log finally holds: no batch it read was torn, moved or taken back."""
    assert reader.next_offset == log.batches[-1][0].next_offset
    assert reader.values == log.values


def stop_and_read(b, conns: list[list[RawClient]], topic: str) -> LogContents:
    """Closes the raw connections, stops the broker cleanly and reads the partition's files."""
    for cs in conns:
        for c in cs:
            c.close()
    assert b.stop() == 0, b.log_tail()
    return read_partition(b.data_dir, topic)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)


# ---------------------------------------------------------------- tests

@TWINS
def test_idempotent_sequences_are_enforced_across_workers(twins, broker_factory):
    """One producer id, its batches sent through three different workers: a duplicate
    answers with the original offset, a gap with OUT_OF_ORDER_SEQUENCE_NUMBER, and only
    the in-sequence batches are stored, once."""
    b = broker_factory("seq", workers=WORKERS, env=twins)
    create_topic(b.bootstrap, "seq")
    conns = connections_on(b, worker_pids(b), 1)
    w0, w1, w2 = (cs[0] for cs in conns.values())
    pid, epoch = init_producer_id(w0)
    first = batch_of([b"s0", b"s1", b"s2"], pid, epoch, 0)
    assert send(w0, "seq", first) == (0, 0)
    assert send(w1, "seq", first) == (0, 0)  # duplicate through another worker
    assert send(w2, "seq", batch_of([b"gap"], pid, epoch, 5))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(w2, "seq", batch_of([b"s3"], pid, epoch, 3)) == (0, 3)
    assert send(w1, "seq", batch_of([b"s3"], pid, epoch, 3)) == (0, 3)
    assert send(w0, "seq", first) == (0, 0)  # still one of the last five batches
    assert send(w0, "seq", batch_of([b"old"], pid, epoch, 2))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # another producer id interleaves: sequences are per producer
    pid2, epoch2 = init_producer_id(w1)
    assert pid2 != pid
    assert send(w2, "seq", batch_of([b"p2-0"], pid2, epoch2, 0)) == (0, 4)
    assert send(w1, "seq", batch_of([b"s4", b"s5"], pid, epoch, 4)) == (0, 5)
    assert send(w0, "seq", batch_of([b"p2-1"], pid2, epoch2, 1)) == (0, 7)
    for cs in conns.values():
        cs[0].close()
    assert b.stop() == 0, b.log_tail()
    log = read_partition(b.data_dir, "seq")
    assert [v for _, vs in log.batches for v in vs] == [b"s0", b"s1", b"s2", b"s3", b"p2-0", b"s4", b"s5", b"p2-1"]
    assert assert_sequences_unbroken(log) == {(pid, epoch): 3, (pid2, epoch2): 2}


@TWINS
def test_many_workers_and_connections_append_to_one_partition(twins, broker_factory, record_property):
    b = broker_factory("many", workers=WORKERS, env=twins, settings={"log.segment.bytes": str(SEGMENT_BYTES)})
    topic = "shared"
    create_topic(b.bootstrap, topic)
    pids = worker_pids(b)
    assert len(pids) == WORKERS
    conns = list(connections_on(b, pids, CONNS_PER_WORKER + IDEMPOTENT_APPENDERS).values())
    acked, stop = Acked(), threading.Event()
    raw = [RawAppender(f"raw{i}w{w}", b.port, topic, [conns[w][i]], acked, stop, key_bytes=bulk(i))
           for i in range(CONNS_PER_WORKER) for w in range(WORKERS)]
    raw += [RawAppender(f"idem{i}", b.port, topic, [conns[w][CONNS_PER_WORKER + i] for w in range(WORKERS)],
                        acked, stop, idempotent=True) for i in range(IDEMPOTENT_APPENDERS)]
    kafka = [KafkaProducerLoad(f"ck{i}", b.bootstrap, topic, acked, stop, idempotent=i % 2 == 0)
             for i in range(KAFKA_PRODUCERS)]
    reader, stop_reading = start_load(b.port, topic, raw + kafka)
    time.sleep(DURATION_S)
    finish_load(raw + kafka, stop, reader, stop_reading)
    assert_no_failures(raw + kafka + [reader])
    log = stop_and_read(b, conns, topic)
    assert_acknowledged_once(log, acked)
    assert_reader_saw_the_log(reader, log)
    batches_per_producer = assert_sequences_unbroken(log)
    idem = [r for r in raw if r.idempotent]
    assert all(r.duplicates_checked > 0 and r.gaps_checked > 0 for r in idem)
    assert len(batches_per_producer) == len(idem) + (KAFKA_PRODUCERS + 1) // 2
    assert all(k.sent > 0 for k in kafka) and all(r.sent > 0 for r in raw)
    assert log.segments > 1, "the partition never rolled"
    stats = {"records": sum(log.values.values()), "batches": len(log.batches), "log_bytes": log.size,
             "segments": log.segments,
             "acked": len(acked.values),
             "raw_batches": sum(r.sent for r in raw), "kafka_records": sum(k.sent for k in kafka)}
    record_property("concurrent_append", stats)
    print(f"concurrent append over {WORKERS} workers for {DURATION_S}s: {stats}")


def broker_processes(b) -> str:
    """The broker's processes (it runs in a session of its own), for a failure message."""
    return subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,etime,args", "--sid", str(b.proc.pid)],
                          capture_output=True, text=True).stdout


def writable_from(topic: str, probes: dict[int, RawClient], since: float, tag: bytes,
                  acked: Acked) -> tuple[dict[int, float], list]:
    """Seconds from `since` until a produce through each probe connection (one per worker,
    opened before the kill) is acknowledged, retried until WRITABLE_DEADLINE_S; and the
    refusals seen meanwhile (error code or lost connection, seconds after `since`)."""
    took: dict[int, float] = {}
    refusals = []
    k = 0
    while True:
        for pid, c in probes.items():
            if pid in took:
                continue
            value = b"probe-%s-%d-%d" % (tag, pid, k)
            try:
                err, base = send(c, topic, batch_of([value]))
            except OSError as exc:  # a timeout included
                raise AssertionError(f"the surviving worker {pid} closed a connection or did not answer within "
                                     f"{WRITABLE_DEADLINE_S}s: {exc!r}") from None
            if err == 0:
                took[pid] = time.monotonic() - since
                acked.add([value], base)
            else:
                refusals.append((err, round(time.monotonic() - since, 3)))
        if len(took) == len(probes):
            return took, refusals
        k += 1
        assert time.monotonic() - since < WRITABLE_DEADLINE_S, (
            f"workers {sorted(set(probes) - set(took))} still refuse writes {WRITABLE_DEADLINE_S}s after the kill: "
            f"{refusals[:3]} ... {refusals[-3:]}")
        time.sleep(0.01)


@TWINS
def test_a_worker_killed_mid_append_leaves_the_partition_writable_and_no_torn_batch(
        twins, broker_factory, record_property):
    b = broker_factory("crash", workers=WORKERS, env=twins, settings={"log.segment.bytes": str(SEGMENT_BYTES)})
    topic = "crashy"
    create_topic(b.bootstrap, topic)
    conns = list(connections_on(b, worker_pids(b), CONNS_PER_WORKER).values())
    acked, stop = Acked(), threading.Event()
    raw = [RawAppender(f"raw{i}w{w}", b.port, topic, [conns[w][i]], acked, stop, survive_crashes=True,
                       key_bytes=bulk(i)) for i in range(CONNS_PER_WORKER) for w in range(WORKERS)]
    kafka = [KafkaProducerLoad(f"ck{i}", b.bootstrap, topic, acked, stop, idempotent=True) for i in range(2)]
    reader, stop_reading = start_load(b.port, topic, raw + kafka)
    rounds = []
    try:
        for r in range(CRASH_ROUNDS):
            time.sleep(APPEND_BEFORE_KILL_S)
            before = len(acked.values)
            victim_index = r % WORKERS  # every worker dies in turn, the partition's owner among them
            victim = latest_worker_pid(b, victim_index)[0]
            probes = {pid: cs[0] for pid, cs in connections_on(b, worker_pids(b), 1).items()}
            probes.pop(victim).close()
            for c in probes.values():
                c.sock.settimeout(WRITABLE_DEADLINE_S)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            took, refusals = writable_from(topic, probes, killed_at, b"%d" % r, acked)
            for c in probes.values():
                c.close()
            rounds.append({"victim_worker": victim_index, "writable_after_s": round(max(took.values()), 3),
                           "refusals": collections.Counter(e for e, _ in refusals), "acked_before_kill": before})
            deadline = time.monotonic() + 15  # the replacement is up before the next round
            while True:
                now = worker_pids(b)  # one look: the victim may still be listed until it is reaped
                if len(now) == WORKERS and victim not in now:
                    break
                assert time.monotonic() < deadline, (
                    f"worker {victim_index} was not replaced:\n{b.log_tail()}\n{broker_processes(b)}")
                time.sleep(0.05)
    finally:
        finish_load(raw + kafka, stop, reader, stop_reading)
    assert_no_failures(raw + kafka + [reader])
    log = stop_and_read(b, conns, topic)  # no torn batch anywhere, offsets contiguous
    assert log.segments > 1, "the partition never rolled"
    assert_acknowledged_once(log, acked)
    assert_sequences_unbroken(log)
    assert_reader_saw_the_log(reader, log)
    assert all(a.sent > 0 for a in raw) and all(k.sent > 0 for k in kafka)
    assert all(x["acked_before_kill"] > 0 for x in rounds)
    times = [x["writable_after_s"] for x in rounds]
    record_property("writable_after_kill_s", times)
    print(f"writable from every surviving worker after: {times} s (target {WRITABLE_TARGET_S}s); rounds: {rounds}; "
          f"reader's fetch errors: {dict(reader.errors)}; log: {len(log.batches)} batches, {log.size} bytes, "
          f"{log.segments} segments")
