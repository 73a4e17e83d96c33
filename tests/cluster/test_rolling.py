"""Rolling operations on three brokers: controlled shutdown (SIGTERM) during a rolling restart
under an idempotent acks=all producer and a consumer group, preferred and unclean leader
election (ElectLeaders, `kafkafast cluster leader-election`)."""
from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.cluster.test_durability import _read_all
from tests.cluster.test_isr import _log_end
from tests.integration.test_metrics import scrape, value
from tests.support.acked_producer import AckedProducer
from tests.support.broker_process import free_port
from tests.support.cli import kafkafast
from tests.support.cluster import KafkaCluster

TOPIC = "rolling"
PARTITIONS = 6


class MetricsCluster(KafkaCluster):
    """Each broker serves /metrics on a port of its own (kept across restarts)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.metrics_ports = {i: free_port() for i in range(1, self.size + 1)}

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        return {**super().broker_settings(broker_id), "metrics.port": str(self.metrics_ports[broker_id]),
                "metrics.host": "127.0.0.1"}

    def metric(self, broker_id: int, name: str) -> float:
        return value(scrape(self.metrics_ports[broker_id]), name)


@pytest.fixture(scope="module")
def rolling_cluster(tmp_path_factory):
    """Three brokers; auto.leader.rebalance.enable=false so elections here are the tests' own;
    replicas throttled by a reassignment's --throttle replicate at 500 kB/s (each side)."""
    c = MetricsCluster(tmp_path_factory.mktemp("rolling"), settings={"auto.leader.rebalance.enable": "false",
                                                                   "follower.replication.throttled.rate": "500000",
                                                                   "leader.replication.throttled.rate": "500000"})
    try:
        yield c.start()
    finally:
        c.close()


def _assignment(c: KafkaCluster, topic: str) -> dict[int, list[int]]:
    data, _ = c._zk().get(f"/brokers/topics/{topic}")
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


def _read_log(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every record's value per partition, checked to have no offset gaps."""
    out = _read_all(bootstrap, topic, partitions)
    for p, recs in out.items():
        assert [o for o, _ in recs] == list(range(len(recs))), f"gap in partition {p}"
    return {p: [v for _, v in recs] for p, recs in out.items()}


def check_every_ack_stored_once(bootstrap: str, prod: AckedProducer, at_least: int) -> list[bytes]:
    """The producer saw no error and at least `at_least` acks; the log holds every acked
    value, none twice, with no offset gap. The acked values."""
    assert prod.delivery_errors == [] and prod.fatal == []
    assert len(prod.acked) >= at_least, len(prod.acked)
    stored = _read_log(bootstrap, prod.topic, prod.partitions)
    all_stored = [v for vs in stored.values() for v in vs]
    assert len(all_stored) == len(set(all_stored)), "a record was written twice"
    assert set(prod.acked) <= set(all_stored), "an acknowledged record was lost"
    return prod.acked


def test_rolling_restart_with_controlled_shutdown_loses_and_duplicates_nothing(rolling_cluster):
    c = rolling_cluster
    c.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    prod = AckedProducer(c.bootstrap, TOPIC, PARTITIONS)

    consumed: set[bytes] = set()
    consumer_done = threading.Event()

    def consume():
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "rolling-group", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 10000, "fetch.wait.max.ms": 100})
        cons.subscribe([TOPIC])
        try:
            while not consumer_done.is_set():
                m = cons.poll(0.5)
                if m is not None and not m.error():
                    consumed.add(m.value())
        finally:
            cons.close()

    consumer = threading.Thread(target=consume)
    prod.start()
    consumer.start()
    try:
        for b in sorted(c.brokers):
            time.sleep(1)  # thousands of records between two restarts
            assert c.brokers[b].stop(timeout=30) == 0
            # the leaderships moved before the session closed: nothing waits for an election
            leaders = {p: c.leader(TOPIC, p) for p in range(PARTITIONS)}
            assert b not in leaders.values(), (b, leaders)
            assert c.brokers[b].log_path.read_text().count("controlled shutdown succeeded") == 1  # its first stop
            c.brokers[b].start(timeout=60)
            c.wait_for(lambda: all(len(c.partition_state(TOPIC, p)["isr"]) == 3 for p in range(PARTITIONS)),
                       60, f"the full ISR after broker {b} returned")
        time.sleep(1)
    finally:
        unacked = prod.stop()
    assert unacked == 0
    acked = check_every_ack_stored_once(c.bootstrap, prod, 3000)
    c.wait_for(lambda: set(acked) <= consumed, 60, "the consumer group to read every acknowledged record")
    consumer_done.set()
    consumer.join(30)

    # leadership: the last broker restarted leads nothing until a preferred election
    assignment = _assignment(c, TOPIC)
    out = kafkafast("cluster", "leader-election", "--bootstrap-server", c.bootstrap, "--election-type",
                    "PREFERRED", "--all-topic-partitions").stdout
    assert "Successfully completed leader election (PREFERRED)" in out
    c.wait_for(lambda: all(c.leader(TOPIC, p) == assignment[p][0] for p in range(PARTITIONS)), 20,
               "every partition led by its preferred replica")
    counts = {b: sum(1 for p in range(PARTITIONS) if c.leader(TOPIC, p) == b) for b in c.brokers}
    assert sorted(counts.values()) == [2, 2, 2], counts
    again = kafkafast("cluster", "leader-election", "--bootstrap-server", c.bootstrap, "--preferred",
                      "--topic", TOPIC, "--partition", "0").stdout
    assert f"Valid replica already elected for partitions {TOPIC}-0" in again

    # metrics: the leaders counted broker 3's return to their ISRs (earlier counts went with
    # the restarted processes); the cluster state as the controller sees it, once caught up
    assert sum(c.metric(b, "kafka_server_replicamanager_isrexpands_total") for b in (1, 2)) >= PARTITIONS
    ctrl = c.controller_id()
    assert [c.metric(b, "kafka_controller_kafkacontroller_activecontrollercount") for b in sorted(c.brokers)] == \
        [1.0 if b == ctrl else 0.0 for b in sorted(c.brokers)]
    c.wait_for(lambda: c.metric(ctrl, "kafka_controller_kafkacontroller_preferredreplicaimbalancecount") == 0
               and sum(c.metric(b, "kafka_server_replicamanager_underreplicatedpartitions") for b in c.brokers) == 0
               and c.metric(ctrl, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0, 20,
               "balanced, fully replicated partitions in the metrics")


def test_unclean_election_from_the_cli_brings_an_offline_partition_back(rolling_cluster):
    c = rolling_cluster
    ctrl = c.controller_id()
    first, second = [b for b in sorted(c.brokers) if b != ctrl]
    c.create_topic("offline", 1, 2, assignment=[[first, second]])
    assert c.brokers[second].stop(timeout=30) == 0
    c.wait_for(lambda: c.partition_state("offline", 0)["isr"] == [first], 20, "ISR of the leader alone")
    assert c.brokers[first].stop(timeout=30) == 0
    c.wait_for(lambda: c.leader("offline", 0) == -1, 20, "the partition offline")
    c.brokers[second].start(timeout=60)
    preferred = kafkafast("cluster", "leader-election", "--bootstrap-server", c.brokers[ctrl].bootstrap,
                          "--preferred", "--topic", "offline", "--partition", "0", check=False)
    assert preferred.returncode == 1 and "PREFERRED_LEADER_NOT_AVAILABLE" in preferred.stdout
    assert c.leader("offline", 0) == -1
    out = kafkafast("cluster", "leader-election", "--bootstrap-server", c.brokers[ctrl].bootstrap,
                    "--election-type", "unclean", "--topic", "offline", "--partition", "0").stdout
    assert "Successfully completed leader election (UNCLEAN) for partitions offline-0" in out
    c.wait_for(lambda: c.leader("offline", 0) == second, 20, "the out-of-sync replica leading")
    assert c.partition_state("offline", 0)["isr"] == [second]
    # the controller counted it (Kafka's ControllerStats UncleanLeaderElectionsPerSec)
    assert c.metric(ctrl, "kafka_controller_controllerstats_uncleanleaderelections_total") == 1
    c.brokers[first].start(timeout=60)
    c.wait_for(lambda: sorted(c.partition_state("offline", 0)["isr"]) == sorted([first, second]), 30,
               "the old leader back in the ISR")


def test_reassignment_moves_a_partition_to_other_brokers_under_load(rolling_cluster, tmp_path):
    c = rolling_cluster
    c.create_topic("moving", 1, 2, assignment=[[1, 2]])
    acked: list[bytes] = []
    errors: list = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 2000})

    def produce():
        seq = 0
        while not stop.is_set() and seq < 200_000:
            for _ in range(50):
                producer.produce("moving", value=b"%08d" % seq, partition=0,
                                 on_delivery=lambda e, m: errors.append(e) if e else acked.append(m.value()))
                seq += 1
            producer.poll(0.02)

    t = threading.Thread(target=produce)
    t.start()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [2, 3]}]}))
    verify = ("reassign", "--bootstrap-server", c.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    try:
        time.sleep(2)
        out = kafkafast("reassign", "--bootstrap-server", c.bootstrap, "--execute", "--reassignment-json-file",
                        str(plan), "--throttle", "50000000").stdout
        assert '{"topic":"moving","partition":0,"replicas":[1,2]' in out  # the rollback plan
        assert "Successfully started partition reassignments for moving-0" in out
        c.wait_for(lambda: kafkafast(*verify, check=False).returncode == 0, 60, "the reassignment completed")
        time.sleep(1)
    finally:
        stop.set()
        t.join(30)
    assert producer.flush(60) == 0
    assert errors == []
    assert "Reassignment of partition moving-0 is completed." in kafkafast(*verify).stdout
    topic = json.loads(c._zk().get("/brokers/topics/moving")[0])
    assert topic["partitions"] == {"0": [2, 3]}
    assert topic["adding_replicas"] == {} and topic["removing_replicas"] == {}
    state = c.partition_state("moving", 0)
    assert state["leader"] in (2, 3) and sorted(state["isr"]) == [2, 3]
    c.wait_for(lambda: not (c.root / "broker-1" / "moving-0").exists(), 20, "the old replica's files removed")
    stored = _read_log(c.bootstrap, "moving", 1)[0]
    assert len(stored) == len(set(stored)) and set(acked) <= set(stored) and len(acked) > 500
    c.wait_for(lambda: _log_end(c, 2, "moving") == _log_end(c, 3, "moving") == len(stored), 20,
               "both new replicas holding every record")
    assert c._zk().exists("/admin/reassign_partitions") is None

    # Kafka's legacy path: a plan written to /admin/reassign_partitions, removed when done
    c._zk().create("/admin/reassign_partitions", json.dumps(
        {"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [3, 1]}]}).encode())
    c.wait_for(lambda: c._zk().exists("/admin/reassign_partitions") is None, 60, "the znode's plan carried out")
    assert json.loads(c._zk().get("/brokers/topics/moving")[0])["partitions"] == {"0": [3, 1]}
    c.wait_for(lambda: _log_end(c, 1, "moving") == len(stored), 20, "broker 1 holding every record again")
    c.wait_for(lambda: not (c.root / "broker-2" / "moving-0").exists(), 20, "broker 2's replica removed")


def test_reassign_generate_proposes_replicas_on_the_listed_brokers_only(rolling_cluster, tmp_path):
    c = rolling_cluster
    c.create_topic("spread", 4, 2)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "spread"}]}))
    out = kafkafast("cluster", "reassign", "--bootstrap-server", c.bootstrap, "--generate",
                    "--topics-to-move-json-file", str(topics), "--broker-list", "1,3").stdout
    current_text, proposed_text = out.split("Proposed partition reassignment configuration")
    current = json.loads(current_text.split("Current partition replica assignment")[1])
    proposed = json.loads(proposed_text)
    assert {(e["partition"], tuple(e["replicas"])) for e in current["partitions"]} == \
        {(p, tuple(r)) for p, r in _assignment(c, "spread").items()}
    assert sorted(e["partition"] for e in proposed["partitions"]) == [0, 1, 2, 3]
    assert all(sorted(e["replicas"]) == [1, 3] for e in proposed["partitions"])
    assert kafkafast("reassign", "--help").stdout.count("kafkafast reassign --bootstrap-server") == 3


def test_throttled_reassignment_is_listed_in_progress_and_catches_up_at_the_rate(rolling_cluster, tmp_path):
    c = rolling_cluster
    c.create_topic("throttled", 1, 1, assignment=[[1]])
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(300):  # 3 MB
        producer.produce("throttled", value=b"%06d" % i + bytes(10_000), partition=0)
    assert producer.flush(60) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "throttled", "partition": 0,
                                                              "replicas": [1, 3]}]}))
    verify = ("reassign", "--bootstrap-server", c.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    started = time.monotonic()
    kafkafast("reassign", "--bootstrap-server", c.bootstrap, "--execute", "--reassignment-json-file", str(plan),
              "--throttle", "500000")
    topic = json.loads(c._zk().get("/brokers/topics/throttled")[0])
    assert topic["partitions"] == {"0": [1, 3]} and topic["adding_replicas"] == {"0": [3]}
    configs = json.loads(c._zk().get("/config/topics/throttled")[0])["config"]
    assert configs["follower.replication.throttled.replicas"] == "0:3"
    in_progress = kafkafast(*verify, check=False)
    assert in_progress.returncode == 1
    assert "Reassignment of partition throttled-0 is still in progress." in in_progress.stdout
    # adding partitions meanwhile is refused (Kafka: REASSIGNMENT_IN_PROGRESS, 60), through
    # any broker, by a Java-compatible admin client and by the CLI; nothing changes
    from confluent_kafka.admin import AdminClient, NewPartitions

    for b in sorted(c.brokers):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{c.brokers[b].port}"})  # kept: a collected one
        fut = admin.create_partitions([NewPartitions("throttled", 2)])["throttled"]  # cancels its futures
        with pytest.raises(KafkaException) as refused:
            fut.result(30)
        assert refused.value.args[0].code() == KafkaError.REASSIGNMENT_IN_PROGRESS, refused.value
    alter = kafkafast("topics", "--bootstrap-server", c.bootstrap, "--alter", "--topic", "throttled",
                      "--partitions", "2", check=False)
    assert alter.returncode == 1 and "ReassignmentInProgressError" in alter.stderr, alter
    assert json.loads(c._zk().get("/brokers/topics/throttled")[0])["adding_replicas"] == {"0": [3]}
    c.wait_for(lambda: kafkafast(*verify, check=False).returncode == 0, 60, "the throttled reassignment done")
    # once done, the same request adds the partition
    kafkafast("topics", "--bootstrap-server", c.bootstrap, "--alter", "--topic", "throttled", "--partitions", "2")
    assert sorted(_assignment(c, "throttled")) == [0, 1]
    # 3 MB at 500 kB/s, less one second of burst and one fetch (replica.fetch.max.bytes, 1 MiB)
    # that may overdraw the bucket: not before 2.5 s (a bound only a missing throttle breaks)
    assert time.monotonic() - started >= 2.5
    assert _log_end(c, 3, "throttled") == 300
    configs = json.loads(c._zk().get("/config/topics/throttled")[0])["config"]
    assert "follower.replication.throttled.replicas" not in configs  # --verify removed the throttle


def test_leader_side_throttle_alone_slows_a_new_replica(rolling_cluster):
    """leader.replication.throttled.replicas on the topic, no follower throttle: the leader
    (leader.replication.throttled.rate 500 kB/s) answers the new replica's fetches without
    records while its bucket is in deficit."""
    from kafkafast.client.admin import AdminClient
    import asyncio

    c = rolling_cluster
    c.create_topic("leader-throttled", 1, 1, {"leader.replication.throttled.replicas": "0:2"}, assignment=[[2]])
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(300):  # 3 MB
        producer.produce("leader-throttled", value=b"%06d" % i + bytes(10_000), partition=0)
    assert producer.flush(60) == 0

    async def reassign():
        async with AdminClient(c.bootstrap) as admin:
            return await admin.alter_partition_reassignments({("leader-throttled", 0): [2, 1]})

    started = time.monotonic()
    assert asyncio.run(reassign()) == {("leader-throttled", 0): 0}
    c.wait_for(lambda: sorted(c.partition_state("leader-throttled", 0)["isr"]) == [1, 2], 60,
               "the new replica in the ISR")
    assert time.monotonic() - started >= 2.5  # as in the test above
    assert _log_end(c, 1, "leader-throttled") == 300


def test_cancelled_reassignment_goes_back_to_the_original_replicas(rolling_cluster, tmp_path):
    c = rolling_cluster
    c.create_topic("cancelled", 1, 1, assignment=[[2]])
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(600):  # 6 MB: the throttled copy to broker 3 takes 8 s or more
        producer.produce("cancelled", value=b"%06d" % i + bytes(10_000), partition=0)
    assert producer.flush(60) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "cancelled", "partition": 0,
                                                              "replicas": [3]}]}))
    args = ("--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan))
    kafkafast("reassign", "--execute", "--throttle", "500000", *args)
    c.wait_for(lambda: (c.root / "broker-3" / "cancelled-0").exists(), 20, "the new replica created")
    out = kafkafast("reassign", "--cancel", *args).stdout
    assert "Successfully cancelled partition reassignments for cancelled-0" in out
    topic = json.loads(c._zk().get("/brokers/topics/cancelled")[0])
    assert topic["partitions"] == {"0": [2]} and topic["adding_replicas"] == {}
    c.wait_for(lambda: not (c.root / "broker-3" / "cancelled-0").exists(), 20, "the added replica removed")
    assert c.leader("cancelled", 0) == 2 and _log_end(c, 2, "cancelled") == 600
    again = kafkafast("reassign", "--cancel", *args, check=False)
    assert again.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in again.stdout
