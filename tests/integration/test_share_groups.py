"""Share groups (KIP-932, queues for Kafka) against a real broker with librdkafka's share
consumer (confluent-kafka's `ShareConsumer`): records of 2 partitions shared by 8 consumers,
every record accepted exactly once, released records delivered again, a killed consumer's
records redelivered after the acquisition lock, rejected records never again, archiving at the
delivery count limit, no acknowledgement lost over a broker restart; a batch acknowledged
offset by offset, and the state records (snapshot, then one update of the changed ranges per
ShareFetch); and the admin side:
ShareGroupDescribe, ListGroups (type "share"), DescribeGroups / DeleteGroups, group configs,
ApiVersions and the `--as-kafka` profiles, ACLs; a deleted topic's share state deleted (on a
single node and in a cluster: the `kafka` targets)."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)

from kafkafast.broker.group_coordinator import java_string_hash
from kafkafast.broker.groups.offsets_records import ShareGroupRecord, decode_record
from kafkafast.broker.share.state_store import STATE_TOPIC, coordinator_key
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.coordinator_records import (ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey,
                                                              ShareUpdateValue)
from kafkafast.protocol._generated.delete_groups import DeleteGroupsRequest
from kafkafast.protocol._generated.delete_share_group_state import DeleteShareGroupStateRequest
from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest
from kafkafast.protocol._generated.describe_groups import DescribeGroupsRequest
from kafkafast.protocol._generated.initialize_share_group_state import InitializeShareGroupStateRequest
from kafkafast.protocol._generated.list_groups import ListGroupsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.read_share_group_state import ReadShareGroupStateRequest
from kafkafast.protocol._generated.read_share_group_state_summary import ReadShareGroupStateSummaryRequest
from kafkafast.protocol._generated.share_acknowledge import ShareAcknowledgeRequest
from kafkafast.protocol._generated.share_fetch import ShareFetchRequest
from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest
from kafkafast.protocol._generated.write_share_group_state import WriteShareGroupStateRequest
from kafkafast.protocol.errors import ErrorCode as EC
from kafkafast.protocol.primitives import Reader
from kafkafast.records import iter_record_batches
from kafkafast.runtime.shm import owner_for
from kafkafast.testing import KafkaTestBroker
from tests.integration.test_metrics import scrape, value
from tests.integration.test_shared_append import clients_on_every_worker
from tests.support.broker_process import free_port
from tests.support.cluster import KafkaCluster
from tests.support.cli import kafkafast
from tests.support.raw_client import RawClient

LOCK_MS = 2000
SETTINGS = {
    "group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.min.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "6000", "group.share.min.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": "4",
}
QUIET = {"log_level": 0}


@pytest.fixture
def sbroker(broker_factory):
    return broker_factory(settings=SETTINGS)


@pytest.fixture(params=[0, 3], ids=["one-process", "3-workers"])
def any_broker(request, broker_factory):
    """A single-process broker and a 3-worker one: the share APIs go to the group's worker, which
    reads every partition and writes its share state to `__share_group_state` partitions owned
    by other workers."""
    return broker_factory(workers=request.param, settings=SETTINGS)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> set[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    values = set()
    for part in range(partitions):
        for i in range(per_partition):
            v = f"{part}-{i}".encode()
            values.add(v)
            p.produce(topic, value=v, partition=part)
    assert p.flush(20) == 0
    return values


def share_consumer(bootstrap: str, group: str, topic: str, **extra) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET, **extra})
    c.subscribe([topic])
    return c


def poll_until(consumers, done, timeout: float, on_message) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        for c in consumers:
            for msg in c.poll(0.1):
                if msg.error() is None:
                    on_message(c, msg)


def new_group() -> str:
    return f"sg-{uuid.uuid4().hex[:8]}"


def test_eight_consumers_over_two_partitions_accept_every_record_exactly_once(any_broker):
    bs = any_broker.bootstrap
    create_topic(bs, "q8", 2)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    consumers = [share_consumer(bs, group, "q8") for _ in range(8)]
    seen: Counter = Counter()
    by_consumer: Counter = Counter()
    values: set[bytes] = set()
    producer = Producer({"bootstrap.servers": bs, **QUIET})

    def on(c, msg):
        seen[msg.value()] += 1
        by_consumer[id(c)] += 1

    try:
        deadline = time.monotonic() + 60
        rounds = 0
        while (len(by_consumer) < 8 or set(seen) != values) and time.monotonic() < deadline:
            if len(by_consumer) < 8 or rounds < 5:  # small batches over time: each goes to whoever fetches first
                for part in range(2):
                    for i in range(5):
                        v = f"{rounds}-{part}-{i}".encode()
                        values.add(v)
                        producer.produce("q8", value=v, partition=part)
                producer.flush(10)
                rounds += 1
            order = consumers[rounds % 8:] + consumers[:rounds % 8]
            for c in order:
                for msg in c.poll(0.05):
                    if msg.error() is None:
                        on(c, msg)
        for c in consumers:  # implicit mode: the last poll's records are accepted on close
            c.poll(0.05)
    finally:
        for c in consumers:
            c.close()
    assert set(seen) == values
    assert len(by_consumer) == 8, f"only {len(by_consumer)} of 8 consumers received records"
    assert all(n == 1 for n in seen.values()), [v for v, n in seen.items() if n > 1][:5]


def test_released_records_come_back_and_rejected_ones_never(any_broker):
    bs = any_broker.bootstrap
    create_topic(bs, "qr", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    values = produce(bs, "qr", 1, 20)
    c = share_consumer(bs, group, "qr", **{"share.acknowledgement.mode": "explicit"})
    deliveries: Counter = Counter()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(deliveries) < 20:
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                v = m.value()
                deliveries[v] += 1
                n = int(v.split(b"-")[1])
                if n % 3 == 0 and deliveries[v] == 1:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                elif n % 3 == 1:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync()
        # The released ones come back (delivery 2), then are accepted; the rejected ones never do.
        deadline = time.monotonic() + 20
        released = {v for v in values if int(v.split(b"-")[1]) % 3 == 0}
        while time.monotonic() < deadline and any(deliveries[v] < 2 for v in released):
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                deliveries[m.value()] += 1
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync()
        end = time.monotonic() + 3 * LOCK_MS / 1000  # well past any lock: nothing else comes back
        while time.monotonic() < end:
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                deliveries[m.value()] += 1
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync()
    finally:
        c.close()
    assert set(deliveries) == values
    assert {v: deliveries[v] for v in released} == {v: 2 for v in released}
    assert all(deliveries[v] == 1 for v in values - released)


def test_a_hung_consumers_records_are_redelivered_after_the_lock_duration(sbroker, tmp_path):
    """A consumer that stops (SIGSTOP) holding records keeps its connections open: its records
    come back when their acquisition locks expire (a killed one's come back at once: below)."""
    bs = sbroker.bootstrap
    create_topic(bs, "qk", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    values = produce(bs, "qk", 1, 30)
    # A consumer in another process acquires records and hangs without acknowledging them.
    script = tmp_path / "holder.py"
    script.write_text(
        "import sys, time\n"
        "from confluent_kafka import ShareConsumer\n"
        f"c = ShareConsumer({{'bootstrap.servers': '{bs}', 'group.id': '{group}', 'log_level': 0,"
        " 'share.acknowledgement.mode': 'explicit'})\n"
        "c.subscribe(['qk'])\n"
        "n = 0\n"
        "while n == 0:\n"
        "    n = len([m for m in c.poll(0.5) if m.error() is None])\n"
        "print(n, flush=True)\n"
        "time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())
        assert held > 0
        holder.send_signal(signal.SIGSTOP)
        taken_at = time.monotonic()
        c = share_consumer(bs, group, "qk")
        got: Counter = Counter()
        try:
            poll_until([c], lambda: set(got) >= values, 30, lambda _c, m: got.update([m.value()]))
            c.poll(0.1)
        finally:
            c.close()
        assert set(got) == values
        assert time.monotonic() - taken_at >= LOCK_MS / 1000 * 0.9  # the locks had to expire first
    finally:
        holder.kill()
        holder.wait(10)


def test_a_record_released_up_to_the_delivery_count_limit_is_archived(sbroker):
    bs = sbroker.bootstrap
    create_topic(bs, "qd", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_delivery_count_limit="3")
    produce(bs, "qd", 1, 1)
    c = share_consumer(bs, group, "qd", **{"share.acknowledgement.mode": "explicit"})
    deliveries = 0
    try:
        end = time.monotonic() + 15
        while time.monotonic() < end:
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                deliveries += 1
                c.acknowledge(m, AcknowledgeType.RELEASE)
            if msgs:
                c.commit_sync()
            if deliveries >= 3:
                break
        quiet_until = time.monotonic() + 2 * LOCK_MS / 1000
        while time.monotonic() < quiet_until:
            for m in c.poll(0.2):
                if m.error() is None:
                    deliveries += 1
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
    finally:
        c.close()
    assert deliveries == 3


def test_share_groups_are_described_listed_and_deleted_as_kafka_does(sbroker):
    bs = sbroker.bootstrap
    create_topic(bs, "qa", 3)
    group = new_group()
    with RawClient(sbroker.port) as raw:
        tid = raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="qa")]), 12).topics[0].topic_id
        hb = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m1", member_epoch=0,
                                                    subscribed_topic_names=["qa"]), 1)
        assert (hb.error_code, hb.member_epoch) == (0, 1)
        assert [(t.topic_id, t.partitions) for t in hb.assignment.topic_partitions] == [(tid, [0, 1, 2])]
        hb2 = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m2", member_epoch=0,
                                                     subscribed_topic_names=["qa"]), 1)
        assert hb2.member_epoch == 2  # spread: more partitions than members, sticky (m1 keeps 2 of its 3)
        assert [p for t in hb2.assignment.topic_partitions for p in t.partitions] == [2]
        again = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m1", member_epoch=1), 1)
        assert again.member_epoch == 2
        assert sorted(p for t in again.assignment.topic_partitions for p in t.partitions) == [0, 1]
        stale = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m2", member_epoch=1), 1)
        assert stale.error_code == EC.FENCED_MEMBER_EPOCH
        empty = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="", member_epoch=0,
                                                       subscribed_topic_names=["qa"]), 1)
        assert empty.error_code == EC.INVALID_REQUEST
        desc = raw.request(ShareGroupDescribeRequest(group_ids=[group, "nope"]), 1).groups
        assert (desc[0].error_code, desc[0].group_state, desc[0].group_epoch, desc[0].assignor_name) == (0, "Stable", 2, "simple")
        assert sorted(m.member_id for m in desc[0].members) == ["m1", "m2"]
        assert desc[0].members[0].assignment.topic_partitions[0].topic_name == "qa"
        assert desc[1].error_code == EC.GROUP_ID_NOT_FOUND
        listed = raw.request(ListGroupsRequest(types_filter=["share"]), 5).groups
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed] == [(group, "share", "share", "Stable")]
        assert raw.request(DescribeGroupsRequest(groups=[group]), 5).groups[0].error_code == EC.GROUP_ID_NOT_FOUND
        assert raw.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code == EC.NON_EMPTY_GROUP
        for m in ("m1", "m2"):
            raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id=m, member_epoch=-1), 1)
        assert raw.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code == 0
        assert raw.request(ListGroupsRequest(types_filter=["share"]), 5).groups == []
        # The share APIs at the versions Kafka 4.1 made stable.
        keys = {k.api_key: (k.min_version, k.max_version) for k in raw.request(ApiVersionsRequest(), 3).api_keys}
        assert {k: keys.get(k) for k in (76, 77, 78, 79)} == {76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1)}


@pytest.mark.parametrize("release,served", [("4.0", False), ("4.2", True)])
def test_kafka_profiles_before_4_1_do_not_advertise_share_groups(broker_factory, release, served):
    b = broker_factory(settings={"kafkafast.as.kafka": release})
    with RawClient(b.port) as raw:
        keys = {k.api_key for k in raw.request(ApiVersionsRequest(), 3).api_keys}
    assert all((k in keys) == served for k in (76, 77, 78, 79))


def ack_by_thirds(bootstrap: str, group: str, topic: str, values: set[bytes]) -> set[bytes]:
    """One explicit-mode share consumer accepts, rejects or releases each record by its number
    mod 3 (commit_sync after each poll: several acknowledgements, so several state records);
    the released ones."""
    c = share_consumer(bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    accepted, rejected, held = set(), set(), set()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(accepted | rejected | held) < len(values):
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                n = int(m.value().split(b"-")[1])
                if n % 3 == 0:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    accepted.add(m.value())
                elif n % 3 == 1:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                    rejected.add(m.value())
                else:
                    held.add(m.value())  # released: delivered again after a restart, as the second time
                    c.acknowledge(m, AcknowledgeType.RELEASE)
            if msgs:
                c.commit_sync()
    finally:
        c.close()
    assert accepted | rejected | held == values
    return held


def assert_only_redelivered(bootstrap: str, group: str, topic: str, held: set[bytes]) -> None:
    """A new consumer of the group gets the released records again, with their delivery count
    gone on, and nothing else."""
    c = share_consumer(bootstrap, group, topic)
    got: dict[bytes, int] = {}
    try:
        poll_until([c], lambda: set(got) >= held, 60, lambda _c, m: got.__setitem__(m.value(), m.delivery_count()))
        end = time.monotonic() + 2
        while time.monotonic() < end:  # nothing else comes
            for m in c.poll(0.2):
                if m.error() is None:
                    got[m.value()] = m.delivery_count()
    finally:
        c.close()
    assert set(got) == held
    assert min(got.values()) >= 2  # the delivery count survived the restart


@pytest.mark.parametrize("stop,workers", [("graceful", 0), ("sigkill", 0), ("sigkill", 3)])
def test_a_broker_restart_loses_no_acknowledgement(broker_factory, stop, workers):
    # A snapshot every 3 records: the state comes back from snapshots and the updates after them.
    b = broker_factory(workers=workers,
                       settings={**SETTINGS, "share.coordinator.snapshot.update.records.per.snapshot": "3"})
    bs = b.bootstrap
    create_topic(bs, "qs", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    held = ack_by_thirds(bs, group, "qs", produce(bs, "qs", 1, 30))
    if stop == "graceful":
        b.restart()
    else:
        b.kill()
        b.start()
    assert_only_redelivered(bs, group, "qs", held)


def test_state_written_through_the_owner_worker_survives_a_restart_and_a_failed_write(tmp_path):
    """The group's worker forwards its share state to the worker owning the key's
    `__share_group_state` partition (shared append off): those writes are not refused for the
    topic's min.insync.replicas=2 (Kafka's default; Kafka's coordinators append with acks=1),
    and after one of them failed (the first, the share-partition's snapshot: a disk error) the
    next is a whole snapshot, so the updates after it are not lost with it at the restart."""
    b = KafkaTestBroker(tmp_path / "b", workers=3, settings={
        **SETTINGS, "share.coordinator.snapshot.update.records.per.snapshot": "3",
        "share.coordinator.state.topic.num.partitions": "6", "kafkafast.produce.shared.append": "false"})
    b.start()
    try:
        bs = b.bootstrap_servers
        create_topic(bs, "qw", 1)
        with RawClient(b.port) as raw:
            tid = raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="qw")]), 12).topics[0].topic_id
        # A group coordinated by another worker than the one owning its state's partition.
        for _ in range(100):
            group = new_group()
            offsets = (java_string_hash(group) & 0x7FFFFFFF) % int(SETTINGS["offsets.topic.num.partitions"])
            state = (java_string_hash(coordinator_key(group, tid, 0)) & 0x7FFFFFFF) % 6
            if owner_for("__consumer_offsets", offsets, 3) != owner_for(STATE_TOPIC, state, 3):
                break
        else:
            raise AssertionError("no group found whose state partition another worker owns")
        set_group_configs(bs, group, share_auto_offset_reset="earliest")
        values = produce(bs, "qw", 1, 30)
        b.faults.disk_error(STATE_TOPIC, state)
        held = ack_by_thirds(bs, group, "qw", values)
        assert b.faults.active() == []  # the first state write failed
        b.restart(clean=False)
        assert_only_redelivered(bs, group, "qw", held)
    finally:
        b.kill()


@pytest.mark.parametrize("workers", [0, 3], ids=["appended-here", "forwarded-to-the-owner-worker"])
def test_acknowledgements_whose_state_write_failed_are_rolled_back_and_redelivered(tmp_path, workers):
    """The state write of an acknowledgement fails (a disk error on the `__share_group_state`
    partition: appended by this process, or by the worker owning it, forwarded there): the
    acknowledgement is answered with the error and, as Kafka's SharePartition rolls a failed
    write back, its records are acquired again under the lock they had, so they are delivered
    again once it expires (not kept acknowledged in memory, lost to the group until a restart)."""
    b = KafkaTestBroker(tmp_path / "b", workers=workers, settings={
        **SETTINGS, "share.coordinator.state.topic.num.partitions": "6", "kafkafast.produce.shared.append": "false"})
    b.start()
    try:
        bs = b.bootstrap_servers
        create_topic(bs, "qr", 1)
        tid = topic_id(b.port, "qr")
        for _ in range(100):  # with workers: a group coordinated by another worker than its state's owner
            group = new_group()
            offsets = (java_string_hash(group) & 0x7FFFFFFF) % int(SETTINGS["offsets.topic.num.partitions"])
            state = (java_string_hash(coordinator_key(group, tid, 0)) & 0x7FFFFFFF) % 6
            if not workers or owner_for("__consumer_offsets", offsets, workers) != owner_for(STATE_TOPIC, state, workers):
                break
        set_group_configs(bs, group, share_auto_offset_reset="earliest")
        p = Producer({"bootstrap.servers": bs, "linger.ms": 200, **QUIET})
        values = {f"r-{i}".encode() for i in range(6)}
        for v in sorted(values):
            p.produce("qr", value=v, partition=0)
        assert p.flush(30) == 0
        c = share_consumer(bs, group, "qr", **{"share.acknowledgement.mode": "explicit"})
        try:
            first: list = []
            deadline = time.monotonic() + 20
            while not first and time.monotonic() < deadline:
                first = [m for m in c.poll(0.2) if m.error() is None]
            assert {m.value() for m in first} == values  # one batch, acquired (and its state written) at once
            b.faults.disk_error(STATE_TOPIC, state)
            for m in first:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            errors = [e for e in c.commit_sync(30).values() if e is not None]
            assert errors and b.faults.active() == []  # the acknowledgements' write failed
            again: dict[bytes, int] = {}
            deadline = time.monotonic() + 4 * LOCK_MS / 1000
            while set(again) != values and time.monotonic() < deadline:
                for m in c.poll(0.2):
                    if m.error() is None:
                        again[m.value()] = m.delivery_count()
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                if again:
                    assert all(e is None for e in c.commit_sync(30).values())
        finally:
            c.close()
        assert again == dict.fromkeys(values, 2)
    finally:
        b.kill()


def test_the_share_coordinator_apis_read_write_initialize_and_delete_the_stored_state(sbroker):
    bs = sbroker.bootstrap
    create_topic(bs, "qc", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, "qc", 1, 10)
    c = share_consumer(bs, group, "qc", **{"share.acknowledgement.mode": "explicit"})
    n = 0
    try:
        deadline = time.monotonic() + 20
        while n < 10 and time.monotonic() < deadline:
            for m in c.poll(0.2):
                if m.error() is None:  # accept 0-3, reject 4, accept the rest
                    c.acknowledge(m, AcknowledgeType.REJECT if m.offset() == 4 else AcknowledgeType.ACCEPT)
                    n += 1
            c.commit_sync()
    finally:
        c.close()
    with RawClient(sbroker.port) as raw:
        tid = raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="qc")]), 12).topics[0].topic_id
        RS = ReadShareGroupStateRequest
        read = RS(group_id=group, topics=[RS.ReadStateData(topic_id=tid, partitions=[RS.PartitionData(partition=0)])])
        state = raw.request(read, 0).results[0].partitions[0]
        assert (state.error_code, state.start_offset, state.state_batches) == (0, 10, [])
        W = WriteShareGroupStateRequest
        write = W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[W.PartitionData(
            partition=0, state_epoch=-5, leader_epoch=0, start_offset=3, state_batches=[])])])
        assert raw.request(write, 0).results[0].partitions[0].error_code == EC.FENCED_STATE_EPOCH
        IS = InitializeShareGroupStateRequest
        init = IS(group_id=group, topics=[IS.InitializeStateData(topic_id=tid, partitions=[
            IS.PartitionData(partition=0, state_epoch=1, start_offset=6)])])
        assert raw.request(init, 0).results[0].partitions[0].error_code == 0
        summary = raw.request(ReadShareGroupStateSummaryRequest(group_id=group, topics=[
            ReadShareGroupStateSummaryRequest.ReadStateSummaryData(topic_id=tid, partitions=[
                ReadShareGroupStateSummaryRequest.PartitionData(partition=0)])]), 0).results[0].partitions[0]
        assert (summary.state_epoch, summary.start_offset) == (1, 6)
    # The share-partition starts again at offset 6.
    c = share_consumer(bs, group, "qc")
    got: set[int] = set()
    try:
        poll_until([c], lambda: len(got) >= 4, 20, lambda _c, m: got.add(m.offset()))
        c.poll(0.1)
    finally:
        c.close()
    assert got == {6, 7, 8, 9}
    with RawClient(sbroker.port) as raw:
        DS = DeleteShareGroupStateRequest
        assert raw.request(DS(group_id=group, topics=[DS.DeleteStateData(topic_id=tid, partitions=[
            DS.PartitionData(partition=0)])]), 0).results[0].partitions[0].error_code == 0
        assert raw.request(read, 0).results[0].partitions[0].start_offset == -1


def test_the_share_coordinator_fences_a_former_leaders_reads_and_writes(sbroker):
    """Kafka's share coordinator keeps, per share-partition, the newest leader epoch its
    leader read or wrote the state with (in the state records too): a WriteShareGroupState or
    ReadShareGroupState with an older one is a former leader's, answered FENCED_LEADER_EPOCH,
    before the state epoch is checked; the epoch survives a restart."""
    bs = sbroker.bootstrap
    create_topic(bs, "qe", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, "qe", 1, 4)
    c = share_consumer(bs, group, "qe")
    got: set[int] = set()
    try:
        poll_until([c], lambda: len(got) >= 4, 20, lambda _c, m: got.add(m.offset()))
        c.commit_sync()
    finally:
        c.close()
    tid = topic_id(sbroker.port, "qe")
    RS, W = ReadShareGroupStateRequest, WriteShareGroupStateRequest

    def read(leader_epoch: int) -> int:
        with RawClient(sbroker.port) as raw:
            return raw.request(RS(group_id=group, topics=[RS.ReadStateData(topic_id=tid, partitions=[
                RS.PartitionData(partition=0, leader_epoch=leader_epoch)])]), 0).results[0].partitions[0].error_code

    def write(leader_epoch: int, state_epoch: int = 0) -> int:
        with RawClient(sbroker.port) as raw:
            return raw.request(W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[W.PartitionData(
                partition=0, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=-1,
                state_batches=[])])]), 0).results[0].partitions[0].error_code

    assert read(0) == 0  # the broker's own leader epoch (a single node's is 0)
    assert write(3) == 0
    assert (write(2), read(2)) == (EC.FENCED_LEADER_EPOCH, EC.FENCED_LEADER_EPOCH)
    assert write(2, state_epoch=-5) == EC.FENCED_LEADER_EPOCH  # before the state epoch
    assert read(5) == 0  # a new leader read the state: the older leaders' writes are fenced from now on
    assert (write(4), write(5)) == (EC.FENCED_LEADER_EPOCH, 0)
    assert write(6, state_epoch=-5) == EC.FENCED_STATE_EPOCH
    sbroker.restart()
    deadline = time.monotonic() + 20
    while read(6) == EC.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (write(5), write(6)) == (EC.FENCED_LEADER_EPOCH, 0)


def group_reading_from_earliest(bs: str, topic: str, partitions: int, per_partition: int) -> tuple[str, ShareConsumer]:
    """A new topic with records, a new group starting at the earliest offset and its consumer."""
    create_topic(bs, topic, partitions)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, partitions, per_partition)
    return group, share_consumer(bs, group, topic)


def test_share_groups_command_lists_describes_resets_and_deletes(sbroker):
    bs = sbroker.bootstrap
    group, c = group_reading_from_earliest(bs, "qcli", 2, 5)
    got: set[bytes] = set()
    try:
        poll_until([c], lambda: len(got) >= 10, 20, lambda _c, m: got.add(m.value()))
        c.poll(0.1)  # accepts the last records (implicit mode)
        b = ["--bootstrap-server", bs]
        assert kafkafast("share-groups", *b, "--list").stdout.split() == [group]
        members = kafkafast("share-groups", *b, "--describe", "--group", group, "--members").stdout.splitlines()
        assert members[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[1].split()[0] == group and members[1].split()[4] == "2"
        state = kafkafast("share-groups", *b, "--describe", "--group", group, "--state").stdout.splitlines()
        assert state[1].split()[0] == group and state[1].split()[-2:] == ["Stable", "1"]
        busy = kafkafast("share-groups", *b, "--reset-offsets", "--group", group, "--topic", "qcli", "--to-earliest",
                         "--execute", check=False)
        assert busy.returncode != 0 and "is not empty" in busy.stderr + busy.stdout
    finally:
        c.close()
    offsets = kafkafast("share-groups", *b, "--describe", "--group", group).stdout.splitlines()
    assert offsets[0] == f"Share group '{group}' has no active members."
    assert offsets[1].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert [r.split()[1:] for r in offsets[2:4]] == [["qcli", "0", "5", "0"], ["qcli", "1", "5", "0"]]
    dry = kafkafast("share-groups", *b, "--reset-offsets", "--group", group, "--topic", "qcli", "--to-offset", "2")
    assert "dry run" in dry.stdout
    kafkafast("share-groups", *b, "--reset-offsets", "--group", group, "--topic", "qcli", "--to-offset", "2", "--execute")
    offsets = kafkafast("share-groups", *b, "--describe", "--group", group).stdout.splitlines()
    assert [r.split()[1:] for r in offsets[2:4]] == [["qcli", "0", "2", "3"], ["qcli", "1", "2", "3"]]
    # The group reads again from offset 2.
    c = share_consumer(bs, group, "qcli")
    again: set[tuple[int, int]] = set()
    try:
        poll_until([c], lambda: len(again) >= 6, 20, lambda _c, m: again.add((m.partition(), m.offset())))
        c.poll(0.1)
    finally:
        c.close()
    assert again == {(p, o) for p in (0, 1) for o in (2, 3, 4)}
    deleted = kafkafast("share-groups", *b, "--delete-offsets", "--group", group, "--topic", "qcli").stdout
    assert deleted.split()[:3] == ["TOPIC", "PARTITION", "STATUS"] and deleted.count("Successful") == 2
    assert kafkafast("share-groups", *b, "--delete", "--group", group).stdout.strip() == \
        f"Deletion of requested share groups ('{group}') was successful."
    assert kafkafast("share-groups", *b, "--list").stdout.split() == []


def test_a_share_group_survives_a_restart_in_consumer_offsets_until_deleted(any_broker):
    """The group's records in `__consumer_offsets` (epoch, members, initialised partitions):
    after a restart it is listed, described with its epoch, its member goes on heartbeating,
    a new member's epoch continues from the stored one; deleted, it is gone after a restart."""
    bs = any_broker.bootstrap
    group, c = group_reading_from_earliest(bs, "qpersist", 2, 2)
    got: set[bytes] = set()
    try:
        poll_until([c], lambda: len(got) >= 4, 20, lambda _c, m: got.add(m.value()))
    finally:
        c.close()
    assert len(got) == 4

    def describe(raw: RawClient) -> Any:
        return raw.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0]

    with RawClient(any_broker.port) as raw:
        kept = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="kept", member_epoch=0,
                                                      subscribed_topic_names=["qpersist"]), 1)
        assert kept.error_code == 0
        other = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="other", member_epoch=0,
                                                       subscribed_topic_names=["qpersist"]), 1)
        epoch = describe(raw).group_epoch  # "kept" has not heard of it: still at the epoch before
        assert (kept.member_epoch, other.member_epoch) == (epoch - 1, epoch)
    any_broker.restart()
    with RawClient(any_broker.port) as raw:
        g = describe(raw)
        assert (g.error_code, g.group_state, g.group_epoch, sorted(m.member_id for m in g.members)) == \
            (0, "Stable", epoch, ["kept", "other"])
        # its epoch and target were stored (ShareGroupCurrentMemberAssignment, -TargetAssignment*):
        # the pre-restart epoch is accepted, not fenced, and moves on with the target it had
        again = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="kept", member_epoch=epoch - 1), 1)
        assert (again.error_code, again.member_epoch) == (0, epoch)
        assert [p for t in again.assignment.topic_partitions for p in t.partitions] == [0]
        for m in ("kept", "other"):
            raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id=m, member_epoch=-1), 1)
        listed = raw.request(ListGroupsRequest(types_filter=["share"]), 5).groups
        assert [(x.group_id, x.group_type, x.group_state) for x in listed] == [(group, "share", "Empty")]
        assert kafkafast("share-groups", "--bootstrap-server", bs, "--list").stdout.split() == [group]
        new = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="new", member_epoch=0,
                                                     subscribed_topic_names=["qpersist"]), 1)
        assert (new.error_code, new.member_epoch) == (0, epoch + 3)  # the leaves, then the join
        raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="new", member_epoch=-1), 1)
        assert raw.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code == 0
    index = (java_string_hash(group) & 0x7FFFFFFF) % int(SETTINGS["offsets.topic.num.partitions"])
    segment = any_broker.data_dir / f"__consumer_offsets-{index}" / "00000000000000000000.log"
    dumped = kafkafast("dump-log", "--files", str(segment), "--offsets-decoder").stdout
    # ShareGroupPartitionMetadata, -MemberMetadata, -Metadata, -TargetAssignmentMetadata,
    # -TargetAssignmentMember, -CurrentMemberAssignment, with tombstones
    for kind in ("9", "10", "11", "12", "13", "14"):
        assert f'key: {{"type":"{kind}","data":{{"groupId":"{group}"' in dumped, dumped
    for kind in ("11", "12"):
        assert f'key: {{"type":"{kind}","data":{{"groupId":"{group}"}}}} payload: <DELETE>' in dumped
    for kind in ("13", "14"):
        assert f'key: {{"type":"{kind}","data":{{"groupId":"{group}","memberId":"kept"}}}} payload: <DELETE>' in dumped
    assert re.search(f'key: {{"type":"14","data":{{"groupId":"{group}","memberId":"kept"}}}} payload: '
                     f'{{"version":"0","data":{{"memberEpoch":{epoch},"previousMemberEpoch":{epoch - 1},"state":0,'
                     r'"assignedPartitions":\[\{"topicId":"[^"]+","partitions":\[0\]\}\]\}\}', dumped), dumped
    any_broker.restart()
    with RawClient(any_broker.port) as raw:
        assert raw.request(ListGroupsRequest(types_filter=["share"]), 5).groups == []
        assert describe(raw).error_code == EC.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_read_committed_share_groups_never_deliver_aborted_records(sbroker, isolation):
    bs = sbroker.bootstrap
    create_topic(bs, "qt", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_isolation_level=isolation)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{group}", **QUIET})
    p.init_transactions(15)
    for name, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce("qt", value=f"{name}{i}".encode(), partition=0)
        p.flush(10)
        (p.commit_transaction if commit else p.abort_transaction)(15)
    expected = {f"{n}{i}".encode() for n in ("a", "c") + (("b",) if isolation == "read_uncommitted" else ())
                for i in range(3)}
    c = share_consumer(bs, group, "qt")
    got: Counter = Counter()
    try:
        poll_until([c], lambda: set(got) >= expected, 20, lambda _c, m: got.update([m.value()]))
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            got.update(m.value() for m in c.poll(0.2) if m.error() is None)
    finally:
        c.close()
    assert set(got) == expected and max(got.values()) == 1


def bytes_read(pid: int) -> int:
    """What the process has read so far (read, pread, sendfile: /proc/<pid>/io `rchar`)."""
    with open(f"/proc/{pid}/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))


def test_a_share_fetch_reads_about_what_it_acquires_whatever_its_max_bytes(sbroker):
    """A ShareFetch with a MaxBytes of 64 MB and MaxRecords 10 over a 12 MB backlog of 64 KB
    batches acquires one batch, and the broker reads about that much of its log, not the
    backlog (it used to read MaxBytes of it into memory and walk every batch header)."""
    bs = sbroker.bootstrap
    create_topic(bs, "qbig", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 65536, **QUIET})
    for i in range(12_000):
        p.produce("qbig", value=b"%08d" % i + b"x" * 1016, partition=0)
    assert p.flush(30) == 0
    with RawClient(sbroker.port, timeout=30) as c:
        meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="qbig")]), 12)
        tid = meta.topics[0].topic_id
        assert c.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m", member_epoch=0,
                                                    subscribed_topic_names=["qbig"]), 1).error_code == 0

        def fetch(epoch: int):
            return c.request(ShareFetchRequest(
                group_id=group, member_id="m", share_session_epoch=epoch, max_wait_ms=5000, min_bytes=1,
                max_bytes=64 << 20, max_records=10, batch_size=10, topics=[ShareFetchRequest.FetchTopic(
                    topic_id=tid, partitions=[ShareFetchRequest.FetchPartition(partition_index=0)])]), 1)

        first = fetch(0)  # opens the share session and loads the share-partition
        before = bytes_read(sbroker.proc.pid)
        second = fetch(1)
        read = bytes_read(sbroker.proc.pid) - before
    held = first.responses[0].partitions[0].acquired_records[-1].last_offset
    part = second.responses[0].partitions[0]
    (ranges,) = [(r.first_offset, r.last_offset) for r in part.acquired_records]
    batches = list(iter_record_batches(part.records))
    assert ranges[0] == held + 1 and 10 <= ranges[1] - ranges[0] + 1 < 200  # one whole batch of about 60
    assert [r.offset for _, rs in batches for r in rs] == list(range(ranges[0], ranges[1] + 1))
    assert [r.value[:8] for _, rs in batches for r in rs] == [b"%08d" % o for o in range(ranges[0], ranges[1] + 1)]
    assert read < 1 << 20, f"{read} bytes read for {len(part.records)} bytes acquired"


def test_records_held_by_a_closed_consumer_go_to_another_at_once(sbroker):
    bs = sbroker.bootstrap
    create_topic(bs, "qx", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="60000")
    values = produce(bs, "qx", 1, 10)
    first = share_consumer(bs, group, "qx", **{"share.acknowledgement.mode": "explicit"})
    held: set[bytes] = set()
    try:
        poll_until([first], lambda: bool(held), 20, lambda _c, m: held.add(m.value()))
    finally:
        first.close()  # never acknowledged: closing its share session releases them
    assert held
    started = time.monotonic()
    second = share_consumer(bs, group, "qx")
    got: dict[bytes, int] = {}
    try:
        poll_until([second], lambda: set(got) >= values, 20, lambda _c, m: got.__setitem__(m.value(), m.delivery_count()))
        second.poll(0.1)
    finally:
        second.close()
    assert set(got) == values
    assert {v: got[v] for v in held} == {v: 2 for v in held}
    assert time.monotonic() - started < 30  # well before the 60 s lock would have expired


@pytest.mark.parametrize("workers", [0, 2])
def test_share_record_metrics_count_acquisitions_acknowledgements_and_archiving(broker_factory, workers):
    mport = free_port()
    b = broker_factory(workers=workers, settings={**SETTINGS, "metrics.port": str(mport), "metrics.host": "127.0.0.1"})
    bs = b.bootstrap
    create_topic(bs, "qm", 1)
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_delivery_count_limit="2")
    produce(bs, "qm", 1, 9)
    c = share_consumer(bs, group, "qm", **{"share.acknowledgement.mode": "explicit"})
    kinds = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.REJECT, 2: AcknowledgeType.RELEASE}
    deliveries: Counter = Counter()
    try:
        end = time.monotonic() + 20
        # 3 accepted, 3 rejected, 3 released twice: redelivered once, then archived at the limit of 2.
        while time.monotonic() < end and (len(deliveries) < 9 or sum(deliveries.values()) < 12):
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                deliveries[m.value()] += 1
                c.acknowledge(m, kinds[int(m.value().split(b"-")[1]) % 3])
            if msgs:
                c.commit_sync()
    finally:
        c.close()
    assert sum(deliveries.values()) == 12
    deadline = time.monotonic() + 10
    while True:  # the counters are written as the requests are answered
        m = scrape(mport)
        got = (value(m, "kafka_server_share_records_acquired_total"), value(m, "kafka_server_share_records_redelivered_total"),
               value(m, "kafka_server_share_records_acknowledged_total", type="accept"),
               value(m, "kafka_server_share_records_acknowledged_total", type="reject"),
               value(m, "kafka_server_share_records_acknowledged_total", type="release"),
               value(m, "kafka_server_share_records_archived_total"))
        if got == (12, 3, 3, 3, 3, 3) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got == (12, 3, 3, 3, 3, 3)


def test_an_acknowledgement_wakes_a_parked_share_fetch_only_for_records_left_to_it(broker_factory):
    """Member a's ShareFetch releases its records and acquires them again itself: member b's
    ShareFetch parked on the partition is not woken for nothing (kafka_server_share_fetch_wakeups
    stays at 0) and goes on waiting. A ShareAcknowledge releasing them (no acquisition after it)
    wakes it once, and it gets them."""
    mport = free_port()
    broker = broker_factory(settings={**SETTINGS, "metrics.port": str(mport), "metrics.host": "127.0.0.1"})
    group, tid = one_batch_group(broker.bootstrap, broker.port, "qwake", 5)
    A = ShareAcknowledgeRequest
    parked: list[Any] = []
    with RawClient(broker.port, timeout=30) as ra, RawClient(broker.port, timeout=30) as rb:
        a = RawShareMember(ra, group, "qwake", tid, member="a")
        b = RawShareMember(rb, group, "qwake", tid, member="b")
        assert acquired(a.first_fetch()) == [(0, 4, 1)]
        waiting = threading.Thread(target=lambda: parked.append(b.fetch(wait_ms=15000)))
        waiting.start()
        try:
            # (a parked fetch is not visible from outside: this gives b's time to park; were it
            # late, it would find nothing either, park, and the test could only pass)
            time.sleep(0.5)
            assert acquired(a.fetch([(0, 4, [2])])) == [(0, 4, 2)]  # released, taken again at once
            assert value(scrape(mport), "kafka_server_share_fetch_wakeups_total") == 0
            assert waiting.is_alive()
            released = ra.request(A(group_id=group, member_id="a", share_session_epoch=a.epoch, topics=[
                A.AcknowledgeTopic(topic_id=tid, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                    A.AcknowledgementBatch(first_offset=0, last_offset=4, acknowledge_types=[2])])])]), 1)
            assert released.error_code == 0 and released.responses[0].partitions[0].error_code == 0
        finally:
            waiting.join(20)
    assert acquired(parked[0]) == [(0, 4, 3)]
    assert value(scrape(mport), "kafka_server_share_fetch_wakeups_total") == 1


def test_a_member_that_stops_heartbeating_leaves_after_the_session_timeout(sbroker):
    bs = sbroker.bootstrap
    create_topic(bs, "qh", 1)
    group = new_group()
    set_group_configs(bs, group, share_session_timeout_ms="6000", share_heartbeat_interval_ms="2000")
    with RawClient(sbroker.port) as raw:
        hb = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="quiet", member_epoch=0,
                                                    subscribed_topic_names=["qh"]), 1)
        assert (hb.error_code, hb.heartbeat_interval_ms) == (0, 2000)  # the group's override
        joined = time.monotonic()
        deadline = joined + 20
        while time.monotonic() < deadline:
            g = raw.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0]
            if not g.members:
                break
            time.sleep(0.2)
        assert g.group_state == "Empty" and time.monotonic() - joined >= 5.5
        gone = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id="quiet", member_epoch=1), 1)
        assert gone.error_code == EC.UNKNOWN_MEMBER_ID


def test_group_configs_are_described_as_kafka_4_does(sbroker):
    """DescribeConfigs of a group (librdkafka's admin client): every group config, the
    group's own as GROUP_CONFIG, the others as DEFAULT_CONFIG with the broker's group.share.*
    value or Kafka's default; a delete takes the group's own away again; an empty group name is
    INVALID_REQUEST (Kafka's 'Group name must not be empty')."""
    admin = AdminClient({"bootstrap.servers": sbroker.bootstrap, **QUIET})
    group = new_group()

    def described() -> dict[str, tuple[str, ConfigSource]]:
        res = ConfigResource(ResourceType.GROUP, group)
        return {n: (e.value, ConfigSource(e.source)) for n, e in admin.describe_configs([res])[res].result(15).items()}

    defaults = {"consumer.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG),  # Kafka's defaults
                "consumer.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG),
                "share.auto.offset.reset": ("latest", ConfigSource.DEFAULT_CONFIG),
                "share.isolation.level": ("read_uncommitted", ConfigSource.DEFAULT_CONFIG),
                "share.record.lock.duration.ms": (str(LOCK_MS), ConfigSource.DEFAULT_CONFIG),
                "share.delivery.count.limit": ("5", ConfigSource.DEFAULT_CONFIG),
                "share.session.timeout.ms": ("6000", ConfigSource.DEFAULT_CONFIG),
                "share.heartbeat.interval.ms": ("1000", ConfigSource.DEFAULT_CONFIG)}
    assert described() == defaults
    set_group_configs(sbroker.bootstrap, group, share_auto_offset_reset="earliest", share_delivery_count_limit="3")
    assert described() == {**defaults, "share.auto.offset.reset": ("earliest", ConfigSource.GROUP_CONFIG),
                           "share.delivery.count.limit": ("3", ConfigSource.GROUP_CONFIG)}
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.delivery.count.limit", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(15)
    assert described() == {**defaults, "share.auto.offset.reset": ("earliest", ConfigSource.GROUP_CONFIG)}
    empty = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=32, resource_name="", configuration_keys=None)])  # librdkafka refuses to send it
    with RawClient(sbroker.port) as raw:
        assert raw.request(empty, 4).results[0].error_code == EC.INVALID_REQUEST


class RawShareMember:
    """One share group member over a raw connection: ShareFetch with piggy-backed
    acknowledgements, one partition of one topic, its share session epochs counted here."""

    def __init__(self, raw: RawClient, group: str, topic: str, tid: bytes, member: str = "m") -> None:
        self.raw, self.group, self.tid, self.member, self.epoch = raw, group, tid, member, 0
        deadline = time.monotonic() + 20
        while True:  # the group coordinator may still be loading after a start
            err = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                                         subscribed_topic_names=[topic]), 1).error_code
            if err != EC.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert err == 0

    def fetch(self, acks: list[tuple[int, int, list[int]]] = (), wait_ms: int = 5000, max_bytes: int = 1 << 20) -> Any:
        F = ShareFetchRequest
        resp = self.raw.request(F(
            group_id=self.group, member_id=self.member, share_session_epoch=self.epoch, max_wait_ms=wait_ms,
            min_bytes=1, max_bytes=max_bytes, max_records=500, batch_size=500, topics=[F.FetchTopic(
                topic_id=self.tid, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=[
                    F.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=t)
                    for a, b, t in acks])])]), 1)
        self.epoch += 1
        assert resp.error_code == 0, resp
        return resp.responses[0].partitions[0] if resp.responses else None  # None: nothing acquired nor acknowledged

    def first_fetch(self, timeout: float = 20) -> Any:
        """Fetches until the share-partition answers (its state loads in the background after a
        start: NOT_LEADER_OR_FOLLOWER meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            part = self.fetch()
            if part.error_code == 0 or time.monotonic() > deadline:
                return part
            time.sleep(0.05)


def produce_batch(bootstrap: str, topic: str, values: range) -> None:
    """Records of the given numbers to partition 0, in one batch."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, **QUIET})
    for i in values:
        p.produce(topic, value=b"%d" % i, partition=0)
    assert p.flush(20) == 0


def one_batch_group(bootstrap: str, port: int, topic: str, n: int) -> tuple[str, bytes]:
    """A topic of one partition holding `n` records in one batch (offsets 0..n-1) and a new
    share group reading it from the earliest offset: (group, topic id)."""
    create_topic(bootstrap, topic, 1)
    produce_batch(bootstrap, topic, range(n))
    group = new_group()
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    return group, topic_id(port, topic)


def acquired(part: Any) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]


def topic_id(port: int, topic: str) -> bytes:
    with RawClient(port) as raw:
        meta = raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    return meta.topics[0].topic_id


def read_state(port: int, group: str, tid: bytes) -> tuple[int, list[tuple[int, int, int, int]]]:
    """ReadShareGroupState of partition 0: (start offset, state batches)."""
    RS = ReadShareGroupStateRequest
    with RawClient(port) as raw:
        p = raw.request(RS(group_id=group, topics=[RS.ReadStateData(topic_id=tid, partitions=[
            RS.PartitionData(partition=0)])]), 0).results[0].partitions[0]
    assert p.error_code == 0
    return p.start_offset, batches_of(p)


def state_log(port: int, group: str, tid: bytes) -> list[tuple[str, Any]]:
    """The `__share_group_state` records of the group's partition 0 in log order: ("snapshot",
    ShareSnapshotValue) and ("update", ShareUpdateValue)."""
    with RawClient(port) as raw:
        parts = len(raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=STATE_TOPIC)]),
                                12).topics[0].partitions)
    index = (java_string_hash(coordinator_key(group, tid, 0)) & 0x7FFFFFFF) % parts
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": new_group(), "enable.auto.commit": False,
                  **QUIET})
    out = []
    try:
        high = c.get_watermark_offsets(TopicPartition(STATE_TOPIC, index), timeout=10)[1]
        c.assign([TopicPartition(STATE_TOPIC, index, 0)])
        deadline, seen = time.monotonic() + 20, 0
        while seen < high and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            seen = m.offset() + 1
            kr = Reader(m.key())
            kind = kr.int16()
            k = (ShareSnapshotKey if kind == 0 else ShareUpdateKey).decode(kr, kind)
            if (k.group_id, bytes(k.topic_id), k.partition) != (group, tid, 0) or m.value() is None:
                continue
            vr = Reader(m.value())
            version = vr.int16()
            out.append(("snapshot", ShareSnapshotValue.decode(vr, version)) if kind == 0
                       else ("update", ShareUpdateValue.decode(vr, version)))
        assert seen >= high
    finally:
        c.close()
    return out


def batches_of(value: Any) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in value.state_batches]


def test_a_batch_acknowledged_offset_by_offset_redelivers_only_its_released_records(sbroker):
    """One acquired batch of 10 records, its even offsets accepted and its odd ones released in
    one acknowledgement: the odd ones come again (delivery count 2), the even ones never; an
    offset accepted already cannot be acknowledged again."""
    group, tid = one_batch_group(sbroker.bootstrap, sbroker.port, "qsplit", 10)
    with RawClient(sbroker.port, timeout=30) as raw:
        m = RawShareMember(raw, group, "qsplit", tid)
        assert acquired(m.first_fetch()) == [(0, 9, 1)]
        second = m.fetch([(0, 9, [1, 2] * 5)])
        assert second.acknowledge_error_code == 0
        assert acquired(second) == [(o, o, 2) for o in (1, 3, 5, 7, 9)]
        assert [r.offset for _, rs in iter_record_batches(second.records) for r in rs] == list(range(10))
        assert m.fetch([(0, 0, [1])], wait_ms=0).acknowledge_error_code == EC.INVALID_RECORD_STATE
        last = m.fetch([(o, o, [1]) for o in (1, 3, 5, 7, 9)], wait_ms=500)
        assert (last.acknowledge_error_code, last.acquired_records) == (0, [])
    assert read_state(sbroker.port, group, tid) == (10, [])


def test_a_member_leaving_keeps_its_records_for_the_acknowledgements_its_share_session_closes_with(sbroker):
    """librdkafka's close() sends the leave heartbeat (epoch -1) first and the closing
    ShareAcknowledge (epoch -1) after it. As Kafka, leaving the group neither releases the
    member's records nor ends its share session: the acknowledgements the session closes with
    apply (they got SHARE_SESSION_NOT_FOUND, the records went to another member), and what the
    closing session still holds goes back."""
    group, tid = one_batch_group(sbroker.bootstrap, sbroker.port, "qleave", 10)
    A = ShareAcknowledgeRequest
    with RawClient(sbroker.port, timeout=30) as raw:
        m = RawShareMember(raw, group, "qleave", tid)
        assert acquired(m.first_fetch()) == [(0, 9, 1)]
        left = raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id=m.member, member_epoch=-1), 1)
        assert left.error_code == 0
        closing = raw.request(A(group_id=group, member_id=m.member, share_session_epoch=-1, topics=[
            A.AcknowledgeTopic(topic_id=tid, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                A.AcknowledgementBatch(first_offset=0, last_offset=7, acknowledge_types=[1])])])]), 1)
        assert closing.error_code == 0
        assert closing.responses[0].partitions[0].error_code == 0
        other = RawShareMember(raw, group, "qleave", tid, member="other")
        assert acquired(other.first_fetch()) == [(8, 9, 2)]  # only what the closed session did not accept
    assert read_state(sbroker.port, group, tid) == (8, [(8, 9, 0, 2)])


def test_records_of_a_share_session_whose_connection_closes_go_back_at_once(sbroker):
    """As Kafka 4.1+: a share session ends when the connection that opened it closes, and what
    the member acquired in it goes to another member at once, not when the 60 s locks expire.
    A member that opened its session again on another connection keeps it (and its records)
    when the first connection closes."""
    group, tid = one_batch_group(sbroker.bootstrap, sbroker.port, "qdrop", 10)
    set_group_configs(sbroker.bootstrap, group, share_record_lock_duration_ms="60000")
    with RawClient(sbroker.port, timeout=30) as raw, RawClient(sbroker.port, timeout=30) as raw2:
        with RawClient(sbroker.port, timeout=30) as gone:
            assert acquired(RawShareMember(gone, group, "qdrop", tid).first_fetch()) == [(0, 9, 1)]
        with RawClient(sbroker.port, timeout=30) as first:
            again = RawShareMember(first, group, "qdrop", tid, member="again")
            assert acquired(again.fetch(wait_ms=3000)) == [(0, 9, 2)]
            again.raw, again.epoch = raw2, 0
            assert acquired(again.fetch(wait_ms=0)) == []  # a new session of the member, on raw2
        other = RawShareMember(raw, group, "qdrop", tid, member="other")
        assert acquired(other.fetch(wait_ms=500)) == []  # still held by the session on raw2
        assert again.fetch(wait_ms=0) is None  # which is open: no SHARE_SESSION_NOT_FOUND


def test_a_share_session_forwarded_from_another_worker_ends_with_its_connection(broker_factory):
    """With 2 workers, a share session opened on a connection of the worker not owning the group
    (forwarded to the group's worker) ends when that connection closes too: each member's
    records go to the next member at once, whichever worker its connection was on."""
    b = broker_factory(workers=2, settings=SETTINGS)
    group, tid = one_batch_group(b.bootstrap, b.port, "qfwd", 10)
    set_group_configs(b.bootstrap, group, share_record_lock_duration_ms="60000")
    clients = clients_on_every_worker(b, workers=2)  # one of them is on the worker not owning the group
    for i, gone in enumerate(clients):
        with gone:
            m = RawShareMember(gone, group, "qfwd", tid, member=f"m{i}")
            assert acquired(m.first_fetch() if i == 0 else m.fetch(wait_ms=3000)) == [(0, 9, i + 1)]
    with RawClient(b.port, timeout=30) as raw:
        assert acquired(RawShareMember(raw, group, "qfwd", tid, member="last").fetch(wait_ms=3000)) == [(0, 9, 3)]


def test_a_share_fetch_of_max_bytes_0_acquires_nothing_and_of_1_byte_one_whole_batch(sbroker):
    """librdkafka's fetch.max.bytes=0 gets no records from Kafka 4.2 (its test 0180 pins it);
    a MaxBytes below the first batch's size still gets that batch whole."""
    group, tid = one_batch_group(sbroker.bootstrap, sbroker.port, "qmaxb", 10)
    with RawClient(sbroker.port, timeout=30) as raw:
        m = RawShareMember(raw, group, "qmaxb", tid)
        deadline = time.monotonic() + 20
        while (part := m.fetch(wait_ms=200, max_bytes=0)).error_code and time.monotonic() < deadline:
            m.epoch = 0  # the share-partition still loading: open the session again
        assert (part.error_code, acquired(part)) == (0, [])
        assert acquired(m.fetch(max_bytes=1)) == [(0, 9, 1)]


def test_a_topic_created_again_under_its_name_is_a_new_share_partition(sbroker):
    """The share-partition of a deleted topic is not that of a new topic of the same name: the
    new one starts where share.auto.offset.reset says, its records delivered for the first time
    (the old one's acquired records, locked for 60 s, do not hold the new ones' offsets)."""
    bs = sbroker.bootstrap
    group, tid = one_batch_group(bs, sbroker.port, "qagain", 10)
    set_group_configs(bs, group, share_record_lock_duration_ms="60000")
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    with RawClient(sbroker.port, timeout=30) as raw:
        assert acquired(RawShareMember(raw, group, "qagain", tid).first_fetch()) == [(0, 9, 1)]
        admin.delete_topics(["qagain"])["qagain"].result(15)
        deadline = time.monotonic() + 15
        while "qagain" in admin.list_topics(timeout=5).topics and time.monotonic() < deadline:
            time.sleep(0.05)
        create_topic(bs, "qagain", 1)
        produce_batch(bs, "qagain", range(10))
        again = RawShareMember(raw, group, "qagain", topic_id(sbroker.port, "qagain"), member="again")
        assert acquired(again.first_fetch()) == [(0, 9, 1)]


def test_the_start_offset_moves_past_acknowledged_records_when_the_log_start_passes_it(sbroker):
    """DeleteRecords past the share-partition start offset: the records before the new log
    start are gone, and the start offset moves on past the acknowledged records after them
    (it stopped at the log start, counting them in flight)."""
    group, tid = one_batch_group(sbroker.bootstrap, sbroker.port, "qtrim", 10)
    with RawClient(sbroker.port, timeout=30) as raw:
        m = RawShareMember(raw, group, "qtrim", tid)
        assert acquired(m.first_fetch()) == [(0, 9, 1)]
        assert m.fetch([(5, 9, [1])], wait_ms=0).acknowledge_error_code == 0
        assert read_state(sbroker.port, group, tid) == (0, [(0, 4, 0, 1), (5, 9, 2, 1)])
        admin = AdminClient({"bootstrap.servers": sbroker.bootstrap, **QUIET})
        for f in admin.delete_records([TopicPartition("qtrim", 0, 5)]).values():
            assert f.result(15).low_watermark == 5
        assert m.fetch(wait_ms=0) is None  # nothing to acquire; the share-partition sees the new log start
    assert read_state(sbroker.port, group, tid) == (10, [])


def test_an_acknowledgement_that_frees_record_locks_wakes_a_waiting_share_fetch(broker_factory):
    """A share-partition at its record-lock limit: another member's ShareFetch waits; the
    acceptance that moves the start offset frees locks and wakes it at once (as Kafka completes
    the delayed share fetches of a share-partition after an acknowledgement), instead of at
    its MaxWaitMs (below the 6 s member session timeout: the member does not heartbeat).
    The limit (10) is reached inside a batch of 15 records: as Kafka, that batch is acquired
    to its end (not cut at the limit, to be answered whole again for its rest)."""
    b = broker_factory(settings={**SETTINGS, "group.share.partition.max.record.locks": "10"})
    group, tid = one_batch_group(b.bootstrap, b.port, "qwake", 15)
    produce_batch(b.bootstrap, "qwake", range(15, 20))
    A = ShareAcknowledgeRequest
    with RawClient(b.port, timeout=30) as raw, RawClient(b.port, timeout=30) as raw2:
        holder = RawShareMember(raw, group, "qwake", tid)
        assert acquired(holder.first_fetch()) == [(0, 14, 1)]  # past the lock budget: the batch is finished
        other = RawShareMember(raw2, group, "qwake", tid, member="other")
        answer: list = []
        waiting = threading.Thread(target=lambda: answer.append((other.fetch(wait_ms=5000), time.monotonic())))
        waiting.start()
        try:
            time.sleep(0.5)  # the waiting fetch parks (nothing to acquire: no lock free)
            assert not answer
            sent = time.monotonic()
            acked = raw.request(A(group_id=group, member_id=holder.member, share_session_epoch=holder.epoch, topics=[
                A.AcknowledgeTopic(topic_id=tid, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                    A.AcknowledgementBatch(first_offset=0, last_offset=14, acknowledge_types=[1])])])]), 1)
            assert acked.error_code == 0 and acked.responses[0].partitions[0].error_code == 0
        finally:
            waiting.join(15)
        part, answered = answer[0]
        assert acquired(part) == [(15, 19, 1)], (part, answered - sent)
        assert answered - sent < 3  # woken by the acknowledgement, not by its MaxWaitMs (4.5 s later)


def test_state_writes_are_updates_of_the_changed_batches_and_the_next_update_after_a_restart_holds_all(broker_factory):
    """`__share_group_state` holds one snapshot and then one ShareUpdate per state change, each
    naming batches (a handful), not the records one by one; and since the topic is compacted,
    the latest snapshot and the latest update alone are the state, also for an update written
    after a restart (it holds what the updates before the restart changed)."""
    b = broker_factory(settings=SETTINGS)
    group, tid = one_batch_group(b.bootstrap, b.port, "qlog", 10)
    with RawClient(b.port, timeout=30) as raw:
        m = RawShareMember(raw, group, "qlog", tid)
        assert acquired(m.first_fetch()) == [(0, 9, 1)]
        m.fetch([(0, 9, [2] * 5 + [1] * 5)])  # 0-4 released and acquired again (count 2), 5-9 accepted
        m.fetch([(0, 4, [2])])  # released and acquired again (count 3)
        m.fetch([(0, 4, [2])], wait_ms=0)  # released and acquired again (count 4)
        records = state_log(b.port, group, tid)  # (the session's connection still open: no release)
        assert [kind for kind, _ in records] == ["snapshot"] + ["update"] * 4  # one per ShareFetch
        assert max(len(v.state_batches) for _, v in records) <= 2
        assert batches_of(records[-1][1]) == [(0, 4, 0, 4), (5, 9, 2, 1)]
    b.restart()
    with RawClient(b.port, timeout=30) as raw:
        m = RawShareMember(raw, group, "qlog", tid, member="n")
        assert acquired(m.first_fetch()) == [(0, 4, 5)]
        start, stored = read_state(b.port, group, tid)  # before the connection closes (0-4 archived then)
        assert (start, stored) == (0, [(0, 4, 0, 5), (5, 9, 2, 1)])
        records = state_log(b.port, group, tid)
        kind, update = records[-1]
        assert kind == "update" and [k for k, _ in records].count("snapshot") == 1
        assert (update.start_offset, batches_of(update)) == (0, stored)


def test_a_failed_state_write_fails_the_acknowledgements_and_the_acquisition_it_held(tmp_path):
    """A ShareFetch's acknowledgements and its acquisition are written in one state record:
    when that write fails (a disk error on the `__share_group_state` partition) both answer
    the error and no records are handed out; the records it acquired come again once their
    lock expires, and the ones it acknowledged, rolled back to acquired under the lock they had
    (Kafka's SharePartition), once that one does."""
    b = KafkaTestBroker(tmp_path / "b", settings=SETTINGS)
    b.start()
    try:
        group, tid = one_batch_group(b.bootstrap_servers, b.port, "qfail", 10)
        produce_batch(b.bootstrap_servers, "qfail", range(10, 20))
        with RawClient(b.port, timeout=30) as raw:
            m = RawShareMember(raw, group, "qfail", tid)
            assert acquired(m.first_fetch()) == [(0, 19, 1)]
            produce_batch(b.bootstrap_servers, "qfail", range(20, 30))
            with RawClient(b.port) as meta:
                parts = len(meta.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                    name=STATE_TOPIC)]), 12).topics[0].partitions)
            b.faults.disk_error(STATE_TOPIC, (java_string_hash(coordinator_key(group, tid, 0)) & 0x7FFFFFFF) % parts)
            failed = m.fetch([(0, 19, [1])])
            assert b.faults.active() == []
            assert (failed.acknowledge_error_code, failed.error_code) == (EC.KAFKA_STORAGE_ERROR,) * 2
            assert (failed.acquired_records, len(failed.records or b"")) == ([], 0)
            again: list[tuple[int, int, int]] = []
            deadline = time.monotonic() + 4 * LOCK_MS / 1000
            while sum(b - a + 1 for a, b, _ in again) < 30 and time.monotonic() < deadline:
                got = m.fetch(wait_ms=3 * LOCK_MS)
                again += acquired(got) if got is not None else []
            assert sorted((o, c) for a, b, c in again for o in range(a, b + 1)) == [(o, 2) for o in range(30)]
    finally:
        b.kill()


def test_a_share_fetch_starts_at_another_partition_of_its_session_each_epoch(sbroker):
    """A member's MaxRecords (1 here: one whole batch) goes to the session's partitions in turn,
    the request's epoch modulo their number choosing the first (Kafka's round-robin
    PartitionRotateStrategy), not always to the first partition while it has records."""
    bs = sbroker.bootstrap
    create_topic(bs, "qturn", 2)
    for p in (0, 1):
        for _ in range(2):  # two batches per partition
            producer = Producer({"bootstrap.servers": bs, **QUIET})
            producer.produce("qturn", value=b"x", partition=p)
            assert producer.flush(20) == 0
    group = new_group()
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    tid = topic_id(sbroker.port, "qturn")
    F = ShareFetchRequest
    with RawClient(sbroker.port, timeout=30) as raw:
        RawShareMember(raw, group, "qturn", tid)  # joins the group
        got = []
        deadline = time.monotonic() + 20
        for epoch in range(4):
            while True:  # epoch 0 again while the share state loads after the start (NOT_LEADER_OR_FOLLOWER)
                topics = [F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=p) for p in (0, 1)])]
                resp = raw.request(F(group_id=group, member_id="m", share_session_epoch=epoch, max_wait_ms=5000,
                                     min_bytes=1, max_bytes=1 << 20, max_records=1, batch_size=1, topics=topics), 1)
                parts = [p for t in resp.responses for p in t.partitions]
                if epoch or not any(p.error_code for p in parts) or time.monotonic() > deadline:
                    break
            assert resp.error_code == 0 and not any(p.error_code for p in parts), resp
            got += [(p.partition_index, acquired(p)) for p in parts if p.acquired_records]
    assert got == [(0, [(0, 0, 1)]), (1, [(0, 0, 1)]), (0, [(1, 1, 1)]), (1, [(1, 1, 1)])]


@pytest.fixture(scope="module")
def kafka_settings() -> dict[str, str]:
    return {**SETTINGS, "offsets.retention.check.interval.ms": "500"}  # (it also cleans share groups up)


def stored_start_offset(kafka, group: str, tid: bytes) -> int:
    """ReadShareGroupState of (group, tid, 0) at its share coordinator (the leader of its
    `__share_group_state` partition): the start offset, -1 when there is no state."""
    with RawClient(kafka.leader_port(STATE_TOPIC, 0)) as raw:
        n = len(raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=STATE_TOPIC)]), 12)
                .topics[0].partitions)
    return read_state(kafka.leader_port(STATE_TOPIC, (java_string_hash(coordinator_key(group, tid, 0)) & 0x7FFFFFFF) % n),
                      group, tid)[0]


def share_partition_metadata(kafka, group: str) -> Any:
    """The group's latest ShareGroupPartitionMetadata value in `__consumer_offsets`."""
    with RawClient(kafka.leader_port("__consumer_offsets", 0)) as raw:
        n = len(raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="__consumer_offsets")]),
                            12).topics[0].partitions)
    tp = TopicPartition("__consumer_offsets", (java_string_hash(group) & 0x7FFFFFFF) % n, 0)
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": new_group(), "enable.auto.commit": False, **QUIET})
    try:
        end = c.get_watermark_offsets(tp, 15)[1]
        c.assign([tp])
        latest, at = None, 0
        deadline = time.monotonic() + 15
        while at < end and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                at = m.offset() + 1
                r = decode_record(m.key(), m.value())
                if isinstance(r, ShareGroupRecord) and r.group == group and r.kind == "partition_metadata":
                    latest = r.value
    finally:
        c.close()
    return latest


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result(30)


def delete_and_forgotten(kafka, group: str, topic: str, tid: bytes) -> None:
    """DeleteTopics of the group's only topic, once its share state is deleted and the group's
    partition metadata names it no more."""
    delete_topic(kafka.bootstrap, topic)
    KafkaCluster.wait_for(lambda: stored_start_offset(kafka, group, tid) == -1, 30,
                          f"the share state of the deleted {topic} deleted")
    KafkaCluster.wait_for(lambda: not (m := share_partition_metadata(kafka, group)).initialized_topics
                          and not m.deleting_topics, 30, f"{group}'s partition metadata without {topic}")


def topic_of_a_new_group(kafka, records: int) -> tuple[str, str, bytes, ShareConsumer]:
    """A new 1-partition topic with `records` records and a new share group reading it from the
    earliest offset: (topic, group, topic id, a subscribed share consumer of the group)."""
    topic = f"sq-deleted-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, 1)
    group = new_group()
    set_group_configs(kafka.bootstrap, group, share_auto_offset_reset="earliest")
    produce(kafka.bootstrap, topic, 1, records)
    return topic, group, topic_id(kafka.leader_port(topic, 0), topic), share_consumer(kafka.bootstrap, group, topic)


def topic_of_a_group_without_members(kafka) -> tuple[str, str, bytes]:
    """`topic_of_a_new_group` with 3 records, all accepted by its member, which then left:
    (topic, group, topic id)."""
    topic, group, tid, c = topic_of_a_new_group(kafka, 3)
    try:
        got: list[int] = []
        poll_until([c], lambda: len(got) >= 3, 30, lambda _c, m: got.append(m.offset()))
        c.poll(0.2)  # accepts them
    finally:
        c.close()
    assert stored_start_offset(kafka, group, tid) == 3
    return topic, group, tid


def test_deleting_a_topic_deletes_its_share_state_and_created_again_it_starts_fresh(kafka):
    """DeleteTopics of a topic a share group consumes: the group's coordinator (at its member's
    next heartbeat) moves the topic to the deleting topics of the group's partition metadata,
    deletes its share-partitions' state at their share coordinators (DeleteShareGroupState) and
    then names it no more; created again under its name, the topic's records are all delivered,
    from offset 0, once (the acknowledgements of the old one do not apply)."""
    topic, group, old, c = topic_of_a_new_group(kafka, 5)
    try:
        got: list[tuple[int, int]] = []
        poll_until([c], lambda: len(got) >= 5, 30, lambda _c, m: got.append((m.offset(), m.delivery_count())))
        assert got == [(o, 1) for o in range(5)]
        KafkaCluster.wait_for(lambda: not c.poll(0.2) and stored_start_offset(kafka, group, old) == 5, 30,
                              "the acknowledgements stored")  # (implicit mode: accepted at the next poll)
        meta = share_partition_metadata(kafka, group)
        assert [(bytes(t.topic_id), t.topic_name, t.partitions) for t in meta.initialized_topics] == [(old, topic, [0])]
        delete_and_forgotten(kafka, group, topic, old)  # (the member heartbeats on)
        kafka.create_topic(topic, 1)
        produce(kafka.bootstrap, topic, 1, 3)
        got.clear()
        poll_until([c], lambda: len(got) >= 3, 30, lambda _c, m: got.append((m.offset(), m.delivery_count())))
        assert got == [(o, 1) for o in range(3)]
    finally:
        c.close()


def test_a_share_group_without_members_forgets_a_deleted_topic_at_the_periodic_cleanup(kafka):
    """The topic of a share group whose last member left deleted: no heartbeat comes, the group
    coordinator's periodic cleanup (offsets.retention.check.interval.ms) deletes its
    share-partitions' state and the group's partition metadata names it no more."""
    topic, group, tid = topic_of_a_group_without_members(kafka)
    delete_and_forgotten(kafka, group, topic, tid)


def test_a_topic_deletion_interrupted_by_a_restart_is_finished_when_the_group_loads(tmp_path):
    """A share group's topic deleted while its share state cannot be deleted (disk errors on its
    `__share_group_state` partition): the group's partition metadata names the topic deleting,
    without its partitions (Kafka's record). The broker stopped then and started again, loading
    the group finds the partitions in the group's earlier records and deletes their state."""
    b = KafkaTestBroker(tmp_path / "b", settings={**SETTINGS, "offsets.retention.check.interval.ms": "500"})
    b.start()
    at = SimpleNamespace(bootstrap=b.bootstrap_servers, leader_port=lambda _topic, _partition: b.port,
                         create_topic=lambda topic, partitions: create_topic(b.bootstrap_servers, topic, partitions))
    try:
        topic, group, tid = topic_of_a_group_without_members(at)
        with RawClient(b.port) as meta:
            parts = len(meta.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                name=STATE_TOPIC)]), 12).topics[0].partitions)
        b.faults.disk_error(STATE_TOPIC, (java_string_hash(coordinator_key(group, tid, 0)) & 0x7FFFFFFF) % parts,
                            count=10_000)
        delete_topic(b.bootstrap_servers, topic)
        deleting = KafkaCluster.wait_for(lambda: share_partition_metadata(at, group).deleting_topics, 30,
                                         f"{topic} deleting in {group}'s partition metadata")
        assert [(bytes(t.topic_id), t.topic_name) for t in deleting] == [(tid, topic)]
        assert stored_start_offset(at, group, tid) == 3  # not deleted (the cleanup tries again meanwhile)
        b.stop()
        b.faults.clear()
        b.start()
        meta = KafkaCluster.wait_for(lambda: (lambda m: m if not m.deleting_topics else None)(
            share_partition_metadata(at, group)), 30, f"{group}'s partition metadata without {topic}")
        assert meta.initialized_topics == []
        assert stored_start_offset(at, group, tid) == -1
    finally:
        b.kill()
