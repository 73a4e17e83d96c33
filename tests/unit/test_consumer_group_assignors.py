"""The server-side assignors of the consumer group protocol (KIP-848): uniform (balanced,
sticky) and range (consecutive ranges per topic, by member id)."""
from __future__ import annotations

import pytest

from kafkafast.broker.groups.assignors import RANGE, UNIFORM, assign, assignor_names

A, B = b"a" * 16, b"b" * 16
TOPICS = {"ta": (A, 7), "tb": (B, 3)}


def flat(result):
    return {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in result.items()}


def test_uniform_covers_everything_once_balanced_and_sticky():
    subs = {"m1": ["ta", "tb"], "m2": ["ta", "tb"], "m3": ["ta", "tb"]}
    first = assign(UNIFORM, subs, TOPICS, {})
    f = flat(first)
    assert sorted(len(v) for v in f.values()) == [3, 3, 4]
    assert set().union(*f.values()) == {(A, p) for p in range(7)} | {(B, p) for p in range(3)}
    assert sum(len(v) for v in f.values()) == 10
    # A fourth member: only what must move moves, and every old member keeps the rest.
    subs["m4"] = ["ta", "tb"]
    second_raw = assign(UNIFORM, subs, TOPICS, first)
    second = flat(second_raw)
    assert sorted(len(v) for v in second.values()) == [2, 2, 3, 3]
    for m in ("m1", "m2", "m3"):
        assert second[m] <= f[m]
    # A member leaves: its partitions go to the others, who keep theirs.
    del subs["m2"]
    third = flat(assign(UNIFORM, subs, TOPICS, {m: a for m, a in second_raw.items() if m != "m2"}))
    assert sorted(len(v) for v in third.values()) == [3, 3, 4]
    for m in ("m1", "m3", "m4"):
        assert second[m] <= third[m]


def test_uniform_respects_subscriptions():
    result = flat(assign(UNIFORM, {"m1": ["ta"], "m2": ["tb"]}, TOPICS, {}))
    assert result == {"m1": {(A, p) for p in range(7)}, "m2": {(B, p) for p in range(3)}}


def test_range_gives_consecutive_ranges_per_topic_in_member_order():
    result = assign(RANGE, {"m2": ["ta", "tb"], "m1": ["ta", "tb"]}, TOPICS, {})
    assert result == {"m1": {A: {0, 1, 2, 3}, B: {0, 1}}, "m2": {A: {4, 5, 6}, B: {2}}}


def test_assignor_setting_names():
    assert assignor_names("uniform,range") == ["uniform", "range"]
    assert assignor_names("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == ["range"]
    with pytest.raises(ValueError):
        assignor_names("uniform,sticky")
