"""Replica assignment (Kafka's AdminUtils rules) and the ZooKeeper JSON codecs."""
from __future__ import annotations

import json
import random

import pytest

from kafkafast.cluster import zk_data as Z
from kafkafast.broker.replica_assignment import assign_replicas, rack_alternated
from kafkafast.protocol import errors as E


def test_rack_unaware_assignment_matches_kafkas_fixed_start_layout():
    # Kafka's AdminUtilsTest: 5 brokers, 10 partitions, RF 3, fixed start index 0
    got = assign_replicas({b: None for b in range(5)}, 10, 3, fixed_start=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_random_start_spreads_leaders_evenly():
    got = assign_replicas({1: None, 2: None, 3: None}, 6, 3, rng=random.Random(7))
    assert sorted(r[0] for r in got.values()) == [1, 1, 2, 2, 3, 3]
    assert all(sorted(r) == [1, 2, 3] for r in got.values())


def test_replication_factor_above_broker_count_is_invalid():
    with pytest.raises(E.InvalidReplicationFactorError):
        assign_replicas({1: None, 2: None}, 1, 3)


def test_rack_aware_assignment_puts_replicas_in_different_racks():
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assert rack_alternated(racks) == [0, 2, 4, 1, 3, 5]
    got = assign_replicas(racks, 12, 3, rng=random.Random(3))
    for reps in got.values():
        assert len({racks[r] for r in reps}) == 3


def test_partly_set_racks_are_refused():
    with pytest.raises(E.InvalidRequestError):
        assign_replicas({1: "a", 2: None}, 1, 2)


def test_znode_json_round_trips():
    tid = bytes(range(16))
    doc = json.loads(Z.topic_assignment_json(tid, {1: [2, 3], 0: [3, 2]}))
    assert doc == {"version": 3, "topic_id": Z.topic_id_text(tid), "partitions": {"0": [3, 2], "1": [2, 3]},
                   "adding_replicas": {}, "removing_replicas": {}}
    assert Z.parse_topic_assignment(Z.topic_assignment_json(tid, {0: [1]})) == (tid, {0: [1]})
    state = Z.LeaderIsr(2, 5, (2, 3), 4, 7)
    assert json.loads(state.to_json()) == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 5,
                                           "isr": [2, 3]}
    assert Z.LeaderIsr.from_json(state.to_json(), 7) == state
    info = Z.BrokerInfo(3, (("PLAINTEXT", "h", 9092),), "r1", (("PLAINTEXT", "PLAINTEXT"),))
    back = Z.BrokerInfo.from_json(3, info.to_json(), 11)
    assert (back.endpoints, back.rack, back.epoch) == (info.endpoints, "r1", 11)
