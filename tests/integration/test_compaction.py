"""Log compaction through a real broker and real clients: the latest value per key survives
at its original offset, tombstoned keys vanish after delete.retention.ms, and
`__consumer_offsets` stays small under a commit-heavy workload."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

SETTINGS = {"log.cleaner.backoff.ms": "100", "group.initial.rebalance.delay.ms": "100",
            "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "65536"}
KEYS = 1000
UPDATES = 100_000


def log_bytes(data_dir: Path, partition_dir: str) -> int:
    return sum(f.stat().st_size for f in (data_dir / partition_dir).glob("*.log"))


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.offset(), m.key(), m.value()))
            if m.offset() >= high - 1:
                return out
        raise AssertionError(f"read {len(out)} records, never reached the high watermark {high}")
    finally:
        c.close()


def produce(bootstrap: str, topic: str, records, offsets: dict | None = None, linger_ms: int = 20) -> None:
    """The records, produced and flushed (with a `linger_ms` longer than the loop takes, and a
    handful of small records: one batch, as `flush` sends what lingers at once)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "compression.type": "lz4",
                  "batch.size": 65536})

    def delivered(err, msg):
        assert err is None, err
        if offsets is not None:
            offsets[msg.key()] = (msg.offset(), msg.value())

    for i, (key, value) in enumerate(records):
        p.produce(topic, key=key, value=value, on_delivery=delivered)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def test_compaction_keeps_latest_value_per_key_at_original_offset_and_drops_tombstones(kafka):
    """On a single node and a 3-broker cluster (the `kafka` fixture: every replica cleans its own
    log; reads go to the leader)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    b = kafka
    topic = "compacted"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, kafka.replication_factor, config={
        "cleanup.policy": "compact", "segment.bytes": "262144", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "3000"})])[topic].result(15)
    kafka.wait_for_leaders(topic, 1)
    latest: dict[bytes, tuple[int, bytes]] = {}
    produce(b.bootstrap, topic, ((b"key-%d" % (i % KEYS), b"value-%d" % i) for i in range(UPDATES)), latest)
    # Distinct-key filler rolls the segment holding the last updates so that it gets cleaned.
    produce(b.bootstrap, topic, ((b"filler-%d" % i, os.urandom(100)) for i in range(3000)))
    assert len(latest) == KEYS and max(o for o, _ in latest.values()) == UPDATES - 1

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = read_all(b.bootstrap, topic)
        if len(records) <= KEYS + 3000:
            break
        time.sleep(0.5)
    keyed = {k: (o, v) for o, k, v in records if k.startswith(b"key-")}
    assert len([r for r in records if r[1].startswith(b"key-")]) == KEYS
    assert keyed == latest
    assert [o for o, _, _ in records] == sorted(o for o, _, _ in records)

    # Tombstones for 100 keys, then enough filler to make them cleanable.
    gone = [b"key-%d" % i for i in range(100)]
    produce(b.bootstrap, topic, ((k, None) for k in gone))
    produce(b.bootstrap, topic, ((b"filler2-%d" % i, os.urandom(100)) for i in range(3000)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = read_all(b.bootstrap, topic)
        keys_left = {k for _, k, _ in records}
        if not keys_left & set(gone):
            break
        time.sleep(0.5)
    assert not keys_left & set(gone)
    keyed = {k: (o, v) for o, k, v in records if k.startswith(b"key-")}
    assert keyed == {k: v for k, v in latest.items() if k not in gone}


def test_max_compaction_lag_cleans_a_log_whose_dirty_ratio_stays_low(kafka):
    """max.compaction.lag.ms (KIP-354): a dirty record older than it gets cleaned whatever
    min.cleanable.dirty.ratio says, and the active segment of a compacted topic rolls within it
    (so that its records become cleanable). Two topics take the same records: 200 keys over
    several segments (cleaned first: everything dirty, ratio 1), then ten updates, a dirty
    ratio far below 0.9. `lag-2s` (max.compaction.lag.ms 2 s, segment.ms unset) rolls and
    cleans them; `lag-unset` rolls too (segment.ms 2 s) but its ratio never calls for a
    cleaning, so its old values stay."""
    cfg = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.9"}
    topics = {"lag-2s": {**cfg, "max.compaction.lag.ms": "2000"}, "lag-unset": {**cfg, "segment.ms": "2000"}}
    for topic, configs in topics.items():
        kafka.create_topic(topic, 1, configs)
        for chunk in range(10):  # one batch each: several segments
            produce(kafka.bootstrap, topic, [(b"k%d" % i, b"first-%d-" % i * 8) for i in range(chunk * 20,
                                                                                           chunk * 20 + 20)])

    def clean_point(topic: str) -> int:
        d = kafka.replica_dirs(topic, 0)[0]
        text = (d.parent / "cleaner-offset-checkpoint").read_text() if (d.parent / "cleaner-offset-checkpoint").exists() \
            else ""
        return max([int(line.split()[2]) for line in text.splitlines()[2:] if line.split()[0] == topic] or [0])

    def copies(topic: str) -> int:
        return sum(k in {b"k%d" % i for i in range(10)} for _, k, _ in read_all(kafka.bootstrap, topic))

    kafka.wait_for(lambda: all(clean_point(t) > 0 for t in topics), 30, "the first cleaning of both topics")
    for topic in topics:
        produce(kafka.bootstrap, topic, [(b"k%d" % i, b"second-%d" % i) for i in range(10)])
    time.sleep(2.5)
    for topic in topics:  # an append after 2 s: the segment holding the updates rolls
        produce(kafka.bootstrap, topic, [(b"late", b"x")])
    kafka.wait_for(lambda: copies("lag-2s") == 10, 30, "the lagged topic cleaned below its dirty ratio")
    values = {k: v for _, k, v in read_all(kafka.bootstrap, "lag-2s")}
    assert [values[b"k%d" % i] for i in range(10)] == [b"second-%d" % i for i in range(10)]
    assert clean_point("lag-unset") < clean_point("lag-2s")
    assert copies("lag-unset") == 20  # rolled as well, but the ratio alone never cleans it


def test_consumer_offsets_stays_small_under_commit_heavy_workload(broker_factory):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(settings=SETTINGS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("busy", 12, 1)])["busy"].result(15)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "committer", "enable.auto.commit": False})
    commits = 2500
    try:
        for n in range(commits):
            c.commit(offsets=[TopicPartition("busy", p, n * 12 + p) for p in range(12)], asynchronous=False)
    finally:
        c.close()
    written = commits * 12
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and log_bytes(b.data_dir, "__consumer_offsets-0") > 150_000:
        time.sleep(0.2)
    size = log_bytes(b.data_dir, "__consumer_offsets-0")
    # 30,000 offset records of ~90 bytes were written; at most the active segment and the
    # 12 live keys remain.
    assert size <= 150_000, size
    b.restart()  # and the committed offsets load back from the compacted log
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "committer"})
    try:
        got = c.committed([TopicPartition("busy", p) for p in range(12)], timeout=20)
        assert [tp.offset for tp in got] == [(commits - 1) * 12 + p for p in range(12)]
    finally:
        c.close()
    assert written == 30_000


def idle_cleaner_with_topic(broker_factory, topic: str, segment_bytes: int, policy: str = "compact"):
    """A broker whose cleaner looks for dirty logs only every ten minutes (until a dynamic
    log.cleaner.backoff.ms says otherwise), a topic (compacted unless `policy` says) on it and an
    admin client."""
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(settings={"log.cleaner.backoff.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": policy, "segment.bytes": str(segment_bytes),
        "min.cleanable.dirty.ratio": "0.01"})])[topic].result(15)
    return b, admin


def alter_broker(admin, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on broker 0: SET, or DELETE for None."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in changes.items()]
    (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0",
                                                             incremental_configs=entries)]).values()
    fut.result(15)


def test_cleaner_backoff_and_io_rate_are_dynamic_broker_configs(broker_factory):
    """log.cleaner.backoff.ms and log.cleaner.io.max.bytes.per.second change at run time
    (IncrementalAlterConfigs on the broker): a broker that would not look for dirty logs for
    ten minutes starts cleaning at once, held to the I/O rate (1.2 MB of segments read twice
    at 50 kB/s: far from done after 3 s), and a cleaning in progress finishes soon once the
    rate is removed."""
    import confluent_kafka as ck
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = "throttled"
    b, admin = idle_cleaner_with_topic(broker_factory, topic, 65536)
    produce(b.bootstrap, topic, ((b"key-%d" % (i % 100), os.urandom(1000)) for i in range(1200)))
    written = log_bytes(b.data_dir, f"{topic}-0")
    assert written > 1_200_000

    for name, value, code in (("log.cleaner.io.max.bytes.per.second", "0", ck.KafkaError.INVALID_CONFIG),
                              ("log.cleaner.backoff.ms", "soon", ck.KafkaError.INVALID_CONFIG),
                              ("log.cleaner.dedupe.buffer.size", "23", ck.KafkaError.INVALID_CONFIG),
                              ("log.cleaner.threads", "2", ck.KafkaError.INVALID_REQUEST)):  # one cleaner thread
        with pytest.raises(ck.KafkaException) as exc:
            alter_broker(admin, {name: value})
        assert exc.value.args[0].code() == code, name
    alter_broker(admin, {"log.cleaner.io.max.bytes.per.second": "50000", "log.cleaner.backoff.ms": "100"})
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    entry = fut.result(15)["log.cleaner.io.max.bytes.per.second"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "50000", ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    time.sleep(3)
    assert log_bytes(b.data_dir, f"{topic}-0") == written  # throttled: no cleaning installed yet

    alter_broker(admin, {"log.cleaner.io.max.bytes.per.second": None})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and log_bytes(b.data_dir, f"{topic}-0") > written // 2:
        time.sleep(0.2)
    assert log_bytes(b.data_dir, f"{topic}-0") <= written // 2  # 100 keys of 1 kB left, plus the active segment


def test_dedupe_buffer_size_is_dynamic_and_splits_a_cleaning(broker_factory):
    """log.cleaner.dedupe.buffer.size set at run time bounds the keys one cleaning maps: 1000
    records of 300 keys in batches of 100, with room for 149 keys, are compacted in several
    cleanings (the broker logs each with the offset it cleaned up to), each mapping one batch."""
    import re

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic = "deduped"
    # Not compacted until everything is written and the bound is set: the cleaner's first look at
    # the log (whenever it comes) finds it dirty only then.
    b, admin = idle_cleaner_with_topic(broker_factory, topic, 4096, policy="delete")
    for chunk in range(10):  # one batch each (with linger.ms 20, a slow loop on a loaded machine split one)
        produce(b.bootstrap, topic, ((b"key-%03d" % (i % 300), b"v%d" % i) for i in range(chunk * 100, chunk * 100 + 100)),
                linger_ms=60000)
    produce(b.bootstrap, topic, [(b"tail", b"x")])
    alter_broker(admin, {"log.cleaner.dedupe.buffer.size": "4000", "log.cleaner.backoff.ms": "100"})
    (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])]).values()
    fut.result(15)

    def cleaned_up_to() -> list[int]:
        return [int(n) for n in re.findall(rf"cleaned {topic}-0 up to (\d+)", b.log_path.read_text(errors="replace"))]

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(cleaned_up_to()) < 3:
        time.sleep(0.2)
    assert cleaned_up_to()[:3] == [100, 200, 300]  # one batch of 100 new keys per cleaning
    latest = {k: v for _, k, v in read_all(b.bootstrap, topic)}
    assert latest == {**{b"key-%03d" % (i % 300): b"v%d" % i for i in range(1000)}, b"tail": b"x"}
