"""The controller-side APIs of the rolling operations on a single broker (no
`zookeeper.connect`): nothing to move or elect, answered with Kafka's error codes."""
from __future__ import annotations

from kafkafast.protocol._generated.alter_partition_reassignments import AlterPartitionReassignmentsRequest as AR
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownRequest
from kafkafast.protocol._generated.elect_leaders import ElectLeadersRequest as ER
from kafkafast.protocol._generated.list_partition_reassignments import ListPartitionReassignmentsRequest
from tests.support.cli import kafkafast
from tests.support.raw_client import RawClient

NOT_CONTROLLER, INVALID_REPLICA_ASSIGNMENT, ELECTION_NOT_NEEDED = 41, 39, 84


def test_single_node_answers_rolling_operation_requests_without_acting(broker):
    kafkafast("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "t", "--partitions", "2")
    with RawClient(broker.port) as rc:
        assert rc.request(ControlledShutdownRequest(broker_id=0, broker_epoch=1), 3).error_code == NOT_CONTROLLER
        resp = rc.request(ER(election_type=0, topic_partitions=[ER.TopicPartitions(topic="t", partitions=[0, 1])]), 2)
        assert resp.error_code == 0
        assert [(r.topic, p.partition_id, p.error_code) for r in resp.replica_election_results
                for p in r.partition_result] == [("t", 0, ELECTION_NOT_NEEDED), ("t", 1, ELECTION_NOT_NEEDED)]
        assert rc.request(ER(election_type=5, topic_partitions=None), 2).error_code == 42  # INVALID_REQUEST
        resp = rc.request(AR(topics=[AR.ReassignableTopic(name="t", partitions=[
            AR.ReassignablePartition(partition_index=0, replicas=[1, 2])])]), 0)
        assert [p.error_code for r in resp.responses for p in r.partitions] == [INVALID_REPLICA_ASSIGNMENT]
        listed = rc.request(ListPartitionReassignmentsRequest(topics=None), 0)
        assert (listed.error_code, listed.topics) == (0, [])
    out = kafkafast("cluster", "leader-election", "--bootstrap-server", broker.bootstrap, "--preferred",
                    "--topic", "t", "--partition", "0").stdout
    assert "Valid replica already elected for partitions t-0" in out
