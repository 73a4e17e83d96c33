"""A Fetch v12 response walked in place: the fields a replica follower uses, and each
partition's records as a view of the response bytes (no generated objects, no copies).

The frame is the response without its size prefix (`BrokerConnection.send_frame`):

    ResponseHeader v1   correlation_id int32, tagged fields
    throttle_time_ms int32, error_code int16, session_id int32
    responses [compact array]
        topic compact_string
        partitions [compact array]
            partition_index int32, error_code int16, high_watermark int64,
            last_stable_offset int64, log_start_offset int64,
            aborted_transactions [compact nullable array of (producer_id int64, first_offset int64,
                tagged fields)],
            preferred_read_replica int32, records compact_nullable_bytes,
            tagged fields (0 diverging_epoch, 1 current_leader, 2 snapshot_id)
        tagged fields
    tagged fields

Lengths are checked against the bytes that arrived (`Reader`); a malformed answer raises
`DecodeError`, as the generated decoder does.
"""
from __future__ import annotations

import struct
from typing import Iterator

from kafkafast.protocol.primitives import DecodeError, Reader

FETCH_WALK_VERSION = 12
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset: read at once
_PARTITION_HEAD = struct.Struct(">ihqqq")
# the same, then a null aborted_transactions (the one byte 0) and preferred_read_replica: a
# follower's usual partition (read_uncommitted), read at once
_PLAIN_HEAD = struct.Struct(">ihqqqBi")


def _aborted(r: Reader) -> tuple[int, int]:
    """One aborted transaction: producer_id int64, first_offset int64, tagged fields."""
    entry = (r.int64(), r.int64())
    r.skip_tagged_fields()
    return entry


class FetchedPartition:
    """One partition of a Fetch answer; `records` is a view of the answer's bytes, valid as long
    as the frame it was walked from."""

    __slots__ = ("topic", "partition", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "aborted", "records")

    def __init__(self, topic: str, partition: int, error_code: int, high_watermark: int, last_stable_offset: int,
                 log_start_offset: int, aborted: list[tuple[int, int]] | None, records: memoryview | None) -> None:
        self.topic = topic
        self.partition = partition
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted = aborted
        self.records = records


class FetchAnswer:
    """The top level of a Fetch answer; `partitions()` walks the rest once."""

    __slots__ = ("throttle_time_ms", "error_code", "session_id", "_reader")

    def __init__(self, frame: bytes | bytearray | memoryview) -> None:
        r = Reader(frame)
        r.int32()  # correlation id: matched by the connection
        r.skip_tagged_fields()
        self.throttle_time_ms = r.int32()
        self.error_code = r.int16()
        self.session_id = r.int32()
        self._reader = r

    def partitions(self) -> Iterator[FetchedPartition]:
        r = self._reader
        for _ in range(r.compact_array_length()):
            topic = r.compact_string()
            buf = r.buf
            for _ in range(r.compact_array_length()):
                pos = r.pos
                if r.end - pos >= _PLAIN_HEAD.size and buf[pos + _PARTITION_HEAD.size] == 0:
                    partition, error_code, high_watermark, last_stable_offset, log_start_offset, _, _ = \
                        _PLAIN_HEAD.unpack_from(buf, pos)
                    r.pos = pos + _PLAIN_HEAD.size
                    aborted = None
                else:
                    partition, error_code, high_watermark, last_stable_offset, log_start_offset = \
                        _PARTITION_HEAD.unpack_from(buf, r._take(_PARTITION_HEAD.size))
                    n = r.compact_array_length()
                    aborted = None if n < 0 else [_aborted(r) for _ in range(n)]
                    r.int32()  # preferred_read_replica: consumers only (KIP-392)
                records = r.compact_nullable_bytes()
                if r.pos < r.end and buf[r.pos] == 0:  # no tagged fields
                    r.pos += 1
                else:
                    r.skip_tagged_fields()
                yield FetchedPartition(topic, partition, error_code, high_watermark, last_stable_offset,
                                       log_start_offset, aborted, records)
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        if r.remaining():
            raise DecodeError(f"{r.remaining()} bytes after the Fetch answer")


__all__ = ["FETCH_WALK_VERSION", "FetchAnswer", "FetchedPartition"]
