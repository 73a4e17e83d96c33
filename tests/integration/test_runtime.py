"""The multi-process runtime: N pre-forked workers share one listener and the partition
table; any worker serves any partition. Connections are pinned to a worker by looking
at which worker process holds the server side of the socket (psutil)."""
from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
import time
from pathlib import Path

import psutil
import pytest

from kafkafast.client.records import decode_fetched
from kafkafast.protocol._generated.create_topics import CreateTopicsRequest
from kafkafast.protocol._generated.delete_topics import DeleteTopicsRequest
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol import api
from kafkafast.records import encode_batch
from kafkafast.runtime.shm import owner_for
from tests.support.raw_client import RawClient

WORKERS = 2


def worker_pids(b) -> list[int]:
    return sorted(p.pid for p in psutil.Process(b.proc.pid).children())


def serving_worker(b, client: RawClient) -> int | None:
    port = client.sock.getsockname()[1]
    for pid in worker_pids(b):
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.raddr and c.raddr.port == port and c.laddr.port == b.port:
                return pid
    return None


def client_per_worker(b) -> dict[int, RawClient]:
    """One raw connection landing on each worker (the kernel picks; we keep one of each)."""
    found: dict[int, RawClient] = {}
    spare = []
    for _ in range(200):
        c = RawClient(b.port)
        pid = None
        for _ in range(50):
            pid = serving_worker(b, c)
            if pid is not None:
                break
            time.sleep(0.01)
        if pid is not None and pid not in found:
            found[pid] = c
        else:
            spare.append(c)
        if len(found) == WORKERS:
            break
    for c in spare:
        c.close()
    assert len(found) == WORKERS, f"connections landed on {list(found)} only"
    return found


def create(c: RawClient, name: str, partitions: int) -> int:
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])], timeout_ms=5000)
    return c.request(req, 7).topics[0].error_code


def produce(c: RawClient, topic: str, partition: int, records: bytes, acks: int = -1):
    req = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    return c.request(req, 9).responses[0].partition_responses[0]


def fetch_request(topic: str, partitions: list[int], *, max_wait_ms: int = 0, min_bytes: int = 0,
                  offset: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=64 << 20,
                        isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                            topic=topic, partitions=[FetchRequest.FetchPartition(
                                partition=p, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                partition_max_bytes=32 << 20) for p in partitions])], forgotten_topics_data=[],
                        rack_id="")


def fetch(c: RawClient, topic: str, partitions: list[int], **kw) -> dict[int, bytes]:
    resp = c.request(fetch_request(topic, partitions, **kw), 11)
    return {p.partition_index: bytes(p.records or b"") for p in resp.responses[0].partitions}


def topic_names(c: RawClient) -> set[str]:
    return {t.name for t in c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9).topics}


def batch(tag: str, n: int = 5) -> bytes:
    return encode_batch([(1_700_000_000_000 + i, f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode() * 20, [])
                         for i in range(n)])


@pytest.fixture
def multi(broker_factory, tmp_path):
    stats = tmp_path / "sendfile-stats"
    stats.mkdir()
    b = broker_factory("multi", workers=WORKERS, env={"KAFKAFAST_SENDFILE_STATS": str(stats)})
    b.sendfile_stats = stats
    return b


def test_workers_are_distinct_live_processes_each_serving_clients(multi):
    pids = worker_pids(multi)
    assert len(pids) == WORKERS and len(set(pids)) == WORKERS
    assert multi.proc.pid not in pids
    clients = client_per_worker(multi)
    assert sorted(clients) == pids
    for c in clients.values():
        assert create(c, f"t-{c.sock.getsockname()[1]}", 1) == 0
        c.close()


def test_produce_on_one_worker_and_fetch_on_each_return_the_stored_bytes_via_sendfile(multi):
    clients = client_per_worker(multi)
    (pa, a), (pb, b) = sorted(clients.items())
    assert create(a, "spread", 4) == 0
    # Through worker A, then worker B, to every partition: half of them are owned by the
    # other worker, so those appends are forwarded.
    for p in range(4):
        assert produce(a, "spread", p, batch(f"a{p}")).error_code == 0
        r = produce(b, "spread", p, batch(f"b{p}"))
        assert r.error_code == 0 and r.base_offset == 5
    assert {owner_for("spread", p, WORKERS) for p in range(4)} == {0, 1}
    via_a = fetch(a, "spread", list(range(4)))
    via_b = fetch(b, "spread", list(range(4)))
    assert via_a == via_b
    for p in range(4):
        stored = (multi.data_dir / f"spread-{p}" / "00000000000000000000.log").read_bytes()
        assert via_a[p] == stored and len(stored) > 0
    total = sum(len(v) for v in via_a.values())

    def sendfile_stats() -> dict[int, dict]:
        stats = [json.loads(f.read_text()) for f in Path(multi.sendfile_stats).glob("sendfile-*.json")]
        return {s["pid"]: s for s in stats}

    deadline = time.monotonic() + 5  # a worker records a call just after the bytes left
    while time.monotonic() < deadline:
        by_pid = sendfile_stats()
        if set(by_pid) == {pa, pb} and all(s["bytes"] >= total for s in by_pid.values()):
            break
        time.sleep(0.05)
    assert set(by_pid) == {pa, pb}, "both workers answered fetches with os.sendfile"
    for pid in (pa, pb):
        assert by_pid[pid]["calls"] >= 1 and by_pid[pid]["bytes"] >= total


def test_fetch_parked_on_one_worker_wakes_when_another_worker_appends(multi):
    clients = client_per_worker(multi)
    (pa, a), (pb, b) = sorted(clients.items())
    assert create(a, "wake", 2) == 0
    for p in (0, 1):  # let both owners open their logs
        assert produce(a, "wake", p, batch("x", 1)).error_code == 0
    # B parks a fetch for up to 20 s; A appends to each partition in turn (one is owned by
    # A, one by B) and the parked fetch must answer at once, both times.
    for p in (0, 1):
        req = fetch_request("wake", [p], max_wait_ms=20000, min_bytes=1, offset=1)
        b.correlation += 1
        b.sock.sendall(api.encode_request(req, 11, b.correlation, "raw-test"))
        time.sleep(0.3)
        t0 = time.monotonic()
        assert produce(a, "wake", p, batch(f"late{p}", 2)).error_code == 0
        _, resp = api.decode_response(1, 11, b.recv_frame())
        waited = time.monotonic() - t0
        assert waited < 2.0, f"parked fetch took {waited:.2f}s to wake"
        part = resp.responses[0].partitions[0]
        assert part.high_watermark == 3 and len(part.records) > 0


def test_topic_changes_through_one_worker_are_visible_through_all_immediately(multi):
    clients = client_per_worker(multi)
    (_, a), (_, b) = sorted(clients.items())
    assert create(a, "seen", 3) == 0
    assert "seen" in topic_names(b)
    assert produce(b, "seen", 2, batch("old")).error_code == 0
    resp = b.request(DeleteTopicsRequest(topic_names=["seen"], timeout_ms=5000), 5)
    assert resp.responses[0].error_code == 0
    assert "seen" not in topic_names(a)
    assert create(a, "seen", 3) == 0
    r = produce(a, "seen", 2, batch("new"))
    assert r.error_code == 0 and r.base_offset == 0, "a re-created topic starts empty"
    assert fetch(b, "seen", [2])[2] == (multi.data_dir / "seen-2" / "00000000000000000000.log").read_bytes()


def test_confluent_kafka_round_trip_through_several_workers(multi):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": multi.bootstrap})
    admin.create_topics([NewTopic("ck", 6, 1)])["ck"].result(10)
    sent: dict[int, list[bytes]] = {p: [] for p in range(6)}
    p = Producer({"bootstrap.servers": multi.bootstrap, "linger.ms": 2, "enable.idempotence": True})
    for i in range(3000):
        value = b"value-%05d" % i
        p.produce("ck", value=value, key=b"%d" % i, partition=i % 6)
        sent[i % 6].append(value)
    assert p.flush(30) == 0
    got: dict[int, list[bytes]] = {p: [] for p in range(6)}
    consumers = [Consumer({"bootstrap.servers": multi.bootstrap, "group.id": f"rt{i}", "enable.auto.commit": False})
                 for i in range(3)]
    for c in consumers:  # three clients, three sets of connections spread over the workers
        c.assign([TopicPartition("ck", q, 0) for q in range(6)])
    deadline = time.time() + 30
    results = [dict((q, []) for q in range(6)) for _ in consumers]
    while time.time() < deadline and any(sum(map(len, r.values())) < 3000 for r in results):
        for c, r in zip(consumers, results):
            for m in c.consume(500, 0.2):
                assert m.error() is None
                r[m.partition()].append(m.value())
    for c in consumers:
        c.close()
    for r in results:
        assert r == sent


def test_consumer_group_commits_through_any_worker_reach_the_coordinating_worker(multi):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": multi.bootstrap})
    admin.create_topics([NewTopic("grp", 4, 1)])["grp"].result(10)
    p = Producer({"bootstrap.servers": multi.bootstrap, "linger.ms": 2})
    for i in range(400):
        p.produce("grp", value=b"g-%04d" % i, partition=i % 4)
    assert p.flush(30) == 0

    def member() -> Consumer:
        c = Consumer({"bootstrap.servers": multi.bootstrap, "group.id": "runtime-group", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
        c.subscribe(["grp"])
        return c

    c = member()
    seen: list[bytes] = []
    deadline = time.time() + 30
    while len(seen) < 200 and time.time() < deadline:
        for m in c.consume(50, 0.2):
            assert m.error() is None
            seen.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    c = member()  # a new member, new connections: resumes at the committed offsets
    deadline = time.time() + 30
    while len(set(seen)) < 400 and time.time() < deadline:
        seen += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
    c.close()
    assert len(seen) == 400 and len(set(seen)) == 400


def test_pipelined_large_produce_frames_of_changing_sizes_are_stored_exactly(multi):
    """Large frames are received into reused buffers: requests of growing and shrinking
    sizes, all written before any answer is read, half of them forwarded to the other
    worker, must land byte for byte."""
    clients = client_per_worker(multi)
    (_pa, a), (_pb, b) = sorted(clients.items())
    assert create(a, "big", 2) == 0
    rng = random.Random(7)
    sizes = [200_000, 1_000_000, 50_000, 900_000, 9_000, 1_000_000, 700_000, 1_000_000, 12_000, 600_000] * 2
    frames = bytearray()
    expected: dict[int, list[bytes]] = {0: [], 1: []}
    for i, size in enumerate(sizes):
        partition = i % 2
        values = [rng.randbytes(size // 4) for _ in range(4)]
        records = encode_batch([(1_700_000_000_000, None, v, []) for v in values])
        req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name="big", partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])
        frames += api.encode_request(req, 9, 1000 + i, "pipelined")
        expected[partition] += values
    assert {owner_for("big", p, WORKERS) for p in range(2)} == {0, 1}
    a.sock.settimeout(60)
    a.sock.sendall(frames)
    for i in range(len(sizes)):
        corr, body = api.decode_response(0, 9, a.recv_frame())
        part = body.responses[0].partition_responses[0]
        assert corr == 1000 + i and part.error_code == 0 and part.base_offset == (i // 2) * 4
    for p in (0, 1):
        records, _next = decode_fetched(fetch(b, "big", [p])[p], "big", p, 0)
        assert [r.value for r in records] == expected[p]


@pytest.mark.parametrize("workers", [0, 2])
def test_kafkafast_profile_writes_a_cpu_profile_of_every_serving_process(tmp_path, workers):
    """KAFKAFAST_PROFILE (with KAFKAFAST_PROFILE_CPU): the one process of `--workers 0` and each
    worker of `--workers N` write their cProfile at shutdown, with the requests they served in it
    (perf/cluster_workers_where.py compares the two)."""
    import pstats

    from tests.support.broker_process import BrokerProcess

    out = tmp_path / "prof"
    out.mkdir()
    b = BrokerProcess(tmp_path / "data", workers=workers,
                      env={"KAFKAFAST_PROFILE": str(out), "KAFKAFAST_PROFILE_CPU": "1"}).start()
    try:
        c = RawClient(b.port)
        create(c, "profiled", 2)
        for p in (0, 1):
            produce(c, "profiled", p, batch("x"))
        c.close()
    finally:
        assert b.stop() == 0
    files = sorted(out.glob("*.prof"))
    assert [f.name.split("-")[0] for f in files] == (["broker"] if workers == 0 else ["worker"] * workers)
    served = [sum(row[1] for (path, _, name), row in pstats.Stats(str(f)).stats.items()
                  if path.endswith("handlers/produce.py") and name == "handle") for f in files]
    assert sum(served) >= 2, served


def test_kafkafast_profile_gate_profiles_only_between_its_signals(tmp_path):
    """KAFKAFAST_PROFILE_GATE: each worker names itself by a gate file and profiles nothing until
    SIGUSR1, then until SIGUSR2: of seven produces, the three sent in between are in the profiles."""
    import pstats
    import signal

    from tests.support.broker_process import BrokerProcess

    out = tmp_path / "prof"
    out.mkdir()
    b = BrokerProcess(tmp_path / "data", workers=2, env={"KAFKAFAST_PROFILE": str(out), "KAFKAFAST_PROFILE_CPU": "1",
                                                         "KAFKAFAST_PROFILE_GATE": "1"}).start()
    try:
        gates = [int(f.name.split("-")[1]) for f in out.glob("gate-*")]
        assert sorted(gates) == sorted(worker_pids(b))
        c = RawClient(b.port)
        create(c, "gated", 2)

        def produce_n(n: int) -> None:
            for i in range(n):
                produce(c, "gated", i % 2, batch("g"))

        produce_n(2)
        for pid in gates:
            os.kill(pid, signal.SIGUSR1)
        produce_n(3)
        for pid in gates:
            os.kill(pid, signal.SIGUSR2)
        produce_n(2)
        c.close()
    finally:
        assert b.stop() == 0
    checked = sum(row[1] for f in out.glob("*.prof") for (path, _, name), row in pstats.Stats(str(f)).stats.items()
                  if path.endswith("handlers/produce.py") and name == "checked_records")
    assert checked == 3
