"""Share groups in a 3-broker ZooKeeper cluster with librdkafka's ShareConsumer: the
share-partitions live at each partition's leader, their state with the share coordinator (the
leader of the key's `__share_group_state` partition, replicated, acks=all); a partition leader
or a share coordinator SIGKILLed loses no acknowledgement: the new leader reads the state from
the (possibly new) coordinator, a new coordinator replays what its ISR held, and only what was
not acknowledged is delivered again, with the delivery counts going on; with one process per
broker and with two workers per broker (where the worker owning a `__share_group_state`
partition is the coordinator and the group's worker asks it over the forwarding link).
AlterShareGroupOffsets / DeleteShareGroupOffsets (kafka-share-groups.sh --reset-offsets /
--delete-offsets) are served by the group's coordinator and written by each key's share
coordinator; DeleteGroups of an empty share group deletes its state at every share coordinator.
Group configs set through any broker are kept in ZooKeeper and in force on every
broker. The group coordinator SIGKILLed: its successor loads the share group (epoch, members,
subscriptions) from `__consumer_offsets`."""
from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Producer, ShareConsumer

from kafkafast.broker.group_coordinator import java_string_hash
from kafkafast.broker.share import SHARE_API_KEYS
from kafkafast.broker.share.state_store import STATE_TOPIC, coordinator_key
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_share_group_offsets import AlterShareGroupOffsetsRequest
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.delete_groups import DeleteGroupsRequest
from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest
from kafkafast.protocol._generated.describe_share_group_offsets import DescribeShareGroupOffsetsRequest
from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest as Heartbeat
from tests.support.cli import kafkafast
from tests.support.cluster import KafkaCluster, group_coordinator
from tests.support.raw_client import RawClient

SETTINGS = {
    "group.share.record.lock.duration.ms": "3000", "group.share.min.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "6000", "group.share.min.session.timeout.ms": "6000",
    "share.coordinator.state.topic.num.partitions": "3", "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}
QUIET = {"log_level": 0}
EC = E.ErrorCode
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5  # DescribeConfigs' config sources
LOADING = (EC.NOT_COORDINATOR, EC.COORDINATOR_LOAD_IN_PROGRESS, EC.COORDINATOR_NOT_AVAILABLE)  # asked again


@pytest.fixture(scope="module", params=[0, 2], ids=["one-process", "2-workers"])
def share_cluster(tmp_path_factory, request):
    c = KafkaCluster(tmp_path_factory.mktemp("share-cluster"), settings=SETTINGS, workers=request.param)
    try:
        yield c.start()
    finally:
        c.close()


def state_partition(cluster, group: str, topic: str, partition: int) -> int:
    """The `__share_group_state` partition of a share-partition's state (Kafka's placement)."""
    with RawClient(next(iter(cluster.brokers.values())).port, timeout=30) as rc:
        tid = rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
    key = coordinator_key(group, bytes(tid), partition)
    return (java_string_hash(key) & 0x7FFFFFFF) % int(SETTINGS["share.coordinator.state.topic.num.partitions"])


def alter_group_configs(port: int, group: str, **configs: str | None) -> None:
    """IncrementalAlterConfigs of a group through one broker: SET, or DELETE where None."""
    req = IAC(resources=[IAC.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        IAC.AlterableConfig(name=k.replace("_", "."), config_operation=0 if v is not None else 1, value=v)
        for k, v in configs.items()])])
    with RawClient(port, timeout=30) as rc:
        assert rc.request(req, 1).responses[0].error_code == 0


def described_group_configs(port: int, group: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs of a group at one broker: name -> (value, config source)."""
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=32, resource_name=group, configuration_keys=None)])
    with RawClient(port, timeout=30) as rc:
        res = rc.request(req, 4).results[0]
    assert res.error_code == 0, res.error_message
    return {c.name: (c.value, c.config_source) for c in res.configs}


def described_everywhere(cluster, group: str, expected: dict[str, tuple[str, int]], what: str) -> None:
    """Until DescribeConfigs of the group at every broker (on several connections: with workers,
    at several of them) answers `expected` for its names."""
    def everywhere() -> bool:
        return all({n: described_group_configs(b.port, group).get(n) for n in expected} == expected
                   for b in cluster.brokers.values() for _ in range(4))
    cluster.wait_for(everywhere, 30, what)


def set_everywhere(cluster, group: str, **configs: str) -> None:
    """Group configs set through one broker, once every broker has them (ZooKeeper's
    /config/groups, announced to all)."""
    alter_group_configs(next(iter(cluster.brokers.values())).port, group, **configs)
    described_everywhere(cluster, group, {k.replace("_", "."): (v, GROUP_CONFIG) for k, v in configs.items()},
                         f"{group}'s configs at every broker")


def records_for_a_new_group(cluster, topic: str, partitions: int, count: int) -> tuple[str, list[bytes]]:
    """A new topic with `count` records r-0, r-1, ... (r-i in partition i mod `partitions`) and a
    new share group id reading from the earliest offset; (group id, the records' values)."""
    cluster.create_topic(topic, partitions, 3)
    group = f"csg-{uuid.uuid4().hex[:8]}"
    set_everywhere(cluster, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    values = [f"r-{i}".encode() for i in range(count)]
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(30) == 0
    return group, values


def poll_through_a_kill(c: ShareConsumer, timeout: float) -> list:
    """The records of one poll; none while librdkafka still fetches from a killed or restarting
    leader (a broker that has not yet heard of the new leader can name the dead one in its metadata:
    librdkafka's share consumer raises NETWORK_EXCEPTION from poll, as a real application
    would see and poll again)."""
    try:
        return [m for m in c.poll(timeout) if m.error() is None]
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError.NETWORK_EXCEPTION, KafkaError._TRANSPORT):
            raise
        return []


def values_consumed(cluster, group: str, topic: str, values: set[bytes], timeout: float) -> set[bytes]:
    """The values a new share consumer of the group gets from the topic, polling until it has
    `values` or `timeout` seconds passed."""
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
    c.subscribe([topic])
    got: set[bytes] = set()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and got != values:
            got |= {m.value() for m in poll_through_a_kill(c, 0.5)}
    finally:
        c.close()
    return got


def state_leaders(cluster, topic: str) -> dict[int, int]:
    """The leader of each `__share_group_state` partition (the topic created by a share
    consumer's first fetch of `topic`, if it was not yet)."""
    indexes = range(int(SETTINGS["share.coordinator.state.topic.num.partitions"]))
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"csg-{uuid.uuid4().hex[:8]}", **QUIET})
    c.subscribe([topic])
    try:
        cluster.wait_for(lambda: not c.poll(0.2) and all(cluster.leader(STATE_TOPIC, i) >= 0 for i in indexes),
                         30, f"leaders of {STATE_TOPIC}")
    finally:
        c.close()
    return {i: cluster.leader(STATE_TOPIC, i) for i in indexes}


def test_acknowledgements_written_while_the_share_coordinator_is_killed_succeed_after_retries(share_cluster):
    """The share coordinator of a share-partition's state (a broker leading neither the data
    partition, nor the group, nor the cluster) SIGKILLed just before a consumer commits its
    acknowledgements: the partition's leader sends the state write again, with backoff, to the
    coordinator the metadata names then (Kafka's persister retries a refused connection,
    NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS), until the new
    coordinator, elected once the killed broker's ZooKeeper session expired, has it: the commit
    succeeds, and the acknowledged records never come again."""
    cluster = share_cluster
    topic = f"cq-retry-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for(lambda: cluster.leader(topic, 0) >= 0, 30, f"a leader of {topic}")
    leader, controller = cluster.leader(topic, 0), cluster.controller_id()
    coordinators = state_leaders(cluster, topic)
    group = coordinator = None
    for _ in range(200):
        group = f"csg-{uuid.uuid4().hex[:8]}"
        coordinator = coordinators[state_partition(cluster, group, topic, 0)]
        if coordinator not in (leader, controller, group_coordinator(cluster, group)):
            break
    else:
        pytest.skip("no group whose share coordinator is a broker of its own")
    set_everywhere(cluster, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    values = {f"r-{i}".encode() for i in range(20)}
    for v in sorted(values):
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **QUIET})
    c.subscribe([topic])
    acked: set[bytes] = set()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not acked:
            for m in c.poll(0.5):
                if m.error() is None:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    acked.add(m.value())
        assert acked
        cluster.brokers[coordinator].kill()
        try:
            errors = [e for e in c.commit_sync(30).values() if e is not None]
        finally:
            cluster.brokers[coordinator].start()
    finally:
        c.close()
    assert not errors
    assert values_consumed(cluster, group, topic, values - acked, 30) == values - acked


@pytest.mark.parametrize("victim", ["partition-leader", "share-coordinator"])
def test_a_broker_killed_loses_no_acknowledgement(share_cluster, victim):
    cluster = share_cluster
    topic = f"cq-{victim}"
    cluster.create_topic(topic, 2, 3)
    group = f"csg-{uuid.uuid4().hex[:8]}"
    set_everywhere(cluster, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    values = set()
    for i in range(40):
        v = f"r-{i}".encode()
        values.add(v)
        p.produce(topic, value=v, partition=i % 2)
    assert p.flush(30) == 0
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **QUIET})
    c.subscribe([topic])
    seen: set[bytes] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen) < 40:
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                seen.add(m.value())  # even: accepted; odd: released, so delivered again later
                c.acknowledge(m, AcknowledgeType.ACCEPT if int(m.value().split(b"-")[1]) % 2 == 0
                              else AcknowledgeType.RELEASE)
            if msgs:
                c.commit_sync()
    finally:
        c.close()
    assert seen == values
    odd = {v for v in values if int(v.split(b"-")[1]) % 2}
    if victim == "partition-leader":
        killed, moved = cluster.leader(topic, 0), (topic, 0)
    else:  # the leader of the __share_group_state partition holding partition 0's state
        moved = (STATE_TOPIC, state_partition(cluster, group, topic, 0))
        killed = cluster.leader(*moved)
    cluster.brokers[killed].kill()
    # every partition the killed broker led, of the topic and of the state: a consumer told to
    # fetch from a dead leader gets its connection refused, which librdkafka's share consumer
    # raises from poll (NETWORK_EXCEPTION)
    led = [moved] + [(topic, p) for p in range(2) if cluster.leader(topic, p) == killed]
    cluster.wait_for(lambda: all(cluster.leader(*tp) not in (-1, killed) for tp in led), 30, f"new leaders of {led}")
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
    c.subscribe([topic])
    got: dict[bytes, int] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and set(got) != odd:
            for m in poll_through_a_kill(c, 0.5):
                got[m.value()] = m.delivery_count()
        end = time.monotonic() + 2
        while time.monotonic() < end:  # nothing else comes
            for m in poll_through_a_kill(c, 0.3):
                got[m.value()] = m.delivery_count()
    finally:
        c.close()
        cluster.brokers[killed].start()
    assert set(got) == odd
    assert min(got.values()) >= 2


def test_cluster_brokers_advertise_every_share_api(share_cluster):
    for broker in share_cluster.brokers.values():
        with RawClient(broker.port, timeout=30) as rc:
            keys = {k.api_key for k in rc.request(ApiVersionsRequest(), 3).api_keys}
        assert keys >= SHARE_API_KEYS  # AlterShareGroupOffsets / DeleteShareGroupOffsets (91, 92) too


def at_group_coordinator(cluster, group: str, request, version: int, ok=lambda resp: True):
    """The answer of the group's coordinator to `request` (asked again until `ok` says it is one)."""
    def ask():
        node = group_coordinator(cluster, group)
        if node < 0:
            return None
        try:
            with RawClient(cluster.brokers[node].port, timeout=30) as rc:
                resp = rc.request(request, version)
        except OSError:  # a killed broker, still named until another leads the group's partition
            return None
        return resp if ok(resp) else None
    return cluster.wait_for(ask, 30, f"an answer of {group}'s coordinator")


def start_offsets(cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """DescribeShareGroupOffsets at the group's coordinator: partition -> start offset (-1: no state)."""
    Q = DescribeShareGroupOffsetsRequest
    req = Q(groups=[Q.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
        Q.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=list(range(partitions)))])])
    g = at_group_coordinator(cluster, group, req, 0, lambda r: r.groups[0].error_code == 0 and not any(
        p.error_code for t in r.groups[0].topics for p in t.partitions)).groups[0]
    return {p.partition_index: p.start_offset for t in g.topics for p in t.partitions}


def test_share_group_offsets_reset_and_deleted_across_the_cluster(share_cluster):
    """kafka-share-groups.sh --reset-offsets / --delete-offsets and AlterShareGroupOffsets against
    the cluster: the group's coordinator refuses a group with members, writes the new start
    offsets to each key's share coordinator, and a new consumer gets exactly the records from
    there (the partition leaders load the new state; then also after that share coordinator
    died: its successor has them); after --delete-offsets the group has no state for the topic."""
    cluster = share_cluster
    topic = "cq-reset"
    group, _ = records_for_a_new_group(cluster, topic, 2, 6)
    A = AlterShareGroupOffsetsRequest
    alter = A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
        A.AlterShareGroupOffsetsRequestPartition(partition_index=i, start_offset=0) for i in range(2)])])
    b = ["--bootstrap-server", cluster.bootstrap]

    def consume(until: set[tuple[int, int]], *, alter_while_member: bool = False) -> list[tuple[int, int]]:
        c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
        c.subscribe([topic])
        got: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and set(got) < until:
                got += [(m.partition(), m.offset()) for m in poll_through_a_kill(c, 0.5)]
            end = time.monotonic() + 1.5
            while time.monotonic() < end:  # accepts the last records; nothing else comes
                got += [(m.partition(), m.offset()) for m in poll_through_a_kill(c, 0.3)]
            if alter_while_member:  # the group has a member: it cannot be changed
                resp = at_group_coordinator(cluster, group, alter, 0)
                assert [q.error_code for q in resp.responses[0].partitions] == [EC.NON_EMPTY_GROUP] * 2
        finally:
            c.close()
        return got

    everything = {(q, o) for q in (0, 1) for o in range(3)}
    assert sorted(consume(everything, alter_while_member=True)) == sorted(everything)
    other = next(n for n in cluster.brokers if n != group_coordinator(cluster, group))
    with RawClient(cluster.brokers[other].port, timeout=30) as rc:  # only the group's coordinator serves it
        assert [q.error_code for q in rc.request(alter, 0).responses[0].partitions] == [EC.NOT_COORDINATOR] * 2
    kafkafast("share-groups", *b, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "1",
              "--execute")
    assert start_offsets(cluster, group, topic, 2) == {0: 1, 1: 1}
    assert sorted(consume({(q, o) for q in (0, 1) for o in (1, 2)})) == [(q, o) for q in (0, 1) for o in (1, 2)]
    for q in alter.topics[0].partitions:
        q.start_offset = 2
    resp = at_group_coordinator(cluster, group, alter, 0)
    assert [q.error_code for q in resp.responses[0].partitions] == [0, 0]
    moved = (STATE_TOPIC, state_partition(cluster, group, topic, 0))  # holds partition 0's new start offset
    killed = cluster.leader(*moved)
    cluster.brokers[killed].kill()
    try:
        cluster.wait_for(lambda: cluster.leader(*moved) not in (-1, killed) and all(
            killed not in cluster.isr(topic, q) for q in (0, 1)), 30, f"a new leader of {moved}, smaller ISRs")
        # (a record may come twice: a partition's leader epoch moving under an acquisition reloads it)
        assert set(consume({(0, 2), (1, 2)})) == {(0, 2), (1, 2)}
        deleted = kafkafast("share-groups", *b, "--delete-offsets", "--group", group, "--topic", topic).stdout
        assert deleted.count("Successful") == 2
        assert start_offsets(cluster, group, topic, 2) == {0: -1, 1: -1}
    finally:
        cluster.brokers[killed].start()


def accept_everything(cluster, group: str, topic: str, values: set[bytes]) -> dict[bytes, int]:
    """A share consumer of `group` that accepts every record it gets until it has `values` and
    nothing more comes; value -> delivery count."""
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **QUIET})
    c.subscribe([topic])
    got: dict[bytes, int] = {}
    try:
        deadline = time.monotonic() + 60
        quiet_until = None
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            msgs = poll_through_a_kill(c, 0.3)
            for m in msgs:
                got[m.value()] = m.delivery_count()
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync()
            if quiet_until is None and set(got) >= values:
                quiet_until = time.monotonic() + 1.5  # nothing else comes
    finally:
        c.close()
    return got


def test_deleting_a_share_group_deletes_its_state_at_every_share_coordinator(share_cluster):
    """DeleteGroups of an empty share group (kafkafast share-groups --delete) at its coordinator
    deletes the state of its share-partitions at every share coordinator, on other brokers too
    (DeleteShareGroupState), with tombstones in `__share_group_state`: a new consumer of the same
    group id starts where share.auto.offset.reset says and gets every record again, delivered
    once; so also after a share coordinator's broker restarted (the brokers leading its
    `__share_group_state` partitions meanwhile replayed them, deletion included). With a member
    the group is not deleted (NON_EMPTY_GROUP)."""
    cluster = share_cluster
    topic = "cq-delete"
    group, produced = records_for_a_new_group(cluster, topic, 6, 30)
    values = set(produced)
    assert accept_everything(cluster, group, topic, values) == dict.fromkeys(values, 1)
    coordinator = group_coordinator(cluster, group)
    share_coordinators = {cluster.leader(STATE_TOPIC, state_partition(cluster, group, topic, q)) for q in range(6)}
    elsewhere = share_coordinators - {coordinator}
    assert elsewhere, f"every share-partition's state is at the group's coordinator {coordinator}"

    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
    c.subscribe([topic])
    try:
        described = ShareGroupDescribeRequest(group_ids=[group])
        cluster.wait_for(lambda: not c.poll(0.2) and at_group_coordinator(  # (acknowledged: nothing comes)
            cluster, group, described, 1).groups[0].members, 30, f"a member in {group}")
        resp = at_group_coordinator(cluster, group, DeleteGroupsRequest(groups_names=[group]), 2)
        assert resp.results[0].error_code == EC.NON_EMPTY_GROUP
    finally:
        c.close()

    def delete() -> None:
        out = kafkafast("share-groups", "--bootstrap-server", cluster.bootstrap, "--delete", "--group", group).stdout
        assert out.strip() == f"Deletion of requested share groups ('{group}') was successful."

    delete()
    assert accept_everything(cluster, group, topic, values) == dict.fromkeys(values, 1)
    delete()
    restarted = min(elsewhere)
    cluster.brokers[restarted].restart()
    cluster.wait_for(lambda: all(cluster.leader(topic, q) >= 0 for q in range(6)) and all(
        cluster.leader(STATE_TOPIC, i) >= 0 for i in range(int(SETTINGS["share.coordinator.state.topic.num.partitions"]))),
        30, f"leaders of {topic} and {STATE_TOPIC} after broker {restarted} restarted")
    assert accept_everything(cluster, group, topic, values) == dict.fromkeys(values, 1)


def test_share_groups_command_describes_a_group_across_the_cluster(share_cluster):
    cluster = share_cluster
    cluster.create_topic("cq-cli", 3, 3)
    group = f"csg-{uuid.uuid4().hex[:8]}"
    set_everywhere(cluster, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    for i in range(30):
        p.produce("cq-cli", value=b"v", partition=i % 3)
    assert p.flush(30) == 0
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
    c.subscribe(["cq-cli"])
    n = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and n < 30:
            n += sum(1 for m in c.poll(0.5) if m.error() is None)
        c.poll(0.5)  # accepts the last records
        out = kafkafast("share-groups", "--bootstrap-server", cluster.bootstrap, "--describe", "--group", group)
    finally:
        c.close()
    rows = [r.split() for r in out.stdout.splitlines()[1:] if r.strip()]
    # The start offsets come from the share coordinators of the three keys (on several brokers).
    assert sorted((r[1], r[2], r[3], r[4]) for r in rows) == [("cq-cli", str(p), "10", "0") for p in range(3)]


def test_a_group_config_set_through_any_broker_is_in_force_on_every_broker(share_cluster):
    """share.auto.offset.reset=earliest set through a broker that is neither the group's
    coordinator nor the partition's leader: every broker (every worker) describes it, also one
    restarted since (read from ZooKeeper when it starts), and a share consumer of the fresh group
    gets the records produced before it joined (with the default 'latest', none); deleted through
    another broker, every broker describes the default again."""
    cluster = share_cluster
    topic = "cq-group-configs"
    cluster.create_topic(topic, 1, 3)
    group = f"csg/{uuid.uuid4().hex[:8]}"  # a '/' in a group id: URL-encoded in its znode's name
    coordinator = cluster.wait_for(lambda: [n for n in [group_coordinator(cluster, group)] if n > 0], 30,
                                   f"{group}'s coordinator")[0]
    via = next(n for n in cluster.brokers if n not in (coordinator, cluster.leader(topic, 0)))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    values = {f"r-{i}".encode() for i in range(5)}
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    assert described_group_configs(cluster.brokers[via].port, group)["share.auto.offset.reset"] == (
        "latest", DEFAULT_CONFIG)
    alter_group_configs(cluster.brokers[via].port, group, share_auto_offset_reset="earliest")
    earliest = {"share.auto.offset.reset": ("earliest", GROUP_CONFIG),
                "share.record.lock.duration.ms": (SETTINGS["group.share.record.lock.duration.ms"], DEFAULT_CONFIG)}
    described_everywhere(cluster, group, earliest, f"{group}'s share.auto.offset.reset=earliest at every broker")
    stored = cluster.zk().get("/config/groups/" + group.replace("/", "%2F"))[0]  # Kafka's ZooKeeper layout
    assert json.loads(stored) == {"version": 1, "config": {"share.auto.offset.reset": "earliest"}}
    cluster.brokers[via].restart()
    cluster.wait_for(lambda: all(described_group_configs(cluster.brokers[via].port, group)[n] == v
                                 for n, v in earliest.items() for _ in range(4)), 30,
                     f"broker {via} describing {group}'s configs after its restart")
    assert values_consumed(cluster, group, topic, values, 60) == values
    other = next(n for n in cluster.brokers if n != via)
    alter_group_configs(cluster.brokers[other].port, group, share_auto_offset_reset=None)
    described_everywhere(cluster, group, {"share.auto.offset.reset": ("latest", DEFAULT_CONFIG)},
                         f"{group}'s share.auto.offset.reset back to the default at every broker")


def test_a_new_share_partition_starts_where_the_group_config_stored_now_says(share_cluster):
    """A new share-partition reads its group's configs from ZooKeeper before it starts where
    share.auto.offset.reset says, not only the copy its leader keeps from change notifications:
    a client that set it through another broker and subscribed at once can reach the leader
    before the notification does (librdkafka's share tests did, 3 of 13 in a 3-broker cluster).
    Here the entry is written with no notification at all, so the leader's copy never has it."""
    cluster = share_cluster
    topic = f"cq-config-now-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 1, 3)
    group = f"csg-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    values = {f"r-{i}".encode() for i in range(3)}
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    cluster.zk().create("/config/groups/" + group, json.dumps(  # Kafka's ZooKeeper layout
        {"version": 1, "config": {"share.auto.offset.reset": "earliest"}}).encode(), makepath=True)
    leader = cluster.brokers[cluster.leader(topic, 0)]
    assert described_group_configs(leader.port, group)["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG)
    assert values_consumed(cluster, group, topic, values, 20) == values


def test_share_coordinators_writing_to_each_other_answer_at_once(share_cluster):
    """Several share consumers acknowledging records one at a time (a commit_sync each) on two
    share-partitions whose leaders are each other's share coordinators for the group: each
    broker's WriteShareGroupState handler answers once its own appends are replicated, not once
    this broker's writes to the other coordinator are answered too (that one's handler waiting
    likewise for this one: a cycle over the two inter-broker connections, broken only by the
    35 s timeout, the acknowledgements then failing and the records coming again). Every record
    is accepted once, in seconds."""
    cluster = share_cluster
    topics = [f"cq-crossed-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    tids: dict[str, bytes] = {}
    for topic in topics:
        cluster.create_topic(topic, 3, 3)
        with RawClient(next(iter(cluster.brokers.values())).port, timeout=30) as rc:
            tids[topic] = bytes(rc.request(MetadataRequest(topics=[
                MetadataRequest.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id)
    candidates = [(topic, q) for topic in topics for q in range(3)]
    cluster.wait_for(lambda: all(cluster.leader(*tp) >= 0 for tp in candidates), 30, f"leaders of {topics}")
    leaders = {tp: cluster.leader(*tp) for tp in candidates}
    indexes = range(int(SETTINGS["share.coordinator.state.topic.num.partitions"]))
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"csg-{uuid.uuid4().hex[:8]}", **QUIET})
    c.subscribe(topics)  # (so the share coordinators' topic exists)
    try:
        cluster.wait_for(lambda: not c.poll(0.2) and all(cluster.leader(STATE_TOPIC, i) >= 0 for i in indexes),
                         30, f"leaders of {STATE_TOPIC}")
    finally:
        c.close()
    state_leaders = {i: cluster.leader(STATE_TOPIC, i) for i in indexes}

    def index_of(group: str, tp: tuple[str, int]) -> int:
        return (java_string_hash(coordinator_key(group, tids[tp[0]], tp[1])) & 0x7FFFFFFF) % len(state_leaders)

    # a group and two partitions whose share-partitions' states are each at the other's leader
    group, pair = next((g, (a, b)) for g in (f"csg-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                       for a in candidates for b in candidates if leaders[a] != leaders[b]
                       and (state_leaders[index_of(g, a)], state_leaders[index_of(g, b)]) == (leaders[b], leaders[a]))
    set_everywhere(cluster, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 4, **QUIET})
    values = {f"r-{i}".encode() for i in range(240)}  # in batches of a few: acquired a few at a time
    for i, v in enumerate(sorted(values)):
        p.produce(pair[i % 2][0], value=v, partition=pair[i % 2][1])
    assert p.flush(30) == 0

    got: dict[bytes, int] = {}
    failed: list = []
    lock = threading.Lock()

    def consume() -> None:
        c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "max.poll.records": 4,
                           "share.acknowledgement.mode": "explicit", **QUIET})
        c.subscribe(topics)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(got) < len(values) and not failed:
                for m in c.poll(0.3):
                    if m.error() is None:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                        errors = [e for e in c.commit_sync(30).values() if e is not None]
                        with lock:
                            failed.extend(errors)
                            got[m.value()] = max(got.get(m.value(), 0), m.delivery_count())
        finally:
            c.close()

    threads = [threading.Thread(target=consume) for _ in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not failed
    assert got == dict.fromkeys(values, 1)
    assert time.monotonic() - started < 30  # no write waited for a timeout


def leader_metadata(cluster, topic: str) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, replicas) of the topic's partition 0 as its leader's Metadata says."""
    with RawClient(cluster.brokers[cluster.leader(topic, 0)].port, timeout=30) as rc:
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
        p = rc.request(req, 9).topics[0].partitions[0]
    return p.leader_id, p.leader_epoch, list(p.replica_nodes)


def test_a_leader_epoch_bump_keeping_the_leader_keeps_the_share_partition(share_cluster, tmp_path):
    """The leader epoch bumped while the leader stays (here a reassignment onto the same
    replicas; the ZooKeeper controller bumps it so too when a follower dies and leaves the ISR):
    the leader keeps its share-partition, not reading the state again from the share
    coordinator (which lacks what is still being written, so acknowledgements were lost and
    accepted records delivered again): the records a member holds stay its own, another member
    gets none of them, and its acceptance of them is answered without error."""
    cluster = share_cluster
    topic = f"cq-bump-{uuid.uuid4().hex[:6]}"
    group, values = records_for_a_new_group(cluster, topic, 1, 10)
    set_everywhere(cluster, group, share_record_lock_duration_ms="30000")  # a's records stay locked
    a = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **QUIET})
    b = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **QUIET})
    a.subscribe([topic])
    try:
        held = cluster.wait_for(lambda: a.poll(0.5) or None, 30, "a's records")
        assert sorted(m.value() for m in held) == sorted(values)
        leader, epoch, replicas = leader_metadata(cluster, topic)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                                   "replicas": replicas}]}))
        kafkafast("reassign", "--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file",
                  str(plan))
        moved = cluster.wait_for(lambda: (m := leader_metadata(cluster, topic))[1] >= epoch + 2 and m, 30,
                                 f"{topic}'s leader epoch bumped twice")  # the reassignment's start and end
        assert moved[0] == leader
        b.subscribe([topic])

        def b_gets(seconds: float) -> list[tuple[bytes, int]]:
            got: list = []
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not got:
                got = [(m.value(), m.delivery_count()) for m in poll_through_a_kill(b, 0.3)]
            return got

        assert b_gets(4) == []  # a's records stayed acquired by a
        for m in held:
            a.acknowledge(m, AcknowledgeType.ACCEPT)
        assert [e for e in a.commit_sync(30).values() if e is not None] == []
        assert b_gets(2) == []
    finally:
        a.close()
        b.close()


def test_the_group_coordinator_moving_keeps_the_share_group(share_cluster):
    """The broker leading a share group's `__consumer_offsets` partition SIGKILLed (here not the
    topic's leader): the new coordinator loads the group from the log, its epoch, members and
    their subscriptions (DescribeShareGroup at the new coordinator; a member's epoch never
    moves back); the member heartbeating on keeps consuming, a new member joins beside it, the
    share-partition keeps its start offset, and no accepted record is delivered again, none
    produced after the move is lost. A member that has not heartbeated since the last epoch
    bump is accepted with its own epoch by the new coordinator (its epoch was stored,
    ShareGroupCurrentMemberAssignment), not fenced."""
    cluster = share_cluster
    topic = f"cq-moved-{uuid.uuid4().hex[:6]}"
    group, first = records_for_a_new_group(cluster, topic, 1, 10)
    leader = cluster.leader(topic, 0)
    while group_coordinator(cluster, group) in (leader, -1):  # the coordinator alone goes
        group = f"csg-{uuid.uuid4().hex[:8]}"
        set_everywhere(cluster, group, share_auto_offset_reset="earliest")
    described = ShareGroupDescribeRequest(group_ids=[group])
    a = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **QUIET})
    a.subscribe([topic])
    consumers = [a]
    got: dict[bytes, list[int]] = {}

    def poll_and_accept(c: ShareConsumer) -> None:
        msgs = poll_through_a_kill(c, 0.3)
        for m in msgs:
            got.setdefault(m.value(), []).append(m.delivery_count())
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if msgs:
            c.commit_sync(30)

    killed = -1
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and set(got) != set(first):
            poll_and_accept(a)
        assert set(got) == set(first)
        passing = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
        passing.subscribe([topic])  # a member joining and leaving: the group epoch at 3
        try:
            cluster.wait_for(lambda: not passing.poll(0.2) and len(at_group_coordinator(
                cluster, group, described, 1).groups[0].members) == 2, 30, f"a second member in {group}")
        finally:
            passing.close()
        before = cluster.wait_for(lambda: not a.poll(0.2) and at_group_coordinator(  # (a heartbeat of a at epoch 3)
            cluster, group, described, 1, lambda r: [m.member_epoch for m in r.groups[0].members] == [3]).groups[0],
            30, f"{group} at epoch 3")
        assert [(m.member_epoch, m.subscribed_topic_names) for m in before.members] == [(3, [topic])]
        joined = {m: at_group_coordinator(cluster, group, Heartbeat(  # raw members: "late" at 4, "bump" at 5
            group_id=group, member_id=m, member_epoch=0, subscribed_topic_names=[topic]), 1).member_epoch
            for m in ("late", "bump")}
        assert joined == {"late": 4, "bump": 5}
        killed = group_coordinator(cluster, group)  # at once: "late" stays in its session (6 s)
        cluster.brokers[killed].kill()
        cluster.wait_for(lambda: group_coordinator(cluster, group) not in (-1, killed), 30, f"a new coordinator of {group}")
        late = at_group_coordinator(cluster, group, Heartbeat(group_id=group, member_id="late", member_epoch=4), 1,
                                    lambda r: r.error_code not in LOADING)
        assert (late.error_code, late.member_epoch) == (0, 5)
        for m in joined:  # the group epoch at 7
            assert at_group_coordinator(cluster, group, Heartbeat(group_id=group, member_id=m, member_epoch=-1),
                                        1).error_code == 0
        assert start_offsets(cluster, group, topic, 1) == {0: 10}
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
        later = [f"r-{i}".encode() for i in range(10, 20)]
        for v in later:
            p.produce(topic, value=v, partition=0)
        assert p.flush(30) == 0
        b = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit", **QUIET})
        b.subscribe([topic])
        consumers.append(b)
        quiet_until = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            for c in consumers:
                poll_and_accept(c)
            if quiet_until is None and set(got) >= set(later):
                quiet_until = time.monotonic() + 1.5  # nothing else comes
        after = at_group_coordinator(cluster, group, described, 1, lambda r: len(r.groups[0].members) == 2).groups[0]
    finally:
        for c in consumers:
            c.close()
        if killed >= 0:
            cluster.brokers[killed].start()
    # each record once to the application, at delivery count 1: the accepted ones were never
    # acquired again, and the later ones' acceptance held. (The killed broker leaving the topic's
    # ISR bumps its leader epoch, the leader staying: the leader once read its share-partition
    # again from the share coordinator then, losing acknowledgements still on their way there,
    # and while the coordinator's broker was not yet replaced it answered each ShareFetch
    # NETWORK_EXCEPTION, librdkafka's queued errors holding the acquired records back past their
    # lock: the later records came twice.)
    assert got == {v: [1] for v in first + later}
    assert (after.group_epoch, after.assignment_epoch) == (8, 8)  # went on from the stored 7: one member joined
    assert before.members[0].member_id in {m.member_id for m in after.members}  # kept its membership
    assert all(m.subscribed_topic_names == [topic] and m.member_epoch == after.group_epoch for m in after.members)
