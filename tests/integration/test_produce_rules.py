"""Produce rules a single node shares with the cluster, because it is a cluster of one (issue 24):
a lone replica is an ISR of one, so acks=all to a topic whose min.insync.replicas is 2 is refused
before anything is appended, as Kafka refuses it on one broker; an acks=0 produce that fails
closes the connection, Kafka's only way of telling such a producer."""
from __future__ import annotations

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.errors import ErrorCode
from tests.integration.test_bad_input import a_batch, create_topic, latest_offset, produce
from tests.support.broker_process import api_versions_ok
from tests.support.raw_client import RawClient


@pytest.fixture(params=[0, 2], ids=["one-process", "2-workers"])
def node(request, broker_factory):
    return broker_factory(workers=request.param)


def test_acks_all_below_min_insync_replicas_is_refused_and_appends_nothing(node):
    assert create_topic(node.port, "strict", 2, {"min.insync.replicas": "2"}).error_code == 0
    assert create_topic(node.port, "loose", 2).error_code == 0
    for partition in (0, 1):  # (with workers, one of them is owned by another worker than the connection's)
        refused = produce(node.port, "strict", a_batch(), acks=-1, partition=partition)
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS, refused
        assert "min.insync.replicas=2" in refused.error_message
        assert latest_offset(node.port, "strict", partition).offset == 0
        assert produce(node.port, "strict", a_batch(), acks=1, partition=partition).error_code == 0
        assert latest_offset(node.port, "strict", partition).offset == 3
        done = produce(node.port, "loose", a_batch(), acks=-1, partition=partition)
        assert (done.error_code, done.base_offset) == (0, 0)
        assert latest_offset(node.port, "loose", partition).offset == 3


def test_a_failed_acks_0_produce_closes_the_connection(node):
    assert create_topic(node.port, "fine").error_code == 0

    def acks0(partition: int) -> bytes:
        return api.encode_request(ProduceRequest(acks=0, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name="fine", partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=a_batch())])]),
            9, partition, "raw-test")

    with RawClient(node.port, timeout=3.0) as c:
        c.send_raw(acks0(0))  # a good one: no answer, and the connection stays
        assert not c.is_closed_by_peer()
        c.send_raw(acks0(7))  # no partition 7: UNKNOWN_TOPIC_OR_PARTITION, told by closing
        assert c.is_closed_by_peer()
    assert latest_offset(node.port, "fine").offset == 3
    assert api_versions_ok(node.port)
