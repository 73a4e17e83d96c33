"""Partitioners: which partition a record goes to.

Keyed records, by name (librdkafka's partitioner names and hashes, plus Java's):
* `murmur2`, `murmur2_random`, `default`, `sticky`: the Java client's key hash,
  `toPositive(murmur2(key)) % n` with seed 0x9747b28c (Java's default partitioner);
* `consistent`, `consistent_random`: CRC-32 (IEEE, as zlib) of the key, unsigned, `% n`
  (librdkafka's default partitioner is `consistent_random`);
* `fnv1a`, `fnv1a_random`: 32-bit FNV-1a of the key (librdkafka's: absolute value of the
  signed hash), `% n`;
* `random`: a random partition; `round_robin`: partitions in turn;
* or any callable `partition(key, num_partitions) -> int`.

Keyless (null key) records go to a sticky partition (one partition until its batch is
sent, then another) with every named partitioner except `random` and `round_robin`, as
librdkafka does for all of its partitioners but `random` (sticky.partitioning) and Java
since 2.4. An empty key is hashed like any other, except with `consistent_random`, which
treats it as no key (librdkafka does the same).
"""
from __future__ import annotations

import random
import struct
import zlib
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


def fnv1a(data: bytes | bytearray | memoryview) -> int:
    """32-bit FNV-1a (offset basis 0x811c9dc5, prime 0x01000193), then the absolute value
    of it read as a signed int32 - librdkafka's variant, which matches Sarama's hash
    partitioner."""
    h = 0x811C9DC5
    for b in bytes(data):
        h = ((h ^ b) * 0x01000193) & _MASK
    return (1 << 32) - h if h & 0x80000000 else h


def _murmur2_hash(key: bytes) -> int:
    return murmur2(key) & 0x7FFFFFFF


KEY_HASHES: dict[str, Callable[[bytes], int]] = {"murmur2": _murmur2_hash, "crc32": zlib.crc32, "fnv1a": fnv1a}

PartitionFn = Callable[[bytes | None, int], int]


class Partitioner:
    """Chooses partitions; `on_new_batch(topic)` moves a sticky topic to another partition."""

    __slots__ = ("keyed", "keyless", "empty_key_is_no_key", "_hash", "_sticky", "_rr", "_callable")

    def __init__(self, kind: str | PartitionFn = "default") -> None:
        self._sticky: dict[str, int] = {}
        self._rr: dict[str, int] = {}
        self._callable: PartitionFn | None = None
        self._hash: Callable[[bytes], int] | None = None
        self.empty_key_is_no_key = kind == "consistent_random"
        if callable(kind):
            self._callable = kind
            self.keyed = self.keyless = "callable"
            return
        keyed, keyless = {
            "default": ("murmur2", "sticky"),
            "sticky": ("murmur2", "sticky"),
            "murmur2": ("murmur2", "sticky"),
            "murmur2_random": ("murmur2", "sticky"),
            "consistent": ("crc32", "sticky"),
            "consistent_random": ("crc32", "sticky"),
            "fnv1a": ("fnv1a", "sticky"),
            "fnv1a_random": ("fnv1a", "sticky"),
            "round_robin": ("round_robin", "round_robin"),
            "roundrobin": ("round_robin", "round_robin"),
            "random": ("random", "random"),
        }.get(kind, (None, None))
        if keyed is None or keyless is None:
            raise ValueError(f"unknown partitioner {kind!r}")
        self.keyed, self.keyless = keyed, keyless
        self._hash = KEY_HASHES.get(keyed)

    def is_keyless(self, key: bytes | None) -> bool:
        """Whether `key` is partitioned as no key (None; b"" with consistent_random)."""
        return key is None or (self.empty_key_is_no_key and not key)

    def __call__(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if self._callable is not None:
            return self._callable(key, num_partitions)
        if not self.is_keyless(key):
            if self._hash is not None:
                return self._hash(key) % num_partitions  # type: ignore[arg-type]
            how = self.keyed
        else:
            how = self.keyless
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


__all__ = ["Partitioner", "PartitionFn", "fnv1a", "murmur2", "murmur2_partition"]
