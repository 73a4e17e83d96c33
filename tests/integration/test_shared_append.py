"""Shared append (issue 17): with `--workers 3` every worker appends a produce for any
partition itself, through the partition's append lock in shared memory, instead of
forwarding it to the owner. Connections are pinned to workers by looking up which worker
process holds the server side of each client socket."""
from __future__ import annotations

import glob
import re
import threading
import time

import psutil
import pytest

from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import batch_crc_ok, encode_batch, scan_valid_prefix
from kafkafast.records.batch import decode_batch
from tests.support.raw_client import RawClient

WORKERS = 3
FLAVOURS = pytest.mark.parametrize("flavour", ["cython", "pure"])


def start_broker(broker_factory, flavour: str, name: str, **settings: str):
    # An environment of its own: a new interpreter, whose log says which twin its import loaded.
    return broker_factory(name, workers=WORKERS, env={"KAFKAFAST_PURE": "1" if flavour == "pure" else "0"},
                          settings={"kafkafast.produce.shared.append": "true", **settings})


def worker_of(b, client: RawClient) -> int:
    """The pid of the worker serving `client`'s connection."""
    port = client.sock.getsockname()[1]
    for _ in range(100):
        for child in psutil.Process(b.proc.pid).children():
            try:
                conns = child.net_connections(kind="tcp")
            except psutil.Error:
                continue
            if any(c.raddr and c.raddr.port == port for c in conns):
                return child.pid
        time.sleep(0.02)
    raise AssertionError("no worker holds the connection")


def clients_on_every_worker(b, per_worker: int = 1, workers: int = WORKERS) -> list[RawClient]:
    """`per_worker` connections on each of the broker's `workers` workers (others are closed)."""
    by_worker: dict[int, list[RawClient]] = {}
    extra = []
    for _ in range(200):
        c = RawClient(b.port)
        lst = by_worker.setdefault(worker_of(b, c), [])
        (lst if len(lst) < per_worker else extra).append(c)
        if len(by_worker) == workers and all(len(v) == per_worker for v in by_worker.values()):
            break
    for c in extra:
        c.close()
    assert len(by_worker) == workers, "connections never reached every worker"
    return [c for v in by_worker.values() for c in v]


def assert_flavour(b, flavour: str) -> None:
    """The workers excluded each other with the twin under test."""
    text = b.log_path.read_text(errors="replace")
    assert ("shm_atomic: pure-Python twin loaded" if flavour == "pure" else
            "shm_atomic: compiled twin kafkafast._native.shm_atomic loaded") in text


def shared_appenders(b, topic: str, partition: int = 0) -> set[int]:
    """Indexes of the workers that appended to the partition without owning it (their log line)."""
    text = b.log_path.read_text(errors="replace")
    return {int(m.group(1)) for m in re.finditer(
        rf"worker (\d+) appends to {re.escape(topic)}-{partition} \(owner: worker \d+\) through shared memory", text)}


def create_topic(b, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def produce(c: RawClient, topic: str, batch: bytes, partition: int = 0):
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    return c.request(req, 8).responses[0].partition_responses[0]


def values(n: int, tag: bytes) -> list[tuple[int, bytes | None, bytes, list]]:
    now = int(time.time() * 1000)
    return [(now, None, tag + b"-%03d" % i, []) for i in range(n)]


def read_log_files(b, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in the partition's segment files, checking that every
    batch's CRC is valid, offsets are contiguous and no byte follows the last whole batch."""
    out: list[tuple[int, bytes]] = []
    expect = 0
    for path in sorted(glob.glob(str(b.data_dir / "**" / f"{topic}-{partition}" / "*.log"), recursive=True)):
        data = open(path, "rb").read()
        end, headers = scan_valid_prefix(data, 0)
        assert end == len(data), f"{path}: {len(data) - end} bytes after the last valid batch (a torn batch)"
        for pos, h in headers:
            assert batch_crc_ok(data, pos, h.size), f"{path}@{pos}: bad CRC"
            assert h.base_offset == expect, f"{path}@{pos}: batch at {h.base_offset}, expected {expect}"
            _, recs = decode_batch(data, pos, check_crc=True)
            out += [(r.offset, bytes(r.value)) for r in recs]
            expect = h.last_offset + 1
    return out


@FLAVOURS
def test_three_workers_append_to_one_partition_concurrently_with_contiguous_offsets(broker_factory, flavour):
    b = start_broker(broker_factory, flavour, "conc")
    create_topic(b, "same")
    clients = clients_on_every_worker(b, per_worker=2)
    pids = {}
    with RawClient(b.port) as c0:
        init = c0.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
        assert init.error_code == 0
    acked: dict[bytes, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def run(i: int, c: RawClient) -> None:
        idem = i % 2 == 0
        seq = 0
        for n in range(60):
            recs = values(1 + n % 4, b"c%d-%03d" % (i, n))
            if idem:
                batch = encode_batch(recs, producer_id=pids[i], producer_epoch=0, base_sequence=seq)
                seq += len(recs)
            else:
                batch = encode_batch(recs)
            r = produce(c, "same", batch)
            with lock:
                if r.error_code:
                    errors.append(f"client {i}: {r.error_code} {r.error_message}")
                    return
                for k, rec in enumerate(recs):
                    acked[rec[2]] = r.base_offset + k

    # each idempotent client gets its own producer id
    for i in range(0, len(clients), 2):
        pids[i] = clients[i].request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
                                     4).producer_id
    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(acked) == sum(sum(1 + n % 4 for n in range(60)) for _ in clients)
    # Read back through the broker: every acknowledged record once, at its acknowledged offset.
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "chk", "enable.auto.commit": False})
    cons.assign([TopicPartition("same", 0, 0)])
    got: dict[bytes, int] = {}
    dupes = 0
    deadline = time.time() + 60
    while len(got) < len(acked) and time.time() < deadline:
        for m in cons.consume(500, 0.5):
            if m.error() is None:
                dupes += m.value() in got
                got[m.value()] = m.offset()
    cons.close()
    assert dupes == 0 and got == acked
    assert len(shared_appenders(b, "same")) == WORKERS - 1  # not forwarded: both non-owners appended
    assert_flavour(b, flavour)
    for c in clients:
        c.close()
    b.stop()
    on_disk = read_log_files(b, "same")
    assert [o for o, _ in on_disk] == list(range(len(acked)))
    assert {v: o for o, v in on_disk} == acked


@FLAVOURS
def test_an_idempotent_retry_reaching_another_worker_is_a_duplicate(broker_factory, flavour):
    b = start_broker(broker_factory, flavour, "dup")
    create_topic(b, "dups")
    a, b2, c3 = clients_on_every_worker(b)
    init = a.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
    pid = init.producer_id
    first = encode_batch(values(3, b"first"), producer_id=pid, producer_epoch=0, base_sequence=0)
    r = produce(a, "dups", first)
    assert (r.error_code, r.base_offset) == (0, 0)
    for other in (b2, c3, a):  # the retry of the same batch over every worker: the original offsets
        r = produce(other, "dups", first)
        assert (r.error_code, r.base_offset) == (0, 0)
    nxt = encode_batch(values(2, b"next"), producer_id=pid, producer_epoch=0, base_sequence=3)
    assert (produce(c3, "dups", nxt).base_offset) == 3
    gap = encode_batch(values(1, b"gap"), producer_id=pid, producer_epoch=0, base_sequence=9)
    for other in (a, b2, c3):  # a sequence gap is refused whichever worker sees it
        assert produce(other, "dups", gap).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plain = produce(b2, "dups", encode_batch(values(1, b"plain")))
    assert (plain.error_code, plain.base_offset) == (0, 5)
    assert len(shared_appenders(b, "dups")) == WORKERS - 1
    assert_flavour(b, flavour)
    for c in (a, b2, c3):
        c.close()
    b.stop()
    assert [v for _, v in read_log_files(b, "dups")] == [b"first-000", b"first-001", b"first-002", b"next-000",
                                                          b"next-001", b"plain-000"]


def shared_txn_appenders(b, topic: str, partition: int = 0) -> set[int]:
    """Indexes of the non-owner workers that appended a transactional batch themselves."""
    text = b.log_path.read_text(errors="replace")
    return {int(m.group(1)) for m in re.finditer(
        rf"worker (\d+) appended a transactional batch to {re.escape(topic)}-{partition} \(owner: worker \d+\)", text)}


def read_values(b, topic: str, isolation: str, expect: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"r-{isolation}", "isolation.level": isolation,
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.time() + 30
    idle_until = None
    while time.time() < deadline:
        for m in cons.consume(500, 0.3):
            if m.error() is None:
                out.append(m.value())
        if len(out) >= expect:  # anything beyond what is expected shows up too
            idle_until = idle_until or time.time() + 1.0
            if time.time() > idle_until:
                break
    cons.close()
    return out


@FLAVOURS
def test_transactional_produce_on_every_worker_keeps_the_lso_and_read_committed(broker_factory, flavour):
    """A transactional producer whose produce requests reach all three workers (each appends
    them itself), interleaved with a plain producer on the same partition: while a transaction
    is open the LSO (ListOffsets READ_COMMITTED) stays at its first offset, the owner's
    marker moves it, read_committed gets exactly the committed records, and a batch of a
    fenced epoch is refused by every worker."""
    from kafkafast.protocol._generated.add_partitions_to_txn import AddPartitionsToTxnRequest
    from kafkafast.protocol._generated.end_txn import EndTxnRequest
    from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest

    b = start_broker(broker_factory, flavour, "txn", **{"transaction.state.log.num.partitions": "3",
                                                        "offsets.topic.num.partitions": "3"})
    create_topic(b, "tx")
    a, b2, c3 = clients_on_every_worker(b)
    tid = "shared-tid"

    def retried(call, *retriable):
        deadline = time.time() + 30
        while True:
            resp = call()
            if resp.error_code not in retriable or time.time() > deadline:
                return resp
            time.sleep(0.1)

    def init():
        resp = retried(lambda: a.request(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000), 4),
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                       ErrorCode.CONCURRENT_TRANSACTIONS)
        assert resp.error_code == 0
        return resp.producer_id, resp.producer_epoch

    pid, epoch = init()
    seq = 0
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

    def begin():
        added = a.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[T(name="tx", partitions=[0])]), 3)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

    def txn(c: RawClient, tag: bytes, n: int = 2, ep: int | None = None):
        nonlocal seq
        batch = encode_batch(values(n, tag), producer_id=pid, producer_epoch=epoch if ep is None else ep,
                             base_sequence=seq, is_transactional=True)
        req = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10000, topic_data=[
            ProduceRequest.TopicProduceData(name="tx", partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
        r = c.request(req, 8).responses[0].partition_responses[0]
        if r.error_code == 0:
            seq += n
        return r

    def plain(c: RawClient, tag: bytes) -> int:
        r = produce(c, "tx", encode_batch(values(1, tag)))
        assert r.error_code == 0
        return r.base_offset

    def end(commit: bool) -> None:
        resp = retried(lambda: a.request(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                       committed=commit), 3), ErrorCode.CONCURRENT_TRANSACTIONS)
        assert resp.error_code == 0

    def offsets() -> tuple[int, int]:
        """(log end, last stable offset), each asked of another worker"""
        out = []
        LT = ListOffsetsRequest.ListOffsetsTopic
        for c, isolation in ((b2, 0), (c3, 1)):
            resp = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[LT(
                name="tx", partitions=[LT.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
            out.append(resp.topics[0].partitions[0].offset)
        return out[0], out[1]

    committed: list[bytes] = []
    everything: list[bytes] = []

    def expect(tag: bytes, n: int, keep: bool) -> None:
        vals = [v for _, _, v, _ in values(n, tag)]
        everything.extend(vals)
        if keep:
            committed.extend(vals)

    # 1: committed, its batches on all three workers, plain records between them
    begin()
    plain(b2, b"p1"); expect(b"p1", 1, True)
    first = txn(a, b"t1a")
    assert first.error_code == 0; expect(b"t1a", 2, True)
    plain(c3, b"p2"); expect(b"p2", 1, True)
    for c, tag in ((b2, b"t1b"), (c3, b"t1c")):
        assert txn(c, tag).error_code == 0; expect(tag, 2, True)
    assert offsets() == (8, first.base_offset) == (8, 1)  # held at the open transaction's first offset
    end(True)                                            # COMMIT marker at 8
    assert offsets() == (9, 9)
    # 2: aborted, opened by a non-owner
    begin()
    first = txn(c3, b"t2a")
    assert (first.error_code, first.base_offset) == (0, 9); expect(b"t2a", 2, False)
    plain(a, b"p3"); expect(b"p3", 1, True)
    assert txn(b2, b"t2b").error_code == 0; expect(b"t2b", 2, False)
    assert offsets() == (14, 9)
    end(False)                                           # ABORT marker at 14
    plain(b2, b"p4"); expect(b"p4", 1, True)
    assert offsets() == (16, 16)
    # 3: left open, then fenced: a new InitProducerId aborts it with the bumped epoch
    begin()
    first = txn(b2, b"t3")
    assert (first.error_code, first.base_offset) == (0, 16); expect(b"t3", 2, False)
    assert offsets() == (18, 16)
    old = epoch
    pid2, epoch = init()                                 # ABORT marker at 18 (epoch + 1), then bumped again
    assert pid2 == pid and epoch > old
    assert offsets() == (19, 19)
    for c in (a, b2, c3):  # the fenced epoch is refused whichever worker appends it
        assert txn(c, b"zombie", ep=old).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    seq = 0
    begin()
    assert txn(c3, b"t4").error_code == 0; expect(b"t4", 2, True)
    end(True)
    assert offsets() == (22, 22)

    assert len(shared_txn_appenders(b, "tx")) == WORKERS - 1  # not forwarded: both non-owners appended
    assert_flavour(b, flavour)
    assert read_values(b, "tx", "read_committed", len(committed)) == committed
    assert read_values(b, "tx", "read_uncommitted", len(everything)) == everything
    for c in (a, b2, c3):
        c.close()
    b.stop()
    assert [o for o, _ in read_log_files(b, "tx")] == list(range(22))  # markers at 8, 14, 18, 21
