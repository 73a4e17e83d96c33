"""The leader's high-watermark rule (`Partition.maybe_increment_hw`): the minimum log end over
the leader and the maximal ISR (the ISR plus the members an ISR change in flight adds), moved
only forward, a member without a follower record holding it. Checked against the rule written
plainly over many random states of a real log and Partition."""
from __future__ import annotations

import random

from kafkafast.broker.follower_state import FollowerState
from kafkafast.broker.partition import Partition
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequest
from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log

LEADER = 1


def rule(part: Partition, old_hw: int) -> int:
    members = set(part.isr) | set(part.alter_in_flight or ())
    new = part.log.state.log_end_offset
    for r in members - {LEADER}:
        f = part.followers.get(r)
        new = min(new, f.leo if f is not None else -1)
    return max(new, old_hw)


def test_the_high_watermark_is_the_minimum_log_end_over_the_maximal_isr(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig.from_props({}), needs_recovery=False, recovery_point=0)
    part = Partition("t", 0, log)
    part.apply_state(LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name="t", partition_index=0, controller_epoch=1, leader=LEADER, leader_epoch=1,
        isr=[1, 2, 3], partition_epoch=1, replicas=[1, 2, 3, 4]), is_leader=True)
    rnd = random.Random(25)
    moved = held = 0
    for step in range(2000):
        if step % 7 == 0 or log.state.log_end_offset == 0:
            log.append(bytearray(encode_batch([(1, None, b"v", ()) for _ in range(rnd.randint(1, 4))])),
                       part.leader_epoch, now_ms=1)
        leo = log.state.log_end_offset
        hw = log.state.high_watermark
        part.isr = rnd.choice([[1], [1, 2], [1, 2, 3], [3, 1, 2], [1, 2, 2], [2, 3]])
        part.alter_in_flight = rnd.choice([None, None, [1, 2, 3, 4], [1, 4]])
        part.followers = {r: FollowerState(0) for r in (2, 3, 4) if rnd.random() < 0.9}
        for f in part.followers.values():
            f.leo = rnd.choice([hw, leo, rnd.randint(max(hw - 3, 0), leo), -1])
        expected = rule(part, hw)
        assert part.maybe_increment_hw(LEADER) == (expected > hw)
        assert log.state.high_watermark == expected
        moved += expected > hw
        held += expected == hw
    assert moved > 100 and held > 100
