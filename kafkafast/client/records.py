"""Records as the client hands them out, and the decoding of fetched record sets.

Decoding is done by `kafkafast.records.iter_record_batches` (compiled twin, every codec,
legacy v0/v1 too); here the records of each batch are wrapped with their topic, partition
and the batch's timestamp type, records before the requested offset (a fetch starts at
the batch holding it) and control batches are dropped.
"""
from __future__ import annotations

from typing import NamedTuple

from kafkafast.records import iter_record_batches
from kafkafast.records.model import BatchHeader, Record


class ConsumerRecord:
    """One record read from a partition."""

    __slots__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int, timestamp_type: int,
                 key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return (f"ConsumerRecord({self.topic!r}, {self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)


class RecordMetadata(NamedTuple):
    """Where a produced record landed (offset -1 with acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def decode_fetched(
    buf: bytes | memoryview | None, topic: str, partition: int, start: int, end: int | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Records of a fetched record set with offsets in [start, end), and the offset to
    fetch next (past skipped control batches, and past the last complete batch)."""
    out: list[ConsumerRecord] = []
    next_offset = start
    if not buf:
        return out, next_offset
    append = out.append
    for header, records in iter_record_batches(buf):
        if isinstance(header, BatchHeader):
            if header.next_offset > next_offset:
                next_offset = header.next_offset
            if header.is_control:
                continue
            ts_type = header.timestamp_type
        else:
            ts_type = header.timestamp_type
            if records and records[-1].offset + 1 > next_offset:
                next_offset = records[-1].offset + 1
        r: Record
        for r in records:
            off = r.offset
            if off < start:
                continue
            if end is not None and off >= end:
                break
            append(ConsumerRecord(topic, partition, off, r.timestamp, ts_type, r.key, r.value, r.headers))
        if end is not None and next_offset >= end:
            break
    return out, next_offset


__all__ = ["ConsumerRecord", "RecordMetadata", "decode_fetched"]
