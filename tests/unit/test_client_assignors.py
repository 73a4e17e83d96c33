"""Group assignors (range, roundrobin, sticky) and the ConsumerProtocol byte layout."""
from __future__ import annotations

import random

from kafkafast.client.assignors import range_assign, roundrobin_assign, sticky_assign
from kafkafast.client.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    encode_sticky_user_data,
)


def subs(members: list[str], topics: list[str]) -> dict[str, Subscription]:
    return {m: Subscription(list(topics)) for m in members}


def parts(result: dict[str, list[tuple[str, int]]], member: str) -> list[int]:
    return [p for _t, p in result[member]]


def test_range_5_partitions_over_3_members_gives_2_2_1() -> None:
    r = range_assign({"T": 5}, subs(["C1-0", "C1-1", "C2-0"], ["T"]))
    assert [parts(r, m) for m in ("C1-0", "C1-1", "C2-0")] == [[0, 1], [2, 3], [4]]


def test_range_6_partitions_over_3_members_gives_2_2_2() -> None:
    r = range_assign({"T": 6}, subs(["C1-0", "C1-1", "C2-0"], ["T"]))
    assert [parts(r, m) for m in ("C1-0", "C1-1", "C2-0")] == [[0, 1], [2, 3], [4, 5]]


def test_range_works_per_topic() -> None:
    r = range_assign({"a": 3, "b": 3}, subs(["m1", "m2"], ["a", "b"]))
    assert r == {"m1": [("a", 0), ("a", 1), ("b", 0), ("b", 1)], "m2": [("a", 2), ("b", 2)]}


def test_roundrobin_deals_all_topic_partitions_in_turn() -> None:
    r = roundrobin_assign({"t0": 3, "t1": 3}, subs(["C0", "C1"], ["t0", "t1"]))
    assert r == {"C0": [("t0", 0), ("t0", 2), ("t1", 1)], "C1": [("t0", 1), ("t1", 0), ("t1", 2)]}


def test_roundrobin_skips_members_not_subscribed() -> None:
    s = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]), "C2": Subscription(["t0", "t1", "t2"])}
    r = roundrobin_assign({"t0": 1, "t1": 2, "t2": 3}, s)
    assert r == {"C0": [("t0", 0)], "C1": [("t1", 0)], "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def _complete_disjoint(result: dict[str, list], total: int) -> bool:
    flat = [tp for tps in result.values() for tp in tps]
    return len(flat) == total and len(set(flat)) == total


def test_sticky_is_balanced_and_complete() -> None:
    for n_members in range(1, 8):
        for n_parts in (1, 5, 12, 31):
            r = sticky_assign({"t": n_parts, "u": 3}, subs([f"m{i}" for i in range(n_members)], ["t", "u"]))
            counts = [len(v) for v in r.values()]
            assert max(counts) - min(counts) <= 1
            assert _complete_disjoint(r, n_parts + 3)


def test_sticky_moves_only_what_balance_requires_when_a_member_joins_or_leaves() -> None:
    rng = random.Random(5)
    topics = {"t": 24, "u": 6}
    members = ["a", "b", "c"]
    first = sticky_assign(topics, subs(members, list(topics)))
    # d joins: each old member keeps all but what d needs (30 / 4 -> 7 or 8 each)
    s = {m: Subscription(list(topics), owned_partitions=first[m], generation_id=1) for m in members}
    s["d"] = Subscription(list(topics))
    second = sticky_assign(topics, s)
    kept = sum(len(set(first[m]) & set(second[m])) for m in members)
    assert kept == 30 - len(second["d"]) and len(second["d"]) == 7
    # b leaves: only b's partitions move; the previous assignment also works from user data
    s = {m: Subscription(list(topics), user_data=encode_sticky_user_data(second[m], 2)) for m in ("a", "c", "d")}
    third = sticky_assign(topics, s)
    for m in ("a", "c", "d"):
        assert set(second[m]) <= set(third[m])
    assert _complete_disjoint(third, 30)
    rng.shuffle(members)


def test_subscription_bytes_match_kafka_consumer_protocol_v1() -> None:
    s = Subscription(["ab"], user_data=b"\x01", owned_partitions=[("ab", 2), ("ab", 1)])
    data = encode_subscription(s)
    assert data == (b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x02ab" + b"\x00\x00\x00\x01\x01"
                    + b"\x00\x00\x00\x01" + b"\x00\x02ab" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01\x00\x00\x00\x02")
    back = decode_subscription(data)
    assert (back.topics, back.user_data, sorted(back.owned_partitions)) == (["ab"], b"\x01", [("ab", 1), ("ab", 2)])


def test_subscription_v0_and_v3_decode() -> None:
    v0 = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    assert decode_subscription(v0).topics == ["t"]
    v3 = encode_subscription(Subscription(["t"], owned_partitions=[("t", 0)], generation_id=7, rack_id="r", version=3))
    s = decode_subscription(v3)
    assert (s.owned_partitions, s.generation_id, s.rack_id) == ([("t", 0)], 7, "r")


def test_assignment_round_trip_and_bytes() -> None:
    data = encode_assignment(Assignment([("t", 1), ("t", 0)], version=0))
    assert data == b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02" + \
        b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\xff\xff\xff\xff"
    assert decode_assignment(data).partitions == [("t", 0), ("t", 1)]
    assert decode_assignment(b"").partitions == []
