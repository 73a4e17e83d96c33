"""Partitioners: which partition a record goes to.

* `murmur2`: the Java client's key hash, `toPositive(murmur2(key)) % n` with seed
  0x9747b28c (same partition as Java's default partitioner and librdkafka's
  `murmur2_random` for every key).
* keyless records: `sticky` (Java's default since 2.4: one partition until its batch is
  sent, then another), `round_robin`, `random`.
* named choices: "default" (murmur2, sticky when keyless), "murmur2_random" (murmur2,
  random when keyless, librdkafka's name), "murmur2", "round_robin", "random", "sticky",
  or any callable `partition(key, num_partitions) -> int`.
"""
from __future__ import annotations

import random
import struct
from collections.abc import Callable

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Java's `Utils.murmur2` as an unsigned 32-bit value."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from(f"<{n4}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        i = n4 << 2
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """`toPositive(murmur2(key)) % num_partitions`, as Java's default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


PartitionFn = Callable[[bytes | None, int], int]


class Partitioner:
    """Chooses partitions; `on_new_batch(topic)` moves a sticky topic to another partition."""

    __slots__ = ("keyed", "keyless", "_sticky", "_rr", "_callable")

    def __init__(self, kind: str | PartitionFn = "default") -> None:
        self._sticky: dict[str, int] = {}
        self._rr: dict[str, int] = {}
        self._callable: PartitionFn | None = None
        if callable(kind):
            self._callable = kind
            self.keyed = self.keyless = "callable"
            return
        keyed, keyless = {
            "default": ("murmur2", "sticky"),
            "murmur2": ("murmur2", "sticky"),
            "murmur2_random": ("murmur2", "random"),
            "consistent_random": ("murmur2", "random"),
            "sticky": ("murmur2", "sticky"),
            "round_robin": ("round_robin", "round_robin"),
            "roundrobin": ("round_robin", "round_robin"),
            "random": ("random", "random"),
        }.get(kind, (None, None))
        if keyed is None or keyless is None:
            raise ValueError(f"unknown partitioner {kind!r}")
        self.keyed, self.keyless = keyed, keyless

    def __call__(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if self._callable is not None:
            return self._callable(key, num_partitions)
        how = self.keyless if key is None else self.keyed
        if how == "murmur2":
            return (murmur2(key) & 0x7FFFFFFF) % num_partitions  # type: ignore[arg-type]
        if how == "sticky":
            p = self._sticky.get(topic)
            if p is None or p >= num_partitions:
                p = self._sticky[topic] = random.randrange(num_partitions)
            return p
        if how == "round_robin":
            p = self._rr.get(topic, -1) + 1
            self._rr[topic] = p
            return p % num_partitions
        return random.randrange(num_partitions)

    def sticky_partition(self, topic: str) -> int | None:
        return self._sticky.get(topic) if self.keyless == "sticky" else None

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        """A batch for the sticky partition filled up: move keyless records elsewhere."""
        if self.keyless != "sticky" or self._sticky.get(topic) != previous:
            return
        if num_partitions > 1:
            p = random.randrange(num_partitions - 1)
            self._sticky[topic] = p if p < previous else p + 1


__all__ = ["Partitioner", "PartitionFn", "murmur2", "murmur2_partition"]
