"""The reassignment znodes' JSON (Kafka's format) and the replication throttle's rules."""
from __future__ import annotations

import json
import time

from kafkafast.cluster import zk_data as Z
from kafkafast.broker.replication_throttle import UNLIMITED, ReplicationQuota, throttled


def test_topic_znode_carries_adding_and_removing_replicas():
    tid = bytes(range(16))
    data = Z.topic_assignment_json(tid, {0: [2, 3, 1], 1: [1, 2]}, {0: [3], 1: []}, {0: [1]})
    doc = json.loads(data)
    assert doc["partitions"] == {"0": [2, 3, 1], "1": [1, 2]}
    assert doc["adding_replicas"] == {"0": [3]} and doc["removing_replicas"] == {"0": [1]}
    assert Z.parse_reassigning(data) == ({0: [3]}, {0: [1]})
    assert Z.parse_reassigning(Z.topic_assignment_json(tid, {0: [1]})) == ({}, {})


def test_admin_reassign_partitions_json_as_kafka_writes_it():
    data = Z.reassign_partitions_json({("t", 1): [3, 1], ("t", 0): [2, 3]})
    assert json.loads(data) == {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]},
                                                             {"topic": "t", "partition": 1, "replicas": [3, 1]}]}
    assert Z.parse_reassign_partitions(data) == {("t", 0): [2, 3], ("t", 1): [3, 1]}
    kafka_written = b'{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[1],"log_dirs":["any"]}]}'
    assert Z.parse_reassign_partitions(kafka_written) == {("a", 2): [1]}


def test_throttled_replicas_lists_name_partition_and_broker():
    assert throttled("*", 7, 3)
    assert throttled("0:1, 0:3 ,2:2", 0, 3)
    assert not throttled("0:1,2:3", 0, 3)
    assert not throttled("", 0, 1)
    assert not throttled("10:3", 1, 3)


def test_quota_is_exceeded_only_after_more_than_a_second_of_bytes():
    q = ReplicationQuota(1000)
    assert not q.exceeded()
    q.record(999)
    assert not q.exceeded()
    q.record(500)  # overdrawn by about 500 bytes: about half a second to pay back
    assert q.exceeded()
    assert 0 < q.wait_s() <= 0.5
    unlimited = ReplicationQuota(UNLIMITED)
    unlimited.record(10**12)
    assert unlimited.unlimited and not unlimited.exceeded()


def test_quota_refills_at_its_rate():
    q = ReplicationQuota(100_000)
    q.record(110_000)
    assert q.exceeded()
    time.sleep(0.3)  # 30 kB back: the 10 kB deficit is paid whatever the scheduling delay
    assert not q.exceeded()
