"""The admin commands' answers a script or an operator reads: nothing printed when there is
nothing to report (as Kafka's tools), and an error line when what was asked for does not exist."""
from __future__ import annotations

import json

import pytest

from tests.support.cli import kafkafast


def test_partition_reports_print_nothing_when_no_partition_matches(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "healthy", "--partitions", "2")
    kafkafast("topics", *b, "--create", "--topic", "wants-two", "--partitions", "1",
              "--config", "min.insync.replicas=2")
    for report in ("--under-replicated-partitions", "--unavailable-partitions"):
        out = kafkafast("topics", *b, "--describe", report)
        assert out.stdout == "", report
        assert json.loads(kafkafast("topics", *b, "--describe", report, "--output", "json").stdout) == []
    under = kafkafast("topics", *b, "--describe", "--under-min-isr-partitions").stdout
    assert under == "\tTopic: wants-two\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\n"
    at = kafkafast("topics", *b, "--describe", "--at-min-isr-partitions", "--topic", "healthy").stdout
    assert at == ("\tTopic: healthy\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\n"
                  "\tTopic: healthy\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\n")
    assert kafkafast("topics", *b, "--describe", "--at-min-isr-partitions", "--topic", "wants-two").stdout == ""


def test_if_not_exists_and_if_exists_print_nothing_when_there_is_nothing_to_do(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    assert kafkafast("topics", *b, "--create", "--topic", "once", "--if-not-exists").stdout == "Created topic once.\n"
    assert kafkafast("topics", *b, "--create", "--topic", "once", "--if-not-exists").stdout == ""
    assert kafkafast("topics", *b, "--delete", "--topic", "never-made", "--if-exists").stdout == ""
    missing = kafkafast("topics", *b, "--delete", "--topic", "never-made", check=False)
    assert missing.returncode == 1 and "Topic 'never-made' does not exist as expected" in missing.stderr
    assert kafkafast("topics", *b, "--delete", "--topic", "once", "--if-exists").stdout == "Deleted topic once.\n"


def test_describing_an_unknown_group_says_it_does_not_exist(module_broker):
    out = kafkafast("groups", "--bootstrap-server", module_broker.bootstrap, "--describe", "--group", "nobody",
                    check=False)
    assert out.returncode == 1
    assert out.stdout == ""
    assert "Error: Consumer group 'nobody' does not exist." in out.stderr


def test_single_node_leader_election_of_an_unknown_topic_is_unknown_topic_or_partition(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "elect-me", "--partitions", "1")
    out = kafkafast("cluster", "leader-election", *b, "--preferred", "--topic", "no-such-topic", "--partition", "0",
                    check=False)
    assert out.returncode == 1
    assert ("Error completing leader election (PREFERRED) for partition: no-such-topic-0: "
            "UNKNOWN_TOPIC_OR_PARTITION") in out.stdout
    beyond = kafkafast("cluster", "leader-election", *b, "--preferred", "--topic", "elect-me", "--partition", "1",
                       check=False)
    assert beyond.returncode == 1 and "elect-me-1: UNKNOWN_TOPIC_OR_PARTITION" in beyond.stdout
    ok = kafkafast("cluster", "leader-election", *b, "--preferred", "--topic", "elect-me", "--partition", "0")
    assert "Valid replica already elected for partitions elect-me-0" in ok.stdout


def test_reassignment_on_a_single_node_says_why_it_cannot(module_broker, tmp_path):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "stay", "--partitions", "1")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "stay", "partition": 0, "replicas": [1]}]}))
    out = kafkafast("reassign-partitions", *b, "--execute", "--reassignment-json-file", str(plan), check=False)
    assert out.returncode == 1
    assert "Error reassigning partition(s): stay-0: INVALID_REPLICA_ASSIGNMENT" in out.stdout
    assert "The cluster has a single broker (0): there is no other broker to move replicas to" in out.stdout
    assert kafkafast("reassign-partitions", *b, "--list").stdout == "No partition reassignments found.\n"


@pytest.mark.kafka_cluster(brokers=2)
def test_reassign_list_shows_a_reassignment_in_progress(kafka_cluster, tmp_path):
    c = kafka_cluster
    c.create_topic("moving", partitions=1, replication_factor=1)
    leader = c.leader("moving", 0)
    other = next(i for i in c.brokers if i != leader)
    # the new replica cannot fetch from the leader: the reassignment stays in progress
    c.brokers[leader].faults.error("Fetch", "NOT_LEADER_OR_FOLLOWER", topic="moving", count=-1)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0,
                                                              "replicas": [leader, other]}]}))
    b = ["--bootstrap-server", c.bootstrap_servers]
    kafkafast("reassign-partitions", *b, "--execute", "--reassignment-json-file", str(plan))
    assert kafkafast("reassign-partitions", *b, "--list").stdout == (
        f"Current partition reassignments:\nmoving-0: replicas: {leader},{other}. adding: {other}.\n")
    c.brokers[leader].faults.clear()
    c.wait_for(lambda: kafkafast("reassign-partitions", *b, "--list").stdout == "No partition reassignments found.\n",
               60, "the reassignment done once the replica can fetch")


@pytest.mark.kafka_cluster(brokers=2)
def test_under_replicated_report_lists_the_partition_while_a_broker_is_down_then_nothing(kafka_cluster):
    """deploy/three-node's rolling-restart check: wait until the report prints nothing."""
    c = kafka_cluster
    c.create_topic("rolled", partitions=1, replication_factor=2)
    leader = c.leader("rolled", 0)
    other = next(i for i in c.brokers if i != leader)
    report = ("topics", "--bootstrap-server", c.brokers[leader].bootstrap_servers, "--describe",
              "--under-replicated-partitions")
    assert kafkafast(*report).stdout == ""
    c.stop(other)
    c.wait_for(lambda: c.isr("rolled", 0) == [leader], 30, "the stopped broker out of the ISR")
    lines = kafkafast(*report).stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"\tTopic: rolled\tPartition: 0\tLeader: {leader}\t")
    assert f"\tIsr: {leader}" in lines[0]
    assert kafkafast(*report, "--output", "json").stdout.count('"topic": "rolled"') == 1
    c.start(other)
    c.wait_for(lambda: kafkafast(*report).stdout == "", 60, "the restarted broker back in the ISR")
