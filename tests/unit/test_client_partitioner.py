"""Partitioners: murmur2 equals Java's Utils.murmur2; keyless strategies spread as specified."""
from __future__ import annotations

import pytest

from kafkafast.client.partitioner import Partitioner, murmur2, murmur2_partition

# Kafka's UtilsTest.testMurmur2 vectors (signed int32 as Java prints them).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_java_utils(key: bytes, expected: int) -> None:
    h = murmur2(key)
    assert (h - (1 << 32) if h >= 1 << 31 else h) == expected


def test_murmur2_partition_is_to_positive_mod_n() -> None:
    assert murmur2_partition(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_round_robin_deals_partitions_in_turn() -> None:
    p = Partitioner("round_robin")
    assert [p("t", None, 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_sticky_keeps_one_partition_until_new_batch() -> None:
    p = Partitioner("default")
    first = p("t", None, 5)
    assert {p("t", None, 5) for _ in range(100)} == {first}
    p.on_new_batch("t", 5, first)
    second = p("t", None, 5)
    assert second != first and {p("t", None, 5) for _ in range(10)} == {second}


def test_keyed_records_use_murmur2_with_default_partitioner() -> None:
    p = Partitioner("default")
    assert [p("t", b"k%d" % i, 12) for i in range(50)] == [murmur2_partition(b"k%d" % i, 12) for i in range(50)]


def test_callable_partitioner_gets_key_and_count() -> None:
    p = Partitioner(lambda key, n: len(key or b"") % n)
    assert p("t", b"abcd", 3) == 1 and p("t", None, 3) == 0
