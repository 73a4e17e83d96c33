"""The follower's append path (issue 25): a Fetch answer received into the fetcher's reused
buffer, walked in place, and each partition's records appended from a view of it leave the
followers' segment files byte for byte the leader's: many batches and partitions per answer,
answers cut exactly at replica.fetch.max.bytes by batches that fill it, compressed batches
(every codec), transactional batches and their COMMIT/ABORT control records. Run with the
compiled twins and with the pure ones (KAFKAFAST_PURE=1: the batch scan that checks CRCs and
headers), and with brokers of 2 workers in shared append (`kafkafast.produce.shared.append.cluster`,
the default: the leader's non-owner worker appends a produce itself, the followers' owner
workers append what they fetch under the partition's append lock, in shared mode). The followers are SIGSTOPped while the leader takes the bulk (acks=1, for less than
replica.lag.time.max.ms), so they catch up in answers of hundreds of KiB, cut by the limits.

Our leader answers whole batches only (reader.py), so a batch cut off by the fetch size is
pinned on real files: `Log.append_as_follower` given a view that ends inside a batch keeps
the batches before it and takes the rest on the next append, byte for byte, with both twins.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafkafast import native
from kafkafast.records import assign_offsets, encode_batch
from kafkafast.records.model import BATCH_HEADER_SIZE
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.storage import LogConfig
from kafkafast.storage import log as log_module
from kafkafast.storage.log import Log
from kafkafast.storage import txn_index
from tests.support.cluster import KafkaCluster
from tests.support.raw_client import RawClient

FETCH_MAX = 100_000  # replica.fetch.max.bytes: 100 batches of EXACT bytes fill it to the byte
EXACT, UNEVEN = 1000, 1500  # batch sizes of the two bulk topics (66 batches of 1500 leave 1000 bytes unused)
PARTITIONS = 4
BULK_BATCHES = 150  # per partition: a backlog of 150-225 KB each, fetched in several answers
CODECS = ("gzip", "snappy", "lz4", "zstd")
SETUPS = [({}, 0), ({"KAFKAFAST_PURE": "1"}, 0), ({}, 2)]  # (environment: the twins, workers per broker)


@pytest.fixture(scope="module", params=SETUPS, ids=["compiled", "pure", "compiled-workers2"])
def cluster(tmp_path_factory, request):
    env, workers = request.param
    if not env:
        compiled_built()
    c = KafkaCluster(tmp_path_factory.mktemp("follower-append"), env=env, workers=workers,
                     settings={"replica.fetch.max.bytes": str(FETCH_MAX)})
    try:
        yield c.start()
    finally:
        c.close()


def compiled_built() -> None:
    try:
        native.load_compiled("records")
    except ImportError:
        pytest.skip("compiled twins not built (python3 setup.py build_ext --inplace)")


def batch_of_size(size: int, seq: int) -> bytes:
    """A v2 batch of exactly `size` bytes, one record (its value padded to fit)."""
    def make(n: int) -> bytes:
        return encode_batch([(1_700_000_000_000 + seq, f"k{seq}".encode(), bytes([seq % 251]) * n, [])])
    pad = size - 100
    batch = make(pad)
    batch = make(pad + size - len(batch))
    assert len(batch) == size
    return batch


def segment_files(c: KafkaCluster, broker: int, topic: str, partition: int) -> dict[str, bytes]:
    d = Path(c.brokers[broker].data_dir) / f"{topic}-{partition}"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in (".log", ".txnindex")}


def replicas_identical(c: KafkaCluster, topic: str, partitions: int) -> bool:
    for p in range(partitions):
        leader = segment_files(c, 1, topic, p)
        if not any(leader.values()) or any(segment_files(c, b, topic, p) != leader for b in (2, 3)):
            return False
    return True


def produce_bulk(c: KafkaCluster, topic: str, size: int) -> None:
    """BULK_BATCHES Produce requests (acks=1), each with one batch of `size` bytes per partition."""
    with RawClient(c.brokers[1].port, timeout=30) as rc:
        for i in range(BULK_BATCHES):
            req = ProduceRequest(acks=1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=batch_of_size(size, i))
                                            for p in range(PARTITIONS)])])
            resp = rc.request(req, 9)
            assert all(pr.error_code == 0 for tr in resp.responses for pr in tr.partition_responses)


def produce_transactions(c: KafkaCluster, topic: str) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 5,
                  "compression.type": "lz4"})
    p.init_transactions(30)
    for t in range(6):
        p.begin_transaction()
        for i in range(40):
            p.produce(topic, f"txn-{t}-{i}".encode() * 10, partition=i % PARTITIONS)
        assert p.flush(30) == 0  # written before an abort too (an abort drops what is still queued)
        (p.commit_transaction if t % 2 == 0 else p.abort_transaction)(30)


def produce_compressed(c: KafkaCluster, topic: str) -> None:
    for codec in CODECS:
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": 1, "linger.ms": 20, "compression.type": codec})
        for i in range(2000):
            p.produce(topic, f"{codec}-{i:05d}".encode() * 8, key=str(i % 7).encode(), partition=i % PARTITIONS)
        assert p.flush(30) == 0


def control_batches(files: dict[str, bytes]) -> int:
    """Control batches in the .log files (attributes bit 5), by walking the batch lengths."""
    n = 0
    for name, data in files.items():
        pos = 0
        while name.endswith(".log") and pos + BATCH_HEADER_SIZE <= len(data):
            n += bool(int.from_bytes(data[pos + 21:pos + 23], "big") & 0x20)
            pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    return n


def test_followers_append_fetch_answers_into_byte_identical_segment_files(cluster) -> None:
    c = cluster
    assignment = [[1, 2, 3]] * PARTITIONS  # broker 1 leads every partition
    for topic in ("exact", "uneven", "mixed"):
        c.create_topic(topic, PARTITIONS, 3, assignment=assignment)
    produce_transactions(c, "mixed")  # acks=all inside: with every broker running
    followers = [c.brokers[b].proc for b in (2, 3)]
    for proc in followers:
        os.killpg(proc.pid, signal.SIGSTOP)
    try:
        produce_bulk(c, "exact", EXACT)
        produce_bulk(c, "uneven", UNEVEN)
        produce_compressed(c, "mixed")
    finally:
        for proc in followers:
            os.killpg(proc.pid, signal.SIGCONT)
    for topic in ("exact", "uneven", "mixed"):
        c.wait_for(lambda: replicas_identical(c, topic, PARTITIONS), 60, f"{topic}: the followers' files the leader's")
    for p in range(PARTITIONS):
        assert sum(map(len, segment_files(c, 1, "exact", p).values())) == BULK_BATCHES * EXACT
        assert sum(map(len, segment_files(c, 1, "uneven", p).values())) == BULK_BATCHES * UNEVEN
    mixed = [segment_files(c, 1, "mixed", p) for p in range(PARTITIONS)]
    assert sum(control_batches(f) for f in mixed) == 6 * PARTITIONS  # one marker per transaction per partition
    assert any(name.endswith(".txnindex") and data for f in mixed for name, data in f.items())  # the aborts


# -------------------------------------------------------- a batch cut off by the fetch size

@pytest.fixture(params=["compiled", "pure"])
def twin_scan(request, monkeypatch):
    """The follower append's batch scan from the compiled twin or from the pure one."""
    if request.param == "compiled":
        compiled_built()
    module = native.load_compiled("records") if request.param == "compiled" else native.load_pure("records")
    monkeypatch.setattr(log_module, "scan_follower_batches", module.scan_follower_batches)


def test_a_batch_cut_off_at_the_end_of_the_answer_is_dropped_and_appended_whole_next_time(tmp_path, twin_scan) -> None:
    batches = [bytearray(batch_of_size(EXACT if i % 2 else UNEVEN, i)) for i in range(5)]
    for i, b in enumerate(batches):  # at the leader's offsets 0..4, epoch 3, as a leader's log holds them
        assign_offsets(b, i, 3)
    whole = bytes(b"".join(batches))
    cut = len(batches[0]) + len(batches[1]) + len(batches[2]) // 2
    answer = bytearray(b"\xff" * 7 + whole[:cut] + b"\xee" * 5)  # records inside a larger buffer
    lg = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig.from_props({}), needs_recovery=False, recovery_point=0)
    try:
        assert lg.append_as_follower(memoryview(answer)[7:7 + cut], now_ms=0) == 2  # the third batch is cut off
        rest = memoryview(whole)[len(batches[0]) + len(batches[1]):]  # fetched again from offset 2
        assert lg.append_as_follower(rest, now_ms=0) == 5
        lg.flush()
        assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == whole
    finally:
        lg.close()


# ------------------------------------------ producer state and epochs from the follower's scan

def leader_batches() -> list[tuple[bytearray, int]]:
    """(batch, leader epoch) as a leader appends them: an idempotent producer's run (more than
    the 5 batches a producer keeps), a plain producer's, two transactions (committed, aborted)
    interleaved with the idempotent producer, and a new producer epoch, over leader epochs 1 and 3."""
    ts = 1_700_000_000_000
    out: list[tuple[bytearray, int]] = []

    def add(epoch: int, i: int, **producer) -> None:
        out.append((bytearray(encode_batch([(ts + i, b"k", bytes([i]) * 100, [])], **producer)), epoch))

    for i in range(8):
        add(1, i, producer_id=5, producer_epoch=0, base_sequence=i)
        add(1, i)
    for i in range(3):
        add(1, 10 + i, producer_id=9, producer_epoch=2, base_sequence=i, is_transactional=True)
        add(1, 20 + i, producer_id=5, producer_epoch=0, base_sequence=8 + i)
    out.append((txn_index.control_batch(9, 2, txn_index.COMMIT, 4, ts + 30), 1))
    for i in range(2):
        add(3, 40 + i, producer_id=9, producer_epoch=2, base_sequence=3 + i, is_transactional=True)
        add(3, 50 + i, producer_id=5, producer_epoch=1, base_sequence=i)
    out.append((txn_index.control_batch(9, 2, txn_index.ABORT, 5, ts + 60), 3))
    add(3, 70, producer_id=9, producer_epoch=3, base_sequence=0, is_transactional=True)  # left open
    return out


def partition_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.mark.parametrize("index_interval,cut", [("4096", 700), ("1", 700), ("1", 1 << 20)])
def test_a_follower_keeps_the_leaders_producer_state_and_epochs(tmp_path, twin_scan, index_interval, cut) -> None:
    """The follower's scan picks out the producers' batches and the epoch changes: its files
    after a clean close (producer snapshot, leader-epoch-checkpoint, .txnindex, segment and
    indexes) are the leader's, and so is its last stable offset (an open transaction), fed the
    leader's segment in answers cut anywhere, mid-batch included, or in one answer. With
    index.interval.bytes=1 every batch has index entries: the follower writes those of one
    answer's batches together, the leader those of each batch alone, and the files are the same."""
    cfg = LogConfig.from_props({"index.interval.bytes": index_interval})
    leader = Log.open(str(tmp_path / "leader" / "t-0"), "t", 0, cfg, needs_recovery=False, recovery_point=0)
    follower = Log.open(str(tmp_path / "follower" / "t-0"), "t", 0, cfg, needs_recovery=False, recovery_point=0)
    try:
        for batch, epoch in leader_batches():
            leader.append(batch, epoch, now_ms=0)
        leader.flush()
        data = (tmp_path / "leader" / "t-0" / "00000000000000000000.log").read_bytes()
        pos = 0  # cut=700: about five batches an answer, cut inside a batch
        while pos < len(data):
            answer = bytearray(b"\xee" * 3 + data[pos:pos + cut])  # a view inside a larger buffer
            follower.append_as_follower(memoryview(answer)[3:], now_ms=0)
            pos = (tmp_path / "follower" / "t-0" / "00000000000000000000.log").stat().st_size
        assert follower.log_end_offset == leader.log_end_offset
        assert follower.last_stable_offset(follower.log_end_offset) == leader.last_stable_offset(leader.log_end_offset)
        assert follower.last_stable_offset(follower.log_end_offset) < follower.log_end_offset  # the open one
    finally:
        leader.close()
        follower.close()
    want = partition_files(tmp_path / "leader" / "t-0")
    assert {n for n in want if n.endswith((".snapshot", ".txnindex"))}
    if index_interval == "1":  # an entry for every batch but the first (none at position 0)
        assert len(want["00000000000000000000.index"]) == 8 * (len(leader_batches()) - 1)
    assert partition_files(tmp_path / "follower" / "t-0") == want
