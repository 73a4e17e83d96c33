"""Protocol versions in cluster mode: Fetch v17 names topics by id on every broker and, from a
broker that does not lead the partition, answers NOT_LEADER_OR_FOLLOWER with the current
leader and its endpoint (KIP-951), and so does Produce v10+; Produce v2's legacy message set is up-converted on the
leader and replicated."""
from __future__ import annotations

from kafkafast.protocol.errors import ErrorCode
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records import iter_record_batches
from kafkafast.records.convert import encode_message_set
from kafkafast.records.model import CODEC_GZIP, Record
from tests.support.raw_client import RawClient


def test_fetch_v17_leader_hints_and_legacy_produce(cluster):
    cluster.create_topic("pv", 1, 2, assignment=[[1, 2]])
    leader = cluster.leader("pv", 0)
    legacy = encode_message_set(1, [Record(i, 1_700_000_000_000 + i, None, b"m%d" % i, [], 0) for i in range(5)],
                                CODEC_GZIP)
    with RawClient(cluster.brokers[leader].port, timeout=30) as rc:
        produced = rc.request(ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
            name="pv", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=legacy)])]), 2)
        assert produced.responses[0].partition_responses[0].error_code == 0
        meta = rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="pv")],
                                          allow_auto_topic_creation=False), 12)
    tid = bytes(meta.topics[0].topic_id)
    req = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=-1), max_wait_ms=0, min_bytes=0,
                       max_bytes=1 << 20, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic_id=tid, partitions=[
                           FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    with RawClient(cluster.brokers[leader].port, timeout=30) as rc:
        good = rc.request(req, 17)
    part = good.responses[0].partitions[0]
    assert part.error_code == 0 and bytes(good.responses[0].topic_id) == tid
    batches = list(iter_record_batches(part.records))
    assert [(h.magic, h.compression) for h, _ in batches] == [(2, CODEC_GZIP)]
    assert [r.value for r in batches[0][1]] == [b"m%d" % i for i in range(5)]
    # A broker that hosts no replica of the partition names its leader (Kafka's answer for a
    # partition the cluster has elsewhere); the follower would serve a v11+ consumer (KIP-392).
    outsider = next(i for i in cluster.brokers if i not in (1, 2))
    with RawClient(cluster.brokers[outsider].port, timeout=30) as rc:
        hinted = rc.request(req, 17)
    part = hinted.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.current_leader.leader_id == leader and part.current_leader.leader_epoch >= 0
    assert [(n.node_id, n.port) for n in hinted.node_endpoints] == [(leader, cluster.brokers[leader].port)]


def test_produce_v11_to_a_follower_names_the_current_leader(cluster):
    """KIP-951 on Produce: a broker that does not lead the partition answers
    NOT_LEADER_OR_FOLLOWER with the leader and its epoch, and the leader's endpoint."""
    from kafkafast.records import encode_batch

    cluster.create_topic("pv11", 1, 2, assignment=[[1, 2]])
    leader = cluster.leader("pv11", 0)
    other = next(i for i in cluster.brokers if i != leader)
    req = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name="pv11", partition_data=[ProduceRequest.PartitionProduceData(
            index=0, records=encode_batch([(1_700_000_000_000, b"k", b"v", [])]))])])
    with RawClient(cluster.brokers[other].port, timeout=30) as rc:
        hinted = rc.request(req, 11)
    part = hinted.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.current_leader.leader_id == leader and part.current_leader.leader_epoch >= 0
    assert [(n.node_id, n.port) for n in hinted.node_endpoints] == [(leader, cluster.brokers[leader].port)]
    with RawClient(cluster.brokers[other].port, timeout=30) as rc:
        old = rc.request(req, 9)  # before v10 there is nowhere to say it
    assert old.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert old.node_endpoints == []
