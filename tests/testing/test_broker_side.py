"""kafkafast.testing from the broker's side, byte for byte: what an injected error answer
contains per API, the version profile, counts shared by worker processes, and the manual
clock's timers. (Real-client behaviour is in as_a_user/, run by test_plugin_as_user.py.)"""
from __future__ import annotations

import asyncio
import time

import pytest

from kafkafast import clock
from kafkafast.protocol import api
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.describe_cluster import DescribeClusterRequest
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode as EC
from kafkafast.records import encode_batch
from kafkafast.testing import KafkaTestBroker, broker
from kafkafast.testing.control import ControlFiles
from tests.support.raw_client import RawClient


@pytest.fixture
def b(tmp_path):
    with broker(str(tmp_path)) as started:
        yield started


def produce_request(topic: str, values_by_partition: dict[int, bytes]) -> ProduceRequest:
    T, P = ProduceRequest.TopicProduceData, ProduceRequest.PartitionProduceData
    return ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[T(name=topic, partition_data=[
        P(index=p, records=encode_batch([(0, None, v, [])])) for p, v in values_by_partition.items()])])


def fetch_request(topic: str, partitions: list[int]) -> FetchRequest:
    T, P = FetchRequest.FetchTopic, FetchRequest.FetchPartition
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[T(topic=topic, partitions=[
                            P(partition=p, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                              log_start_offset=-1) for p in partitions])], forgotten_topics_data=[], rack_id="")


def test_produce_error_for_one_partition_still_appends_the_others(b):
    b.create_topic("t", partitions=2)
    b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", topic="t", partition=1)
    with RawClient(b.port) as c:
        resp = c.request(produce_request("t", {0: b"kept", 1: b"refused"}), 8)
    codes = {p.index: (p.error_code, p.base_offset) for p in resp.responses[0].partition_responses}
    assert codes == {0: (0, 0), 1: (EC.NOT_LEADER_OR_FOLLOWER, -1)}
    assert [(r.partition, r.value) for r in b.records("t")] == [(0, b"kept")]
    assert b.faults.active() == []


def test_produce_error_with_acks_0_closes_the_connection_as_kafka_does(b):
    b.create_topic("t")
    b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER")
    req = produce_request("t", {0: b"unheard"})
    req.acks = 0
    with RawClient(b.port, timeout=5) as c:
        c.send_raw(api.encode_request(req, 8, 1, "raw-test"))
        assert c.is_closed_by_peer()
    assert b.records("t") == [] and b.faults.active() == []


def test_fetch_error_for_one_partition_and_records_for_the_other(b):
    b.create_topic("t", partitions=2)
    with RawClient(b.port) as c:
        c.request(produce_request("t", {0: b"a", 1: b"b"}), 8)
        b.faults.error("Fetch", "NOT_LEADER_OR_FOLLOWER", topic="t", partition=1, count=-1)
        for _ in range(2):  # count -1: every time until removed
            resp = c.request(fetch_request("t", [0, 1]), 11)
            parts = {p.partition_index: p for p in resp.responses[0].partitions}
            assert parts[1].error_code == EC.NOT_LEADER_OR_FOLLOWER and parts[1].high_watermark == -1
            assert parts[0].error_code == 0 and parts[0].high_watermark == 1 and bytes(parts[0].records)
    assert len(b.faults.active()) == 1


def test_a_fetch_with_an_injected_error_is_answered_at_once_as_kafka_does(b):
    """A partition with an error completes a fetch (Kafka's DelayedFetch), however long it may
    park and whatever its other partitions hold."""
    b.create_topic("t", partitions=2)
    b.faults.error("Fetch", "NOT_LEADER_OR_FOLLOWER", topic="t", partition=1)
    req = fetch_request("t", [0, 1])
    req.max_wait_ms, req.min_bytes = 20000, 1  # partition 0 is empty: it alone would park 20 s
    with RawClient(b.port, timeout=30) as c:
        start = time.monotonic()
        resp = c.request(req, 11)
        took = time.monotonic() - start
    assert {p.partition_index: p.error_code for p in resp.responses[0].partitions} == \
        {0: 0, 1: EC.NOT_LEADER_OR_FOLLOWER}
    assert took < 10, took


def test_omit_leaves_a_partition_out_of_a_produce_and_of_its_answer(b):
    b.create_topic("t", partitions=2)
    b.faults.omit("Produce", topic="t", partition=1)
    with RawClient(b.port) as c:
        resp = c.request(produce_request("t", {0: b"kept", 1: b"left out"}), 8)
        assert [(p.index, p.error_code) for p in resp.responses[0].partition_responses] == [(0, 0)]
        assert b.faults.active() == []
        resp = c.request(produce_request("t", {1: b"handled"}), 8)  # (used up)
        assert [(p.index, p.error_code) for p in resp.responses[0].partition_responses] == [(1, 0)]
    assert sorted((r.partition, r.value) for r in b.records("t")) == [(0, b"kept"), (1, b"handled")]


def test_offset_for_leader_epoch_errors_and_omissions_per_partition(b):
    R = OffsetForLeaderEpochRequest
    b.create_topic("t", partitions=2)
    req = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic="t", partitions=[
        R.OffsetForLeaderPartition(partition=p, current_leader_epoch=-1, leader_epoch=0) for p in (0, 1)])])
    b.faults.error("OffsetForLeaderEpoch", "NOT_LEADER_OR_FOLLOWER", topic="t", partition=0)
    b.faults.omit("OffsetForLeaderEpoch", topic="t", partition=1)
    with RawClient(b.port) as c:
        errored = c.request(req, 3)
        omitted = c.request(req, 3)
        plain = c.request(req, 3)

    def answers(resp):
        return {(t.topic, p.partition): (p.error_code, p.leader_epoch, p.end_offset)
                for t in resp.topics for p in t.partitions}
    assert answers(errored) == {("t", 0): (EC.NOT_LEADER_OR_FOLLOWER, -1, -1), ("t", 1): (0, 0, 0)}
    assert answers(omitted) == {("t", 0): (0, 0, 0)}
    assert answers(plain) == {("t", 0): (0, 0, 0), ("t", 1): (0, 0, 0)}
    assert b.faults.active() == []


def test_metadata_error_marks_only_the_chosen_topic(b):
    b.create_topic("sick")
    b.create_topic("well")
    b.faults.error("Metadata", "LEADER_NOT_AVAILABLE", topic="sick", count=2)
    T = MetadataRequest.MetadataRequestTopic
    with RawClient(b.port) as c:
        resp = c.request(MetadataRequest(topics=[T(name="sick"), T(name="well")], allow_auto_topic_creation=False), 9)
        assert {t.name: t.error_code for t in resp.topics} == {"sick": EC.LEADER_NOT_AVAILABLE, "well": 0}
        resp = c.request(MetadataRequest(topics=[T(name="well")], allow_auto_topic_creation=False), 9)
        assert {t.name: t.error_code for t in resp.topics} == {"well": 0}  # not concerned: not used up
        resp = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)  # all topics
        assert {t.name: t.error_code for t in resp.topics} == {"sick": EC.LEADER_NOT_AVAILABLE, "well": 0}
    assert b.faults.active() == []


def test_find_coordinator_error_per_key_and_top_level(b):
    b.faults.error("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)
    with RawClient(b.port) as c:
        v4 = c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"]), 4)
        v2 = c.request(FindCoordinatorRequest(key="g1", key_type=0), 2)
        ok = c.request(FindCoordinatorRequest(key="g1", key_type=0), 2)
    assert [(k.key, k.error_code, k.node_id) for k in v4.coordinators] == \
        [("g1", EC.COORDINATOR_NOT_AVAILABLE, -1), ("g2", EC.COORDINATOR_NOT_AVAILABLE, -1)]
    assert (v2.error_code, v2.node_id) == (EC.COORDINATOR_NOT_AVAILABLE, -1)
    assert ok.error_code == 0 and ok.port == b.port


def test_rules_are_validated_by_the_test_side(b):
    with pytest.raises(ValueError):
        b.faults.error("Heartbeat", "NOT_COORDINATOR", topic="t")  # not addressed by topic
    with pytest.raises(ValueError):
        b.faults.error("Heartbeat", "NOT_COORDINATOR", partition=0)
    with pytest.raises(ValueError):
        b.faults.error("Produce", "NO_SUCH_ERROR")
    with pytest.raises(ValueError):
        b.faults.error("NoSuchApi", 6)
    with pytest.raises(ValueError):
        b.faults.omit("Heartbeat", topic="t")  # not answered partition by partition
    with pytest.raises(ValueError):
        b.faults.kill_worker(0)  # single-process broker
    assert b.faults.active() == []


def test_error_counts_are_exact_across_worker_processes(tmp_path):
    with broker(str(tmp_path), workers=2) as b:
        b.faults.error("DescribeCluster", "CLUSTER_AUTHORIZATION_FAILED", count=3)
        codes = []
        for _ in range(12):  # new connections: the kernel spreads them over both workers
            with RawClient(b.port) as c:
                codes.append(c.request(DescribeClusterRequest(), 0).error_code)
        assert sorted(codes) == [0] * 9 + [EC.CLUSTER_AUTHORIZATION_FAILED] * 3
        assert b.faults.active() == []
        # A partition-scoped error: the other partitions go their usual way, to whichever
        # worker owns them (forwarded or not).
        b.create_topic("t", partitions=4)
        b.faults.error("Produce", "NOT_ENOUGH_REPLICAS", topic="t", partition=2)
        with RawClient(b.port) as c:
            resp = c.request(produce_request("t", {p: b"v%d" % p for p in range(4)}), 8)
        assert {p.index: p.error_code for p in resp.responses[0].partition_responses} == \
            {0: 0, 1: 0, 2: EC.NOT_ENOUGH_REPLICAS, 3: 0}
        assert sorted((r.partition, r.value) for r in b.records("t")) == [(0, b"v0"), (1, b"v1"), (3, b"v3")]


def test_as_kafka_profile_narrows_api_versions_and_closes_on_newer_requests(tmp_path):
    with broker(str(tmp_path), as_kafka="2.3") as b, RawClient(b.port) as c:
        # 2.3 spoke ApiVersions up to v2: a v3 request is answered in v0, as Kafka does.
        c.send_raw(api.encode_request(ApiVersionsRequest(), 3, 7, "raw-test"))
        too_new = api.decode_response(18, 0, c.recv_frame())[1]
        assert too_new.error_code == EC.UNSUPPORTED_VERSION
        served = {k.api_key: (k.min_version, k.max_version) for k in c.request(ApiVersionsRequest(), 2).api_keys}
        assert served[0] == (0, 7) and served[3] == (0, 8) and served[18] == (0, 2)
        assert 47 not in served and 60 not in served  # OffsetDelete (2.4), DescribeCluster (2.8)
        assert served[1] == (0, 11) and served[35] == (0, 1)  # Fetch 0-11 (v0-3 down-converted), DescribeLogDirs
        c.request(MetadataRequest(topics=[]), 8)
        with pytest.raises(ConnectionError):  # Metadata v9 came with 2.4
            c.request(MetadataRequest(topics=[]), 9)


def test_unknown_release_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown Kafka release"):
        KafkaTestBroker(tmp_path, as_kafka="0.7")
    # The command line refuses it too, before starting anything.
    b = KafkaTestBroker(tmp_path, as_kafka="2.4")
    b.as_kafka = "0.7"
    with pytest.raises(RuntimeError, match="--as-kafka: unknown Kafka release '0.7'"):
        b.start()


def test_manual_clock_timers_fire_in_deadline_order_when_advanced(tmp_path):
    path = str(tmp_path / "clock")
    clock.write_manual_clock(path, 1_000_000)
    fired: list[str] = []
    try:
        clock.use_manual_clock(path)
        assert clock.now_ms() == 1_000_000
        clock.call_later(None, 500, fired.append, "b")
        clock.call_later(None, 100, fired.append, "a")
        clock.call_later(None, 900, fired.append, "never").cancel()
        assert clock.fire_due_timers() == 0
        clock.write_manual_clock(path, 1_000_600)
        assert clock.fire_due_timers() == 2 and fired == ["a", "b"]

        async def sleeper() -> int:
            task = asyncio.ensure_future(clock.sleep(10_000))
            await asyncio.sleep(0.05)
            assert not task.done()  # real time passing does not move the manual clock
            clock.write_manual_clock(path, 1_010_600)
            clock.fire_due_timers()
            await task
            return clock.now_ms()

        assert asyncio.run(sleeper()) == 1_010_600
        clock.write_manual_clock(path, 1_020_000)
        assert clock.fire_due_timers() == 0 and fired == ["a", "b"]  # the cancelled one stays silent
    finally:
        clock._manual = None
        clock._timers.clear()
    assert abs(clock.now_ms() - time.time() * 1000) < 5000


def test_control_file_counts_down_and_removes_used_rules(tmp_path):
    files = ControlFiles(str(tmp_path))
    twice = files.add({"kind": "error", "count": 2})
    forever = files.add({"kind": "delay", "count": -1})
    assert [files.use(twice), files.use(twice), files.use(twice)] == [True, True, False]
    assert all(files.use(forever) for _ in range(5))
    assert [r["id"] for r in files.rules()] == [forever]
    assert files.remove(forever) and files.rules() == []


def test_exec_spawn_runs_the_same_broker_in_a_new_interpreter(tmp_path):
    with broker(str(tmp_path), spawn="exec") as b:
        b.create_topic("t")
        with RawClient(b.port) as c:
            c.request(produce_request("t", {0: b"x"}), 8)
        b.restart()
        assert [r.value for r in b.records("t")] == [b"x"]
        proc = b.proc
    assert proc.returncode == 0


def test_a_free_port_taken_meanwhile_is_replaced_and_never_mistaken_for_ours(tmp_path):
    with broker(str(tmp_path / "a")) as a:
        b = KafkaTestBroker(tmp_path / "b")
        b.port = a.port  # as if another process had bound the free port first
        try:
            b.start()
            assert b.port != a.port
            with RawClient(b.port) as c:  # and it is b that answers there, with b's own cluster id
                assert c.request(MetadataRequest(topics=[]), 2).cluster_id == \
                    (tmp_path / "b" / "data" / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
        finally:
            b.stop()
        with pytest.raises(RuntimeError, match="broker exited"):  # a port the test chose is kept
            KafkaTestBroker(tmp_path / "c", port=a.port).start()
