"""inter.broker.protocol.version as Kafka's group coordinator reads it, on a single node and on a
3-broker cluster (the `kafka` fixture, here at 2.0):

- the records of `__consumer_offsets` are written in the versions Kafka writes at that level
  (a group's metadata v1 below 2.1, v2 below 2.3, else v3; committed offsets v1 below 2.1-IV0,
  v2 below 2.1-IV1, else v3), and read back after a restart;
- below 2.3 a static member (group.instance.id) gets UNSUPPORTED_VERSION from JoinGroup,
  SyncGroup, Heartbeat and OffsetCommit, as in Kafka (older group records cannot hold it);
- Burrow 1.2 (Debian's package; it decodes group metadata up to v1) reports each partition's
  committed offset, lag, owner and client, as it does against Kafka at that level.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafkafast.broker.group_coordinator import java_string_hash
from kafkafast.broker.groups.offsets_records import GroupRecord, OffsetRecord, decode_record
from kafkafast.protocol._generated.heartbeat import HeartbeatRequest
from kafkafast.protocol._generated.join_group import JoinGroupRequest
from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest
from kafkafast.protocol._generated.sync_group import SyncGroupRequest
from kafkafast.protocol.errors import ErrorCode
from tests.support.broker_process import free_port
from tests.support.raw_client import RawClient
from tests.support.targets import SETTINGS
from tests.support.tools import missing_tool
from tests.support.zookeeper_process import ZooKeeperProcess, zookeeper_available

QUIET = {"log_level": 3}
OFFSETS_PARTITIONS = int(SETTINGS["offsets.topic.num.partitions"])


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    return {"inter.broker.protocol.version": "2.0"}


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(partitions * per_partition):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def group_member(bootstrap: str, group: str, topic: str, partitions: int, client_id: str) -> Consumer:
    """A consumer of `group` (client.id `client_id`) that has joined and holds every partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while len(c.assignment()) < partitions and time.monotonic() < deadline:
        c.poll(0.2)
    assert len(c.assignment()) == partitions, c.assignment()
    return c


def stored_records(bootstrap: str, group: str) -> list[tuple[int, int, object]]:
    """(key version, value version, decoded record) of every record of `group` in its
    `__consumer_offsets` partition, oldest first (tombstones left out)."""
    tp = TopicPartition("__consumer_offsets", (java_string_hash(group) & 0x7FFFFFFF) % OFFSETS_PARTITIONS, 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": new_name("reader"), "enable.auto.commit": False,
                  **QUIET})
    found = []
    try:
        end = c.get_watermark_offsets(tp, 15)[1]
        c.assign([tp])
        at, deadline = 0, time.monotonic() + 15
        while at < end and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                at = m.offset() + 1
                record = decode_record(m.key(), m.value())
                if m.value() is not None and getattr(record, "group", None) == group:
                    found.append((int.from_bytes(m.key()[:2], "big"), int.from_bytes(m.value()[:2], "big"), record))
    finally:
        c.close()
    return found


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], 15)}
    finally:
        c.close()


def test_group_and_offset_records_are_written_in_the_versions_of_the_protocol_and_read_back(kafka):
    topic, group = new_name("ibp"), new_name("ibp-group")
    kafka.create_topic(topic, 3)
    produce(kafka.bootstrap, topic, 3, 10)
    c = group_member(kafka.bootstrap, group, topic, 3, "ibp-client")
    try:
        c.commit(offsets=[TopicPartition(topic, p, 3 + p) for p in range(3)], asynchronous=False)
        records = stored_records(kafka.bootstrap, group)
    finally:
        c.close()
    groups = [(kv, vv, r.value) for kv, vv, r in records if isinstance(r, GroupRecord)]
    offsets = [(kv, vv, r) for kv, vv, r in records if isinstance(r, OffsetRecord)]
    # at 2.0 Kafka writes a group's metadata v1 (no state timestamp, no instance id) and offsets v1
    assert groups and {(kv, vv) for kv, vv, _ in groups} == {(2, 1)}, groups
    members = groups[-1][2].members
    assert [(m.client_id, m.client_host) for m in members] == [("ibp-client", "/127.0.0.1")]
    assert members[0].rebalance_timeout == 300_000 and members[0].session_timeout == 45_000  # librdkafka's
    assert {(kv, vv) for kv, vv, _ in offsets} == {(1, 1)}, offsets
    assert sorted((r.partition, r.value.offset, r.value.expire_timestamp) for _, _, r in offsets) == [
        (0, 3, -1), (1, 4, -1), (2, 5, -1)]
    kafka.restart()  # the coordinator loads them again
    assert committed(kafka.bootstrap, group, topic, 3) == {0: 3, 1: 4, 2: 5}


@pytest.mark.parametrize("ibp,group_version,offset_version", [(None, 3, 3), ("2.2", 2, 3), ("2.1-IV0", 2, 2)])
def test_the_other_levels_write_their_versions(broker_factory, ibp, group_version, offset_version):
    b = broker_factory(settings={**SETTINGS, **({"inter.broker.protocol.version": ibp} if ibp else {})})
    topic, group = new_name("ibp-level"), new_name("ibp-level-group")
    produce(b.bootstrap, topic, 1, 5)  # (auto-created)
    c = group_member(b.bootstrap, group, topic, 1, "level-client")
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 4, leader_epoch=0)], asynchronous=False)
        records = stored_records(b.bootstrap, group)
    finally:
        c.close()
    assert {vv for _, vv, r in records if isinstance(r, GroupRecord)} == {group_version}
    offsets = [r.value for _, vv, r in records if isinstance(r, OffsetRecord) and vv == offset_version]
    assert [(o.offset, o.leader_epoch) for o in offsets] == [(4, 0 if offset_version == 3 else -1)], records
    b.restart()
    assert committed(b.bootstrap, group, topic, 1) == {0: 4}


def test_a_static_member_is_refused_below_2_3_as_kafka_refuses_it(kafka):
    topic, group = new_name("ibp-static"), new_name("ibp-static-group")
    kafka.create_topic(topic, 1)
    with RawClient(kafka.coordinator_port(group)) as raw:
        def join(instance: str | None):
            return raw.request(JoinGroupRequest(
                group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                group_instance_id=instance, protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
        refused = join("instance-1")
        assert (refused.error_code, refused.member_id, refused.generation_id) == (ErrorCode.UNSUPPORTED_VERSION, "", -1)
        dynamic = join(None)  # a dynamic member is served: it gets its member id (KIP-394)
        assert dynamic.error_code == ErrorCode.MEMBER_ID_REQUIRED and dynamic.member_id
        sync = raw.request(SyncGroupRequest(group_id=group, generation_id=1, member_id="m",
                                            group_instance_id="instance-1", assignments=[]), 3)
        assert sync.error_code == ErrorCode.UNSUPPORTED_VERSION
        beat = raw.request(HeartbeatRequest(group_id=group, generation_id=1, member_id="m",
                                            group_instance_id="instance-1"), 3)
        assert beat.error_code == ErrorCode.UNSUPPORTED_VERSION
        commit = raw.request(OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=1, member_id="m", group_instance_id="instance-1",
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 7)
        assert [p.error_code for t in commit.topics for p in t.partitions] == [ErrorCode.UNSUPPORTED_VERSION]
    assert committed(kafka.bootstrap, group, topic, 1) == {0: -1001}  # nothing was stored


def burrow_config(root: Path, zookeeper: int, bootstrap: str, http_port: int) -> str:
    return f"""
[general]
pidfile="{root}/burrow.pid"
[logging]
level="info"
[zookeeper]
servers=["127.0.0.1:{zookeeper}"]
timeout=6
root-path="/burrow"
[client-profile.test]
client-id="burrow-test"
kafka-version="2.0.0"
[cluster.local]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="test"
topic-refresh=2
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{bootstrap}"]
client-profile="test"
offsets-topic="__consumer_offsets"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
workers=2
intervals=3
expire-group=604800
min-distance=1
"""


def test_burrow_reports_each_partitions_offset_lag_owner_and_client(kafka, tmp_path):
    burrow = shutil.which("Burrow")
    if burrow is None:
        missing_tool("burrow")
    if not zookeeper_available():  # Burrow keeps its own state in ZooKeeper
        missing_tool("zookeeper")
    topic, group = new_name("burrow"), new_name("burrow-group")
    kafka.create_topic(topic, 3)
    produce(kafka.bootstrap, topic, 3, 100)
    c = group_member(kafka.bootstrap, group, topic, 3, "lag-watched")
    zk = ZooKeeperProcess(tmp_path / "zookeeper").start()
    http_port = free_port()
    proc = None
    try:
        c.commit(offsets=[TopicPartition(topic, p, 40 + 10 * p) for p in range(3)], asynchronous=False)
        (tmp_path / "burrow.toml").write_text(burrow_config(tmp_path, zk.port, kafka.bootstrap.split(",")[0], http_port))
        log = open(tmp_path / "burrow.log", "w")
        proc = subprocess.Popen([burrow, "--config-dir", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT)

        def get(path: str) -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v3/kafka/local{path}", timeout=5) as r:
                return json.loads(r.read())

        detail, lag, deadline = None, None, time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                detail = get(f"/consumer/{group}")
                lag = get(f"/consumer/{group}/lag")
                parts = detail["topics"][topic]
                if all(p["offsets"] and p["offsets"][-1] and p["owner"] for p in parts) and lag["status"]["totallag"]:
                    break
            except (OSError, KeyError, TypeError, ValueError):
                pass
            assert proc.poll() is None, (tmp_path / "burrow.log").read_text()[-3000:]
            time.sleep(1)
        assert get(f"/topic/{topic}")["offsets"] == [100, 100, 100]
        parts = detail["topics"][topic]  # type: ignore[index]
        assert [(p["offsets"][-1]["offset"], p["current-lag"], p["owner"], p["client_id"]) for p in parts] == [
            (40, 60, "/127.0.0.1", "lag-watched"), (50, 50, "/127.0.0.1", "lag-watched"),
            (60, 40, "/127.0.0.1", "lag-watched")], parts
        status = lag["status"]  # type: ignore[index]
        assert status["totallag"] == 150 and status["partition_count"] == 3
        assert sorted((p["partition"], p["end"]["lag"]) for p in status["partitions"]) == [(0, 60), (1, 50), (2, 40)]
        assert "failed to decode" not in (tmp_path / "burrow.log").read_text()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
        c.close()
        zk.kill()
