"""kafkafast consumer against a real broker: assign round trip, offsets API, reset policy,
pause/resume, groups (alone, with a rebalance listener, and shared with confluent-kafka)."""
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from kafkafast.client import AIOConsumer, AIOProducer, KafkaConsumer, KafkaProducer, TopicPartition
from kafkafast.client import admin
from kafkafast.protocol.errors import CorruptMessageError, OffsetOutOfRangeError

HAVE_GROUP_COORDINATOR = (Path(__file__).resolve().parents[2] / "kafkafast/broker/group_coordinator.py").exists()
needs_groups = pytest.mark.skipif(not HAVE_GROUP_COORDINATOR, reason="kafkafast group coordinator not present yet")


def _fill(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    admin.create_topics_sync(bootstrap, [(topic, partitions)])
    with KafkaProducer(bootstrap, linger_ms=2) as p:
        futs = [p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % partitions, headers=[("i", b"%d" % i)])
                for i in range(n)]
        p.flush()
        assert [f.get(10).offset for f in futs[:partitions]] == [0] * partitions


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_assign_reads_back_every_codec(bootstrap: str, codec: str) -> None:
    topic = f"cons-{codec}-{time.monotonic_ns()}"

    async def run() -> dict:
        await admin.create_topics(bootstrap, [(topic, 2)])
        async with AIOProducer(bootstrap, compression_type=codec, linger_ms=2) as p:
            futs = [await p.send(topic, b"%d" % i * 20, key=b"k%d" % i, headers=[("n", b"%d" % i)]) for i in range(1000)]
            metas = {(m.partition, m.offset): i for i, m in enumerate([await f for f in futs])}
        async with AIOConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            got = {}
            deadline = time.monotonic() + 20
            while len(got) < 1000 and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=500)).items():
                    for r in recs:
                        got[(tp.partition, r.offset)] = r
        return {"metas": metas, "got": got}

    out = asyncio.run(run())
    assert len(out["got"]) == 1000
    for key, i in out["metas"].items():
        r = out["got"][key]
        assert (r.key, r.value, r.headers) == (b"k%d" % i, b"%d" % i * 20, [("n", b"%d" % i)])


def test_positions_seek_offsets_for_times_and_pause(bootstrap: str) -> None:
    topic = f"pos-{time.monotonic_ns()}"
    _fill(bootstrap, topic, 1, 100)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as c:
        c.assign([tp])
        assert c.position(tp) == 100
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0
        c.seek(tp, 42)
        got = c.poll(5000, max_records=5)[tp]
        assert [r.offset for r in got] == [42, 43, 44, 45, 46] and c.position(tp) == 47
        c.pause(tp)
        assert c.paused() == {tp} and c.poll(300) == {}
        c.resume(tp)
        assert c.poll(5000, max_records=1)[tp][0].offset == 47
        c.seek_to_end(tp)
        assert c.position(tp) == 100
        assert c.end_offsets([tp]) == {tp: 100} and c.beginning_offsets([tp]) == {tp: 0}
        ts = c.offsets_for_times({tp: 0})
        assert ts[tp][0] == 0


def test_auto_offset_reset_none_raises_offset_out_of_range(bootstrap: str) -> None:
    topic = f"none-{time.monotonic_ns()}"
    _fill(bootstrap, topic, 1, 10)

    async def run() -> None:
        async with AIOConsumer(bootstrap_servers=bootstrap, group_id=f"g-{topic}", auto_offset_reset="none") as c:
            c.assign([TopicPartition(topic, 0)])
            with pytest.raises(OffsetOutOfRangeError):
                await c.getmany(timeout_ms=5000)
            c.seek(TopicPartition(topic, 0), 500)  # beyond the log end: out of range
            with pytest.raises(OffsetOutOfRangeError):
                await c.getmany(timeout_ms=5000)

    asyncio.run(run())


@pytest.mark.parametrize("facade", ["async", "sync"])
def test_corrupt_batch_on_disk_is_reported_with_its_offset_after_the_records_before_it(broker, facade: str) -> None:
    """A batch damaged on disk (the broker serves it as stored) raises CorruptMessageError
    naming its offset, after the records before it are handed out, and keeps raising
    until the application seeks past it; what was fetched beyond it is not used. The sync
    facade decodes in the calling thread, so it is checked too."""
    topic = f"corrupt-{time.monotonic_ns()}"
    admin.create_topics_sync(broker.bootstrap, [(topic, 1)])
    with KafkaProducer(broker.bootstrap, linger_ms=0) as p:
        for b in range(3):  # three batches of 10 records: offsets 0-9, 10-19, 20-29
            futs = [p.send(topic, b"value-%d-%d" % (b, i), partition=0) for i in range(10)]
            p.flush()
            assert [f.get(10).offset for f in futs] == list(range(b * 10, b * 10 + 10))
    log = broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    data = log.read_bytes()
    first = int.from_bytes(data[8:12], "big") + 12
    assert int.from_bytes(data[first:first + 8], "big") == 10  # the second batch starts here
    second = int.from_bytes(data[first + 8:first + 12], "big") + 12
    with open(log, "r+b") as fh:  # flip one byte of the second batch's last record value
        fh.seek(first + second - 3)
        byte = fh.read(1)
        fh.seek(first + second - 3)
        fh.write(bytes([byte[0] ^ 0xFF]))
    tp = TopicPartition(topic, 0)

    async def run() -> tuple[list[int], list[int]]:
        async with AIOConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            got: list[int] = []
            errors = 0
            deadline = time.monotonic() + 20
            while errors < 2 and time.monotonic() < deadline:
                try:
                    got += [r.offset for r in (await c.getmany(timeout_ms=1000)).get(tp, [])]
                except CorruptMessageError as exc:
                    assert f"{topic}-0" in str(exc) and "offset 10" in str(exc)
                    errors += 1
            assert errors == 2 and await c.position(tp) == 10
            c.seek(tp, 20)
            after: list[int] = []
            while len(after) < 10 and time.monotonic() < deadline:
                after += [r.offset for r in (await c.getmany(timeout_ms=1000)).get(tp, [])]
            return got, after

    def run_sync() -> tuple[list[int], list[int]]:
        with KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            got: list[int] = []
            errors = 0
            deadline = time.monotonic() + 20
            while errors < 2 and time.monotonic() < deadline:
                try:
                    got += [r.offset for r in c.poll(1000).get(tp, [])]
                except CorruptMessageError as exc:
                    assert f"{topic}-0" in str(exc) and "offset 10" in str(exc)
                    errors += 1
            assert errors == 2 and c.position(tp) == 10
            c.seek(tp, 20)
            after: list[int] = []
            while len(after) < 10 and time.monotonic() < deadline:
                after += [r.offset for r in c.poll(1000).get(tp, [])]
            return got, after

    got, after = asyncio.run(run()) if facade == "async" else run_sync()
    assert got == list(range(10))
    assert after == list(range(20, 30))


@needs_groups
def test_group_commit_committed_and_listener(bootstrap: str) -> None:
    topic = f"grp-{time.monotonic_ns()}"
    _fill(bootstrap, topic, 3, 300)
    events: list[tuple[str, set]] = []

    class Listener:
        def on_partitions_revoked(self, revoked: set) -> None:
            events.append(("revoked", revoked))

        def on_partitions_assigned(self, assigned: set) -> None:
            events.append(("assigned", assigned))

    async def run() -> tuple[int, int | None]:
        async with AIOConsumer(bootstrap_servers=bootstrap, group_id=f"g-{topic}", auto_offset_reset="earliest",
                               enable_auto_commit=False, heartbeat_interval_ms=300) as c:
            c.subscribe([topic], listener=Listener())
            n = 0
            deadline = time.monotonic() + 20
            while n < 300 and time.monotonic() < deadline:
                n += sum(len(v) for v in (await c.getmany(timeout_ms=500)).values())
            await c.commit()
            return n, await c.committed(TopicPartition(topic, 1))

    n, committed = asyncio.run(run())
    assert n == 300 and committed == 100
    assert events[-1] == ("assigned", {TopicPartition(topic, p) for p in range(3)})


@needs_groups
def test_regex_subscription_picks_up_new_topics(bootstrap: str) -> None:
    prefix = f"rx{time.monotonic_ns()}"
    _fill(bootstrap, f"{prefix}-a", 1, 5)

    async def run() -> set:
        async with AIOConsumer(bootstrap_servers=bootstrap, group_id=f"g-{prefix}", auto_offset_reset="earliest",
                               metadata_max_age_ms=300, heartbeat_interval_ms=200) as c:
            c.subscribe(pattern=f"{prefix}-.*")
            seen: set = set()
            deadline = time.monotonic() + 30
            created = False
            while len(seen) < 10 and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=300)).items():
                    seen |= {(tp.topic, r.offset) for r in recs}
                if len(seen) >= 5 and not created:
                    await asyncio.get_running_loop().run_in_executor(None, _fill, bootstrap, f"{prefix}-b", 1, 5)
                    created = True
            return {t for t, _ in seen}

    assert asyncio.run(run()) == {f"{prefix}-a", f"{prefix}-b"}


@needs_groups
def test_group_shared_with_confluent_kafka_consumers_gets_complete_disjoint_range_assignment(bootstrap: str) -> None:
    from confluent_kafka import Consumer

    topic = f"mixed-{time.monotonic_ns()}"
    group = f"g-{topic}"
    _fill(bootstrap, topic, 6, 600)
    stop = threading.Event()
    theirs: list[set] = [set(), set()]

    def run_confluent(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": "range",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 300})
        c.subscribe([topic])
        while not stop.is_set():
            c.poll(0.1)
            theirs[i] = {(tp.topic, tp.partition) for tp in c.assignment()}
        c.close()

    threads = [threading.Thread(target=run_confluent, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    ours: list[set] = []
    settled_theirs: list[set] = []
    try:
        async def run() -> None:
            cs = [AIOConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                              partition_assignment_strategy=["range"], heartbeat_interval_ms=300,
                              enable_auto_commit=False) for _ in range(2)]
            for c in cs:
                await c.start()
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline:
                for c in cs:
                    await c.getmany(timeout_ms=100)
                mine = [{(tp.topic, tp.partition) for tp in c.assignment()} for c in cs]
                everyone = mine + theirs
                flat = [tp for s in everyone for tp in s]
                if len(flat) == 6 and len(set(flat)) == 6 and all(len(s) == 1 or len(s) == 2 for s in everyone) \
                        and not any(c.group.needs_rejoin for c in cs):
                    ours.extend(mine)
                    settled_theirs.extend(set(s) for s in theirs)
                    break
            for c in cs:
                await c.close()

        asyncio.run(run())
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert ours, "the group never settled on a complete assignment"
    everyone = ours + settled_theirs
    assert sorted(tp for s in everyone for tp in s) == [(topic, p) for p in range(6)]
    # range over 4 members and 6 partitions: sizes 2, 2, 1, 1
    assert sorted(len(s) for s in everyone) == [1, 1, 2, 2]
