"""Registry, controller election and failover, session loss, against real ZooKeeper."""
from __future__ import annotations

import base64
import json
import os
import signal
import time

from kafkafast.protocol import api
from kafkafast.protocol._generated.alter_partition import AlterPartitionRequest
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.update_metadata import UpdateMetadataRequest
from tests.cluster.test_isr import _produce_raw, _read
from tests.support.cluster import KafkaCluster
from tests.support.raw_client import RawClient

STALE_CONTROLLER_EPOCH = 11
NOT_CONTROLLER = 41


def test_brokers_register_with_kafkas_v5_json(cluster):
    zk = cluster.zk()
    assert sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]
    for i, b in cluster.brokers.items():
        data, stat = zk.get(f"/brokers/ids/{i}")
        doc = json.loads(data)
        assert stat.ephemeralOwner != 0
        assert doc["version"] == 5
        assert doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b.port}"]
        assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert (doc["host"], doc["port"], doc["jmx_port"]) == ("127.0.0.1", b.port, -1)
        assert int(doc["timestamp"]) > 1_600_000_000_000
    cluster_id = json.loads(zk.get("/cluster/id")[0])
    assert cluster_id["version"] == "1" and len(cluster_id["id"]) == 22
    meta = (cluster.root / "broker-1" / "meta.properties").read_text()
    assert f"cluster.id={cluster_id['id']}" in meta and "broker.id=1" in meta
    controller = json.loads(zk.get("/controller")[0])
    assert controller["version"] == 1 and controller["brokerid"] in (1, 2, 3)
    assert zk.exists("/controller").ephemeralOwner != 0
    assert int(zk.get("/controller_epoch")[0]) >= 1


def test_topic_znodes_follow_kafkas_layout(cluster):
    cluster.create_topic("layout", 4, 3, {"retention.ms": "3600000"})
    zk = cluster.zk()
    doc = json.loads(zk.get("/brokers/topics/layout")[0])
    assert doc["version"] == 3 and doc["adding_replicas"] == {} and doc["removing_replicas"] == {}
    assert len(base64.urlsafe_b64decode(doc["topic_id"] + "==")) == 16
    assert sorted(doc["partitions"]) == ["0", "1", "2", "3"]
    firsts = [doc["partitions"][str(p)][0] for p in range(4)]
    for reps in doc["partitions"].values():
        assert sorted(reps) == [1, 2, 3]
    assert len(set(firsts[:3])) == 3  # round-robin leaders
    for p in range(4):
        state = cluster.partition_state("layout", p)
        assert set(state) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
        assert state["leader"] == doc["partitions"][str(p)][0] and state["leader_epoch"] == 0
        assert sorted(state["isr"]) == [1, 2, 3]
    assert json.loads(zk.get("/config/topics/layout")[0]) == {"version": 1, "config": {"retention.ms": "3600000"}}


def test_replication_factor_above_live_brokers_is_refused(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka import KafkaException

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fut = admin.create_topics([NewTopic("too-many", 1, 4)], request_timeout=20)["too-many"]
    try:
        fut.result(30)
        raise AssertionError("created")
    except KafkaException as exc:
        assert exc.args[0].name() == "INVALID_REPLICATION_FACTOR"
    assert cluster.zk().exists("/brokers/topics/too-many") is None


def test_killing_the_controller_elects_another_and_fences_the_old_epoch(cluster):
    old_id, old_epoch = cluster.controller_id(), cluster.controller_epoch()
    victim = cluster.brokers[old_id]
    killed_at = time.monotonic()
    victim.kill()
    new_id = cluster.wait_for(lambda: (c := cluster.controller_id()) not in (-1, old_id) and c, 6 + 5 + 5,
                              "a new controller")
    assert time.monotonic() - killed_at < 6 + 5 + 2
    assert cluster.controller_epoch() == old_epoch + 1
    other = next(b for i, b in cluster.brokers.items() if i != old_id)
    cluster.wait_for(lambda: _update_metadata_epoch_seen(other.port, old_epoch + 1), 15, "the new epoch announced")
    with RawClient(other.port) as rc:
        resp = rc.request(LeaderAndIsrRequest(controller_id=old_id, controller_epoch=old_epoch, broker_epoch=-1,
                                              type=0, topic_states=[], live_leaders=[]), 6)
        assert resp.error_code == STALE_CONTROLLER_EPOCH
    victim.start(timeout=60)
    cluster.wait_for(lambda: len(cluster.registered()) == 3, 30, "the old controller back")
    assert cluster.controller_id() == new_id  # it does not take over again


def _update_metadata_epoch_seen(port: int, epoch: int) -> bool:
    """True once the broker refuses an UpdateMetadata of epoch-1 (so it has seen `epoch`)."""
    with RawClient(port) as rc:
        resp = rc.request(UpdateMetadataRequest(controller_id=-1, controller_epoch=epoch - 1, broker_epoch=-1,
                                                topic_states=[], live_brokers=[]), 7)
        return resp.error_code == STALE_CONTROLLER_EPOCH


def test_session_loss_moves_leadership_and_the_broker_rejoins(cluster):
    cluster.create_topic("session", 3, 3)
    victim_id = cluster.leader("session", 0)
    victim = cluster.brokers[victim_id]
    epoch_before = cluster.partition_state("session", 0)["leader_epoch"]
    os.kill(victim.proc.pid, signal.SIGSTOP)
    try:
        cluster.wait_for(lambda: victim_id not in cluster.registered(), 6 + 10, "the stopped broker's session expiry")
        cluster.wait_for(lambda: cluster.leader("session", 0) not in (-1, victim_id), 15, "a new leader")
        state = cluster.partition_state("session", 0)
        assert state["leader_epoch"] > epoch_before and victim_id not in state["isr"]
    finally:
        os.kill(victim.proc.pid, signal.SIGCONT)
    cluster.wait_for(lambda: victim_id in cluster.registered(), 30, "re-registration after SIGCONT")
    cluster.wait_for(lambda: all(victim_id in cluster.partition_state("session", p)["isr"] for p in range(3)), 40,
                     "the broker back in every ISR")
    assert cluster.leader("session", 0) != victim_id


def test_a_controller_whose_session_expired_answers_a_queued_alter_partition_at_once_and_logs_no_error(cluster):
    """An AlterPartition waiting at a controller (SIGSTOPped) past its session: on waking, the
    queued events are dropped as expected (INFO lines, no ERROR traceback) and the request
    is answered NOT_CONTROLLER at once, not left to the asker's request timeout."""
    c = cluster
    ctrl = c.controller_id()
    leader, follower = [b for b in sorted(c.brokers) if b != ctrl]
    topic = "expired-controller"
    c.create_topic(topic, 1, 3, assignment=[[leader, follower, ctrl]])
    zk = c.zk()
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    R = AlterPartitionRequest
    req = R(broker_id=leader, broker_epoch=zk.exists(f"/brokers/ids/{leader}").czxid, topics=[R.TopicData(
        topic_name=topic, partitions=[R.PartitionData(
            partition_index=0, leader_epoch=json.loads(data)["leader_epoch"], new_isr=[leader, follower],
            leader_recovery_state=0, partition_epoch=stat.version)])])
    victim = c.brokers[ctrl]
    mark = victim.log_path.stat().st_size
    os.kill(victim.proc.pid, signal.SIGSTOP)
    rc = RawClient(victim.port, timeout=30)  # the kernel takes the connection and the request meanwhile
    try:
        rc.send_raw(api.encode_request(req, 1, 7, "alter-partition-test"))
        c.wait_for(lambda: ctrl not in c.registered(), 6 + 10, "the stopped controller's session expiry")
        c.wait_for(lambda: c.controller_id() not in (-1, ctrl), 15, "another controller")
    finally:
        os.kill(victim.proc.pid, signal.SIGCONT)
    woke = time.monotonic()
    try:
        frame = rc.recv_frame()
    finally:
        rc.close()
    waited = time.monotonic() - woke
    assert frame is not None
    correlation, resp = api.decode_response(56, 1, frame)
    assert (correlation, resp.error_code) == (7, NOT_CONTROLLER)
    assert waited < 5, f"answered after {waited:.1f} s"
    c.wait_for(lambda: ctrl in c.registered(), 30, "the old controller registered again")
    c.wait_for(lambda: sorted(c.isr(topic, 0)) == sorted([leader, follower, ctrl]), 30, "it rejoined the ISR")
    with open(victim.log_path, "rb") as fh:
        fh.seek(mark)
        lines = fh.read().decode(errors="replace").splitlines()
    assert [line for line in lines if " ERROR " in line or "Traceback" in line] == []
    assert any("INFO kafkafast.controller: controller %d: ZooKeeper session expired" % ctrl in line for line in lines)


def test_a_log_dir_of_another_cluster_refuses_to_start(cluster, tmp_path):
    from tests.support.broker_process import BrokerProcess

    data = tmp_path / "foreign"
    data.mkdir()
    (data / "meta.properties").write_text("version=0\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nbroker.id=9\n")
    b = BrokerProcess(data, settings=cluster.broker_settings(9))
    try:
        b.start(timeout=30)
        raise AssertionError("a broker of another cluster started")
    except RuntimeError as exc:
        assert "doesn't match stored clusterId AAAAAAAAAAAAAAAAAAAAAA" in str(exc)
    finally:
        b.kill()
    assert 9 not in cluster.registered()


def test_create_partitions_configs_and_delete_topics_across_the_cluster(cluster):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

    cluster.create_topic("admin", 2, 2)
    first = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    first.create_partitions([NewPartitions("admin", 4)], request_timeout=20)["admin"].result(30)
    zk = cluster.zk()
    cluster.wait_for(lambda: len(json.loads(zk.get("/brokers/topics/admin")[0])["partitions"]) == 4, 10,
                     "four partitions assigned")
    cluster.wait_for(lambda: all(zk.exists(f"/brokers/topics/admin/partitions/{p}/state") for p in range(4)), 15,
                     "states of the new partitions")
    third = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
    cluster.wait_for(lambda: len(third.list_topics("admin", timeout=10).topics["admin"].partitions) == 4, 15,
                     "broker 3 announcing four partitions")

    res = ConfigResource(ConfigResource.Type.TOPIC, "admin", set_config={"retention.ms": "123456"})
    first.alter_configs([res], request_timeout=20)[res].result(30)
    assert json.loads(zk.get("/config/topics/admin")[0])["config"]["retention.ms"] == "123456"
    changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "topics/admin"} in changes

    def described_on_third() -> bool:
        r = ConfigResource(ConfigResource.Type.TOPIC, "admin")
        return third.describe_configs([r], request_timeout=20)[r].result(30)["retention.ms"].value == "123456"
    cluster.wait_for(described_on_third, 15, "broker 3 seeing the new config")

    first.delete_topics(["admin"], request_timeout=20)["admin"].result(30)
    # the controller removes the topic znode, then its config, then the deletion marker (Kafka's order)
    cluster.wait_for(lambda: zk.exists("/brokers/topics/admin") is None and zk.exists("/config/topics/admin") is None
                     and zk.get_children("/admin/delete_topics") == [], 15,
                     "the topic, config and deletion-marker znodes removed")
    cluster.wait_for(lambda: not any(any((cluster.root / f"broker-{i}").glob("admin-*")) for i in (1, 2, 3)),
                     15, "the partition directories removed everywhere")
    cluster.wait_for(lambda: "admin" not in third.list_topics(timeout=10).topics, 15, "the topic gone from metadata")


def test_create_and_delete_topics_answer_once_the_answering_brokers_metadata_shows_it(cluster):
    """As Kafka: CreateTopics answers once every new partition has a leader in the answering
    broker's metadata, DeleteTopics once the topic is gone from it (so a client acting on the answer
    finds the change), each bounded by the request's timeout_ms; timeout_ms 0 answers at once."""
    from kafkafast.protocol._generated.create_topics import CreateTopicsRequest as C
    from kafkafast.protocol._generated.delete_topics import DeleteTopicsRequest as D

    def metadata(port: int, topic: str):
        with RawClient(port) as rc:
            return rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                              allow_auto_topic_creation=False), 9).topics[0]

    for via in (1, 2, 3):
        port, topic = cluster.brokers[via].port, f"answered-{via}"
        with RawClient(port) as rc:
            created = rc.request(C(topics=[C.CreatableTopic(name=topic, num_partitions=6, replication_factor=3,
                                                             assignments=[], configs=[])], timeout_ms=30000), 4)
        assert created.topics[0].error_code == 0
        md = metadata(port, topic)  # at once, on the broker that answered
        assert md.error_code == 0 and len(md.partitions) == 6 and all(p.leader_id > 0 for p in md.partitions)
        with RawClient(port) as rc:
            deleted = rc.request(D(topic_names=[topic], timeout_ms=30000), 4)
        assert deleted.responses[0].error_code == 0
        assert metadata(port, topic).error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION at once
    with RawClient(cluster.brokers[1].port) as rc:  # timeout_ms 0: no wait, the creation goes on
        assert rc.request(C(topics=[C.CreatableTopic(name="unwaited", num_partitions=1, replication_factor=3,
                                                     assignments=[], configs=[])], timeout_ms=0), 4
                          ).topics[0].error_code == 0
    cluster.wait_for(lambda: cluster.leader("unwaited") > 0, 15, "a leader of the topic created without waiting")


def test_broker_id_generation_through_brokers_seqid(cluster, tmp_path):
    from tests.support.broker_process import BrokerProcess

    settings = {**cluster.broker_settings(0), "broker.id": "-1"}
    b = BrokerProcess(tmp_path / "generated", settings=settings)
    try:
        b.start(timeout=60)
        zk = cluster.zk()
        generated = cluster.wait_for(lambda: [i for i in cluster.registered() if i > 1000], 20, "a generated id")
        assert generated == [1000 + zk.exists("/brokers/seqid").version]
        assert f"broker.id={generated[0]}" in (tmp_path / "generated" / "meta.properties").read_text()
        assert b.stop() == 0
        cluster.wait_for(lambda: cluster.registered() == [1, 2, 3], 15, "the generated broker gone")
        b.start(timeout=60)  # the id is kept in meta.properties
        cluster.wait_for(lambda: generated[0] in cluster.registered(), 20, "the same id again")
    finally:
        b.stop()
    cluster.wait_for(lambda: cluster.registered() == [1, 2, 3], 15, "back to three brokers")


def _topic_config_on(port: int, topic: str, name: str) -> tuple[str, int]:
    """(value, source) of a topic's config as one broker reports it (a client would ask any
    broker; the test asks each)."""
    from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest as D

    with RawClient(port, timeout=30) as rc:
        r = rc.request(D(resources=[D.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                              configuration_keys=[name])],
                         include_synonyms=False, include_documentation=False), 3).results[0]
    assert r.error_code == 0, r.error_message
    return r.configs[0].value, r.configs[0].config_source


def _alter_broker_on(port: int, name: str, configs: dict[str, str | None], validate_only: bool = False):
    """IncrementalAlterConfigs of broker resource `name` sent to the broker at `port` (SET, or
    DELETE for None): Kafka's admin client would send a broker's own resource to that broker
    and cannot name the cluster-wide default ""; any broker takes both here."""
    from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC

    with RawClient(port, timeout=30) as rc:
        return rc.request(IAC(validate_only=validate_only, resources=[IAC.AlterConfigsResource(
            resource_type=4, resource_name=name, configs=[
                IAC.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v)
                for k, v in configs.items()])]), 1).responses[0]


def test_dynamic_broker_configs_live_in_zookeeper_and_apply_on_every_broker(cluster):
    """Kafka's ZooKeeper mode: AlterConfigs on broker "" or "<id>" (any broker takes it) write
    /config/brokers/<default> or /<id> and a change notification; every broker applies its own
    entry over the default (topic defaults, connection quotas), DescribeConfigs shows them with
    their dynamic source, a restarted broker reads them back; validate_only and refused names
    write nothing."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from tests.security.test_dynamic_connection_limits import close_all, eventually_open_until_refused
    from tests.support.cli import kafkafast

    zk = cluster.zk()
    b1, b2, b3 = (cluster.brokers[i] for i in (1, 2, 3))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def broker_entry(broker_id: str, name: str):
        (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker_id)]).values()
        return fut.result(30)[name]

    def changes() -> list:
        return sorted(zk.get_children("/config/changes"))

    try:
        # the cluster-wide default, sent to broker 1
        assert _alter_broker_on(b1.port, "", {"log.retention.ms": "7200000", "max.connections.per.ip": "3",
                                              "max.connections.per.ip.overrides": "127.0.0.1:100"}).error_code == 0
        assert json.loads(zk.get("/config/brokers/<default>")[0]) == {"version": 1, "config": {
            "log.retention.ms": "7200000", "max.connections.per.ip": "3",
            "max.connections.per.ip.overrides": "127.0.0.1:100"}}
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes()]
        assert {"version": 2, "entity_path": "brokers/<default>"} in notes
        # broker 2's own value, set with a real client (routed to broker 2) ...
        entry = ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "2",
                                                                 incremental_configs=[entry])]).values()
        fut.result(30)
        # ... and broker 3's, written through broker 1
        assert _alter_broker_on(b1.port, "3", {"message.max.bytes": "5000"}).error_code == 0
        assert json.loads(zk.get("/config/brokers/2")[0])["config"] == {"log.retention.ms": "3600000"}
        assert json.loads(zk.get("/config/brokers/3")[0])["config"] == {"message.max.bytes": "5000"}

        cluster.create_topic("dynamic", 1, 3, assignment=[[3, 1, 2]])
        expected = {b1.port: ("7200000", 3), b2.port: ("3600000", 2), b3.port: ("7200000", 3)}
        cluster.wait_for(lambda: all(_topic_config_on(p, "dynamic", "retention.ms") == v for p, v in expected.items()),
                         15, "each broker's retention.ms default with its source")
        e = broker_entry("2", "log.retention.ms")
        assert (e.value, e.source, e.is_read_only) == ("3600000", ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                                                       False)
        e = broker_entry("1", "log.retention.ms")
        assert (e.value, e.source) == ("7200000", ck.admin.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        # the operator CLI: a broker's configs go to that broker, --entity-default to any
        for target, value, source in ((["--entity-name", "2"], "3600000", "DYNAMIC_BROKER_CONFIG"),
                                      (["--entity-default"], "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")):
            shown = {e["name"]: e for e in json.loads(kafkafast(
                "configs", "--bootstrap-server", b1.bootstrap, "--entity-type", "brokers", *target, "--describe",
                "--output", "json").stdout)}
            assert (shown["log.retention.ms"]["value"], shown["log.retention.ms"]["source"]) == (value, source)
        # broker 3, the leader, applies its message.max.bytes to the topic's log
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        results: list = []
        for size in (1000, 10000):
            producer.produce("dynamic", b"x" * size, on_delivery=lambda err, msg: results.append(err))
            producer.flush(30)
        assert results[0] is None and results[1].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, results

        # the connection quota set through broker 1 holds on broker 2
        capped = eventually_open_until_refused(b2.port, 6, 3)
        assert capped[-1] is None
        close_all(capped)

        # validate_only and refused names write nothing
        before = (zk.get("/config/brokers/<default>")[0], changes())
        assert _alter_broker_on(b2.port, "", {"log.retention.ms": "1000"}, validate_only=True).error_code == 0
        for bad in ({"broker.id": "7"}, {"log.dirs": "/tmp/x"}, {"no.such.config": "1"}):
            assert _alter_broker_on(b2.port, "", bad).error_code == 42, bad  # INVALID_REQUEST
        assert _alter_broker_on(b2.port, "", {"log.retention.ms": "soon"}).error_code == 40  # INVALID_CONFIG
        assert _alter_broker_on(b2.port, "9", {"log.retention.ms": "1000"}).error_code == 42  # no broker 9
        assert (zk.get("/config/brokers/<default>")[0], changes()) == before

        # a restarted broker reads its entries back
        b2.kill()
        b2.start(timeout=60)
        cluster.wait_for(lambda: 2 in cluster.registered() and cluster.metadata_ready(), 30, "broker 2 back")
        assert _topic_config_on(b2.port, "dynamic", "retention.ms") == ("3600000", 2)
        close_all(eventually_open_until_refused(b2.port, 6, 3))
    finally:
        kafkafast("configs", "--bootstrap-server", b1.bootstrap, "--entity-type", "brokers", "--entity-default",
                  "--alter", "--delete-config", "log.retention.ms,max.connections.per.ip,max.connections.per.ip.overrides")
        for i in ("2", "3"):
            _alter_broker_on(b1.port, i, {"log.retention.ms": None, "message.max.bytes": None})
    close_all(eventually_open_until_refused(b2.port, 6, 6))  # the cap is gone again
    cluster.wait_for(lambda: _topic_config_on(b2.port, "dynamic", "retention.ms")[1] == 5, 15,
                     "the default back on broker 2")


def _known_leader(port: int, topic: str) -> int | None:
    """The partition's leader as the broker's metadata has it (None: the broker does not know
    the topic yet, i.e. has not had the controller's UpdateMetadata)."""
    with RawClient(port) as rc:
        t = rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False), 9).topics[0]
    return t.partitions[0].leader_id if t.error_code == 0 and t.partitions else None


def test_an_offline_partition_keeps_only_its_last_isr_member_and_only_that_replica_leads_it_again(tmp_path):
    """Kafka's rule: a partition whose ISR members all died keeps leader -1 and the last ISR
    member, so that without unclean election only the replica that surely has everything
    leads it again. Here the leader and its in-sync follower die with the controller (no
    controller sees them go); the leader had taken a record at acks=1 the follower never got."""
    with KafkaCluster(tmp_path) as c:  # a cluster of its own: every broker stops
        leader, follower, other = 1, 2, 3
        topic = "last-isr"
        c.create_topic(topic, 1, 2, assignment=[[leader, follower]])
        assert _produce_raw(c.brokers[leader].port, topic, [b"committed"]) == (0, 0)
        os.killpg(c.brokers[follower].proc.pid, signal.SIGSTOP)  # in the ISR, but it fetches nothing more
        assert _produce_raw(c.brokers[leader].port, topic, [b"only-on-the-leader"], acks=1) == (0, 1)
        for b in c.brokers.values():
            b.kill()
        c.wait_for(lambda: c.registered() == [], 6 + 15, "every broker's session expired")
        assert sorted(c.isr(topic, 0)) == [leader, follower]  # nobody was left to change it
        c.brokers[other].start(timeout=60)  # the new controller: neither ISR member is alive
        c.wait_for(lambda: c.leader(topic, 0) == -1, 30, "the partition offline")
        assert c.isr(topic, 0) == [leader]  # the former leader is the last member

        c.brokers[follower].start(timeout=60)
        # once it knows the topic, the controller has decided about it: no leader
        assert c.wait_for(lambda: (known := _known_leader(c.brokers[follower].port, topic)) is not None and [known],
                          30, "the follower's UpdateMetadata") == [-1]
        assert (c.leader(topic, 0), c.isr(topic, 0)) == (-1, [leader])

        c.brokers[leader].start(timeout=60)
        c.wait_for(lambda: c.leader(topic, 0) == leader, 30, "the last ISR member leading")
        c.wait_for(lambda: sorted(c.isr(topic, 0)) == [leader, follower], 30, "the follower back in the ISR")
        assert [v for _, v in _read(c.bootstrap, topic)] == [b"committed", b"only-on-the-leader"]


def test_create_partitions_places_the_new_partitions_as_assigned(cluster):
    """CreatePartitions with a replica assignment (librdkafka's 0081_admin does this): the new
    partitions get exactly the replicas asked for, and they lead and take records; an assignment
    naming an unregistered broker, or of another length than the replication factor, is refused."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions

    cluster.create_topic("manual-parts", 2, 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for bad, why in (([[1, 9]], "unregistered broker"), ([[1, 2, 3]], "three replicas for RF 2"),
                     ([[1, 2], [2, 3]], "two lists for one new partition")):
        fut = admin.create_partitions([NewPartitions("manual-parts", 3, replica_assignment=bad)])["manual-parts"]
        try:
            fut.result(30)
            raise AssertionError(f"accepted: {why}")
        except KafkaException as exc:
            assert exc.args[0].name() == "INVALID_REPLICA_ASSIGNMENT", (why, exc)
    admin.create_partitions([NewPartitions("manual-parts", 4, replica_assignment=[[3, 1], [2, 3]])])[
        "manual-parts"].result(30)
    assignment = json.loads(cluster.zk().get("/brokers/topics/manual-parts")[0])["partitions"]
    assert (assignment["2"], assignment["3"]) == ([3, 1], [2, 3])
    cluster.wait_for(lambda: [cluster.leader("manual-parts", p) for p in (2, 3)] == [3, 2], 30,
                     "the new partitions led by their first replicas")

    def listed_everywhere() -> bool:  # every broker's cache has them (a producer asks any broker)
        for b in cluster.brokers.values():
            with RawClient(b.port) as rc:
                topic = rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="manual-parts")],
                                                   allow_auto_topic_creation=False), 9).topics[0]
            if sorted((p.partition_index, p.leader_id) for p in topic.partitions)[2:] != [(2, 3), (3, 2)]:
                return False
        return True

    cluster.wait_for(listed_everywhere, 30, "every broker's Metadata listing the new partitions")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    delivered = []
    for part in (2, 3):
        p.produce("manual-parts", b"v", partition=part, on_delivery=lambda e, m: delivered.append((e, m.partition())))
    p.flush(30)
    assert sorted((e is None, part) for e, part in delivered) == [(True, 2), (True, 3)]


def test_client_quotas_live_in_zookeeper_and_every_broker_enforces_them(cluster):
    """AlterClientQuotas through one broker writes Kafka's /config/clients/<id> (with a change
    notification); every broker describes it and throttles that client, and removing it there
    removes it everywhere."""
    from confluent_kafka import Producer

    from kafkafast.protocol._generated.alter_client_quotas import AlterClientQuotasRequest as AQ
    from kafkafast.protocol._generated.describe_client_quotas import DescribeClientQuotasRequest as DQ

    def alter(port: int, value: float | None) -> int:
        op = AQ.OpData(key="producer_byte_rate", value=value or 0.0, remove=value is None)
        with RawClient(port) as rc:
            resp = rc.request(AQ(entries=[AQ.EntryData(
                entity=[AQ.EntityData(entity_type="client-id", entity_name="capped")], ops=[op])]), 1)
        return resp.entries[0].error_code

    def described(port: int) -> list:
        with RawClient(port) as rc:
            resp = rc.request(DQ(components=[DQ.ComponentData(entity_type="client-id", match_type=0, match="capped")],
                                 strict=False), 1)
        return [(v.key, v.value) for e in resp.entries or [] for v in e.values]

    first, *others = sorted(cluster.brokers)
    assert alter(cluster.brokers[first].port, 20_000.0) == 0
    stored = json.loads(cluster.zk().get("/config/clients/capped")[0])
    assert stored["config"] == {"producer_byte_rate": "20000.0"}
    for b in cluster.brokers.values():
        cluster.wait_for(lambda: described(b.port) == [("producer_byte_rate", 20000.0)], 15,
                         f"broker {b} describing the quota")
    cluster.create_topic("quota-everywhere", 1, 1, assignment=[[others[-1]]])
    throttles: list[int] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": "capped", "acks": 1, "linger.ms": 5,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    for _ in range(20):
        p.produce("quota-everywhere", b"q" * 20_000)
        p.poll(0)
    p.flush(60)
    assert any(t > 0 for t in throttles), "the leader did not throttle the capped client"
    assert alter(cluster.brokers[others[0]].port, None) == 0
    for b in cluster.brokers.values():
        cluster.wait_for(lambda: described(b.port) == [], 15, f"broker {b} dropping the quota")
