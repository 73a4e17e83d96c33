"""Admin APIs through a real client (confluent-kafka's AdminClient), DeleteRecords,
retention through the broker, and long-poll fetches that wake when data arrives.

Topic configs, replica placement, DeleteRecords and size retention run on a single node and a 3-broker cluster (the
`kafka` fixture, one of each for the module). Retention and checkpoints follow their interval settings (log.retention.check.interval.ms,
log.flush.offset.checkpoint.interval.ms, log.flush.start.offset.checkpoint.interval.ms;
as Kafka: every interval, the first run min(interval, 30 s) after start)."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic)

from kafkafast.protocol._generated.create_partitions import CreatePartitionsRequest
from kafkafast.protocol._generated.create_topics import CreateTopicsRequest
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kafkafast.protocol.errors import ErrorCode
from tests.support.raw_client import RawClient


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    return {"log.retention.check.interval.ms": "200"}


def produce_n(bootstrap, topic, n, partition=0, size=100):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(n):
        p.produce(topic, value=b"%06d" % i + b"x" * size, partition=partition)
        p.poll(0)
    assert p.flush(20) == 0


def offsets(port, topic, ts, partition=0):
    with RawClient(port) as c:
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=ts)])])
        return c.request(req, 7).topics[0].partitions[0]


def segments_within(partition_dir, max_bytes, timeout):
    """{segment .log path: size} once they add up to at most `max_bytes` (retention ran
    after the last append), or as they are when `timeout` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        sizes = {}
        for seg in partition_dir.glob("*.log"):
            try:
                sizes[seg] = seg.stat().st_size
            except FileNotFoundError:  # deleted by retention meanwhile
                pass
        if sum(sizes.values()) <= max_bytes or time.monotonic() > deadline:
            return sizes
        time.sleep(0.1)


def test_describe_and_alter_topic_configs(kafka):
    kafka.create_topic("cfg", 1, {"retention.ms": "12345"})
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "12345"
    assert configs["retention.ms"].source == ConfigResource.Type.TOPIC or configs["retention.ms"].source == 1
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default
    assert configs["segment.bytes"].value == "1073741824"
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(10)
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cfg")])
    configs = list(configs.values())[0].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    # invalid value: INVALID_CONFIG, nothing changes
    bad = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("segment.bytes", "-5", incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([bad])[bad].result(10)
        raise AssertionError("negative segment.bytes was accepted")
    except Exception as exc:  # KafkaException with INVALID_CONFIG
        assert "INVALID_CONFIG" in str(exc) or "InvalidConfig" in str(exc) or "Invalid" in str(exc)
    # survives a restart of every broker
    kafka.restart()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    configs = list(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cfg")]).values())[0].result(10)
    assert configs["cleanup.policy"].value == "compact"


def test_replicas_beyond_the_brokers_answer_kafkas_codes_in_both_modes(kafka):
    """One topic-admin path over either store (broker/topic_admin.py): a replication factor above
    the broker count, a manual assignment naming no broker there is, and fewer replica lists than
    new partitions get Kafka's codes and messages from one broker as from three; a manual
    assignment of the new partitions' replicas is taken."""
    with RawClient(next(iter(kafka.ports().values()))) as c:
        brokers = sorted(b.node_id for b in c.request(MetadataRequest(topics=[]), 9).brokers)
        n, rf = len(brokers), kafka.replication_factor

        def create(name: str, replication_factor: int = -1, assignment: list[int] | None = None):
            T = CreateTopicsRequest
            topic = T.CreatableTopic(name=name, num_partitions=1 if assignment is None else -1,
                                     replication_factor=replication_factor, configs=[], assignments=[
                                         T.CreatableReplicaAssignment(partition_index=0, broker_ids=assignment)]
                                     if assignment is not None else [])
            return c.request(T(topics=[topic], timeout_ms=5000), 7).topics[0]

        def grow(name: str, count: int, assignments: list[list[int]]):
            P = CreatePartitionsRequest
            req = P(topics=[P.CreatePartitionsTopic(name=name, count=count, assignments=[
                P.CreatePartitionsAssignment(broker_ids=a) for a in assignments])], timeout_ms=5000)
            return c.request(req, 3).results[0]

        r = create("rf-beyond", replication_factor=n + 1)
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REPLICATION_FACTOR, f"Replication factor: {n + 1} larger than available brokers: {n}.")
        assert create("no-such-broker", assignment=[max(brokers) + 1]).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert create("no-replicas", assignment=[]).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        kafka.create_topic("grow-by-hand", 1)
        r = grow("grow-by-hand", 3, [brokers[:rf]])
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Increasing the number of partitions by 2 but 1 assignments provided.")
        assert grow("grow-by-hand", 3, [brokers[:rf], brokers[-rf:]]).error_code == 0
    kafka.wait_for_leaders("grow-by-hand", 3)


def test_create_partitions_and_describe_cluster(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("grow", 2, 1)])["grow"].result(10)
    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(10)
    md = admin.list_topics("grow", timeout=10)
    assert sorted(md.topics["grow"].partitions) == [0, 1, 2, 3, 4]
    fut = admin.create_partitions([NewPartitions("grow", 3)])["grow"]
    try:
        fut.result(10)
        raise AssertionError("shrinking partitions was accepted")
    except Exception as exc:
        assert "INVALID_PARTITIONS" in str(exc) or "InvalidPartitions" in str(exc) or "partitions" in str(exc)
    produce_n(broker.bootstrap, "grow", 3, partition=4)
    assert offsets(broker.port, "grow", -1, 4).offset == 3
    desc = admin.describe_cluster().result(10)
    assert [n.id for n in desc.nodes] == [0] and desc.controller.id == 0 and desc.cluster_id


def test_delete_records_moves_log_start_offset(kafka):
    b = kafka
    b.create_topic("dr", 1, {"segment.bytes": "4096", "file.delete.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    produce_n(b.bootstrap, "dr", 200)
    result = admin.delete_records([TopicPartition("dr", 0, 150)])
    low = list(result.values())[0].result(10)
    assert low.low_watermark == 150
    assert offsets(b.leader_port("dr", 0), "dr", -2).offset == 150
    with RawClient(b.leader_port("dr", 0)) as c:
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic="dr", partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=10, partition_max_bytes=1 << 20, current_leader_epoch=-1)])])
        part = c.request(req, 11).responses[0].partitions[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and part.log_start_offset == 150
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("dr", 0, 150)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 50 and time.monotonic() < deadline:
        got += [m.value()[:6] for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    assert got == [b"%06d" % i for i in range(150, 200)]


def test_size_retention_deletes_oldest_segments(kafka):
    """The leader's log (a cluster's followers apply retention to their own)."""
    b = kafka
    b.create_topic("ret", 1, {"segment.bytes": "2048", "retention.bytes": "8192", "file.delete.delay.ms": "0"})
    time.sleep(1)  # retention (log.retention.check.interval.ms=200) must keep running, not only once at start
    produce_n(b.bootstrap, "ret", 400)
    port = b.leader_port("ret", 0)
    deadline = time.monotonic() + 15
    while True:  # a cluster's leader deletes below its high watermark, which follows the followers: passes on
        segs = segments_within(b.partition_dir("ret", 0), 8192 + 2048 * 2, timeout=15)
        start = offsets(port, "ret", -2).offset
        if int(min(segs).stem) == start or time.monotonic() > deadline:
            break
    assert start > 0 and offsets(port, "ret", -1).offset == 400
    assert int(min(segs).stem) == start
    assert sum(segs.values()) <= 8192 + 2048 * 2


def test_long_poll_fetch_wakes_when_data_arrives(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("wake", 1, 1)])["wake"].result(10)

    def later():
        time.sleep(0.5)
        produce_n(broker.bootstrap, "wake", 1)

    t = threading.Thread(target=later)
    with RawClient(broker.port, timeout=30) as c:
        req = FetchRequest(replica_id=-1, max_wait_ms=20000, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic="wake", partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1)])])
        t.start()
        start = time.monotonic()
        part = c.request(req, 12).responses[0].partitions[0]
        waited = time.monotonic() - start
    t.join()
    assert part.error_code == 0 and part.high_watermark == 1 and len(part.records) > 0
    assert waited < 10, f"the fetch waited {waited:.1f}s for data produced after 0.5s (max_wait 20s)"


def test_offset_for_leader_epoch_answers_the_end_of_the_epoch(broker):
    from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest as Req

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("epochs", 1, 1)])["epochs"].result(10)
    produce_n(broker.bootstrap, "epochs", 25)

    def ask(epoch, current=-1):
        with RawClient(broker.port) as c:
            req = Req(replica_id=-1, topics=[Req.OffsetForLeaderTopic(topic="epochs", partitions=[
                Req.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
            return c.request(req, 4).topics[0].partitions[0]

    r = ask(0)
    assert (r.error_code, r.leader_epoch, r.end_offset) == (0, 0, 25)
    r = ask(3)
    assert (r.error_code, r.leader_epoch, r.end_offset) == (0, -1, -1)
    assert ask(0, current=5).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_a_new_partition_starts_its_leader_epoch_before_any_record(kafka):
    """The leader records its epoch's start when it becomes leader (Kafka's `Partition.makeLeader`),
    on a single node too (its partitions get a lone broker's LeaderAndIsr state): an empty new
    partition answers OffsetForLeaderEpoch with epoch 0 ending at the log end, 0."""
    from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest as Req

    kafka.create_topic("epoch-at-start", 1)
    with RawClient(kafka.leader_port("epoch-at-start", 0)) as c:
        req = Req(replica_id=-1, topics=[Req.OffsetForLeaderTopic(topic="epoch-at-start", partitions=[
            Req.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])])
        r = c.request(req, 4).topics[0].partitions[0]
    assert (r.error_code, r.leader_epoch, r.end_offset) == (0, 0, 0)


# -- retention and checkpoint schedules ----------------------------------------------

RETENTION_SETTINGS = {"log.segment.bytes": "2048", "log.retention.bytes": "4096", "log.segment.delete.delay.ms": "0"}


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
    b = broker_factory(settings={**RETENTION_SETTINGS, "log.retention.check.interval.ms": "300"})
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
    b = broker_factory(settings={**RETENTION_SETTINGS, "log.retention.check.interval.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("long", 1, 1)])["long"].result(10)
    produce_n(b.bootstrap, "long", 200)
    b.restart()  # data over retention.bytes is there from the start
    segments = sorted((b.data_dir / "long-0").glob("*.log"))
    assert len(segments) > 3
    time.sleep(2.5)
    assert log_start(b, "long") == 0
    assert sorted((b.data_dir / "long-0").glob("*.log")) == segments


def checkpoint_entry(b, name, topic):
    """This partition's offset in checkpoint file `name` (None: no file or no entry yet)."""
    try:
        lines = (b.data_dir / name).read_text().splitlines()[2:]
    except FileNotFoundError:
        return None
    found = [int(line.split()[2]) for line in lines if line.split()[:2] == [topic, "0"]]
    return found[0] if found else None


def wait_for_checkpoint(b, name, topic, want, timeout):
    deadline = time.monotonic() + timeout
    while checkpoint_entry(b, name, topic) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return checkpoint_entry(b, name, topic)


@pytest.mark.parametrize("interval_ms", [300, 600000])
def test_offset_checkpoints_are_written_on_their_intervals(broker_factory, interval_ms):
    b = broker_factory(settings={"log.segment.bytes": "2048",
                                 "log.flush.offset.checkpoint.interval.ms": str(interval_ms),
                                 "log.flush.start.offset.checkpoint.interval.ms": str(interval_ms)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("cp", 1, 1)])["cp"].result(10)
    time.sleep(1)  # past the first checkpoint of a short interval: the next ones must follow
    produce_n(b.bootstrap, "cp", 100)
    admin.delete_records([TopicPartition("cp", 0, 60)])[TopicPartition("cp", 0, 60)].result(10)
    segments = sorted(int(p.stem) for p in (b.data_dir / "cp-0").glob("*.log"))
    rolled_to = segments[-1]  # rolled segments are flushed: the recovery point reaches the active one
    if interval_ms == 300:
        assert wait_for_checkpoint(b, "log-start-offset-checkpoint", "cp", 60, 10) == 60
        assert wait_for_checkpoint(b, "recovery-point-offset-checkpoint", "cp", rolled_to, 10) == rolled_to
    else:
        time.sleep(2)
        assert checkpoint_entry(b, "log-start-offset-checkpoint", "cp") is None
        assert checkpoint_entry(b, "recovery-point-offset-checkpoint", "cp") is None


@pytest.mark.parametrize("workers", [0, 2])
def test_a_single_node_leads_at_the_epoch_of_its_leader_epoch_checkpoint(broker_factory, workers):
    """A single node's partitions get the state a controller's LeaderAndIsr gives a cluster of one,
    at the latest leader epoch of the log's checkpoint (here one written by an earlier leadership
    at epoch 3, as a log dir taken over from a cluster has): Metadata from every worker names that
    epoch, new batches carry it and OffsetForLeaderEpoch answers the epochs' ends (the checkpoint
    says epoch 3 began at offset 4)."""
    b = broker_factory(workers=workers)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("epoch3", 1, 1)])["epoch3"].result(10)
    produce_n(b.bootstrap, "epoch3", 5)
    b.stop()
    (b.data_dir / "epoch3-0" / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n3 4\n")
    b.start()
    produce_n(b.bootstrap, "epoch3", 5)
    for _ in range(4):  # (a new connection may reach another worker)
        with RawClient(b.port) as c:
            meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="epoch3")]), 9)
        assert meta.topics[0].partitions[0].leader_epoch == 3

    assert epoch_ends(b.port, "epoch3", [0], 0, current=3) == [(0, 0, 4)]
    assert epoch_ends(b.port, "epoch3", [0], 3, current=3) == [(0, 3, 10)]
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "epoch3", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("epoch3", 0, 9)])
        msg = c.poll(10)
        assert msg is not None and msg.error() is None and msg.offset() == 9
        assert msg.leader_epoch() == 3
    finally:
        c.close()


def epoch_ends(port, topic, partitions, epoch, *, current):
    """OffsetForLeaderEpoch (v4) of `epoch` in each partition: [(error, epoch, end offset)]."""
    req_ = OffsetForLeaderEpochRequest
    with RawClient(port) as c:
        req = req_(replica_id=-1, topics=[req_.OffsetForLeaderTopic(topic=topic, partitions=[
            req_.OffsetForLeaderPartition(partition=p, current_leader_epoch=current, leader_epoch=epoch)
            for p in partitions])])
        return [(r.error_code, r.leader_epoch, r.end_offset) for r in c.request(req, 4).topics[0].partitions]


def settled_epoch_ends(port, topic, partitions, epoch, *, current, timeout=10.0):
    """`epoch_ends` once no partition answers NOT_LEADER_OR_FOLLOWER, as a client retries it: with
    worker processes, a worker other than a partition's owner answers that until the owner has
    published the partition's leadership after a start (seen in a CI run)."""
    deadline = time.monotonic() + timeout
    while True:
        ends = epoch_ends(port, topic, partitions, epoch, current=current)
        if all(e != ErrorCode.NOT_LEADER_OR_FOLLOWER for e, _, _ in ends) or time.monotonic() > deadline:
            return ends
        time.sleep(0.05)


def leader_epochs_served(port, topic, timeout=10.0):
    """{partition: leader epoch} from Metadata once every partition has a leader (with worker
    processes, once each owner has loaded its partitions)."""
    deadline = time.monotonic() + timeout
    while True:
        with RawClient(port) as c:
            meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 9)
        parts = meta.topics[0].partitions
        if (parts and all(p.leader_id >= 0 for p in parts)) or time.monotonic() > deadline:
            return {p.partition_index: p.leader_epoch for p in parts}
        time.sleep(0.05)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_restart_rewrites_no_unchanged_leader_epoch_checkpoint(broker_factory, workers):
    """A partition that leads again at the epoch its leader-epoch checkpoint names writes nothing
    there at start nor at stop (Kafka writes the file when an entry is added or truncated; the
    load drops an empty log's `0 0` entry in memory and the leadership at epoch 0 puts the same
    one back: no change), empty or not; the epochs answered stay right, an empty partition's at
    epoch 2 too (its load drops that epoch's only entry: it still leads at 2, not 0)."""
    n = 6
    b = broker_factory(workers=workers)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("quiet", n, 1)])["quiet"].result(10)
    produce_n(b.bootstrap, "quiet", 3, partition=0)
    b.restart()  # (with workers, a partition's owner may first open it, and write its checkpoint, at its load)
    b.stop()
    files = [b.data_dir / f"quiet-{i}" / "leader-epoch-checkpoint" for i in range(n)]
    assert all(f.read_text() == "0\n1\n0 0\n" for f in files)
    files[-1].write_text("0\n1\n2 0\n")  # (as a leadership at epoch 2 that wrote nothing leaves it)

    def stats():
        return [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]

    before = stats()
    b.start()
    assert leader_epochs_served(b.port, "quiet") == {**{i: 0 for i in range(n - 1)}, n - 1: 2}
    for _ in range(max(workers, 1)):  # (a new connection may reach another worker)
        assert settled_epoch_ends(b.port, "quiet", range(n - 1), 0, current=0) == [(0, 0, 3)] + [(0, 0, 0)] * (n - 2)
        assert settled_epoch_ends(b.port, "quiet", [n - 1], 2, current=2) == [(0, 2, 0)]
    assert stats() == before
    b.stop()
    assert stats() == before
