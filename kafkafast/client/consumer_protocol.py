"""The "consumer" embedded protocol: subscription and assignment bytes inside JoinGroup and
SyncGroup, byte for byte as Kafka's `ConsumerProtocol` writes them (so kafkafast, Java
and librdkafka consumers can share a group). All integers big-endian, not flexible.

    ConsumerProtocolSubscription =>
      version            int16   0..3 (we write 1; readers ignore fields past their version)
      topics             [string]            int32 count, int16-length strings
      user_data          nullable bytes      int32 length, -1 = null
      owned_partitions   [topic string, partitions [int32]]     v1+
      generation_id      int32 (default -1)                      v2+
      rack_id            nullable string                         v3+

    ConsumerProtocolAssignment =>
      version            int16
      assigned_partitions [topic string, partitions [int32]]
      user_data          nullable bytes

    StickyAssignorUserData (eager "sticky" assignor's user_data, Java's v1) =>
      previous_assignment [topic string, partitions [int32]]
      generation          int32
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafkafast.protocol.primitives import Reader, Writer

SUBSCRIPTION_VERSION = 1
ASSIGNMENT_VERSION = 1


@dataclass(slots=True)
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[tuple[str, int]] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = SUBSCRIPTION_VERSION


@dataclass(slots=True)
class Assignment:
    partitions: list[tuple[str, int]]
    user_data: bytes | None = None
    version: int = ASSIGNMENT_VERSION


def _write_tps(w: Writer, tps: list[tuple[str, int]]) -> None:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    w.int32(len(by_topic))
    for t in sorted(by_topic):
        w.string(t)
        parts = sorted(by_topic[t])
        w.int32(len(parts))
        for p in parts:
            w.int32(p)


def _read_tps(r: Reader) -> list[tuple[str, int]]:
    out = []
    for _ in range(max(r.int32(), 0)):
        t = r.string()
        for _ in range(max(r.int32(), 0)):
            out.append((t, r.int32()))
    return out


def encode_subscription(s: Subscription) -> bytes:
    w = Writer()
    v = s.version
    w.int16(v)
    w.int32(len(s.topics))
    for t in s.topics:
        w.string(t)
    w.nullable_bytes(s.user_data)
    if v >= 1:
        _write_tps(w, s.owned_partitions)
    if v >= 2:
        w.int32(s.generation_id)
    if v >= 3:
        w.nullable_string(s.rack_id)
    return w.getvalue()


def decode_subscription(data: bytes | memoryview) -> Subscription:
    r = Reader(data)
    v = r.int16()
    topics = [r.string() for _ in range(max(r.int32(), 0))]
    ud = r.nullable_bytes()
    s = Subscription(topics, None if ud is None else bytes(ud), version=v)
    if v >= 1 and r.remaining():
        s.owned_partitions = _read_tps(r)
    if v >= 2 and r.remaining():
        s.generation_id = r.int32()
    if v >= 3 and r.remaining():
        s.rack_id = r.nullable_string()
    return s


def encode_assignment(a: Assignment) -> bytes:
    w = Writer()
    w.int16(a.version)
    _write_tps(w, a.partitions)
    w.nullable_bytes(a.user_data)
    return w.getvalue()


def decode_assignment(data: bytes | memoryview | None) -> Assignment:
    if not data:
        return Assignment([])
    r = Reader(data)
    v = r.int16()
    tps = _read_tps(r)
    ud = r.nullable_bytes() if r.remaining() else None
    return Assignment(tps, None if ud is None else bytes(ud), version=v)


def encode_sticky_user_data(previous: list[tuple[str, int]], generation: int) -> bytes:
    w = Writer()
    _write_tps(w, previous)
    w.int32(generation)
    return w.getvalue()


def decode_sticky_user_data(data: bytes | None) -> tuple[list[tuple[str, int]], int]:
    if not data:
        return [], -1
    try:
        r = Reader(data)
        tps = _read_tps(r)
        gen = r.int32() if r.remaining() >= 4 else -1
        return tps, gen
    except (ValueError, struct.error, IndexError):
        return [], -1


__all__ = [
    "Assignment", "Subscription", "decode_assignment", "decode_sticky_user_data", "decode_subscription",
    "encode_assignment", "encode_sticky_user_data", "encode_subscription",
]
