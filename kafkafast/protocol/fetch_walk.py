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
# correlation_id, no header tagged fields (the byte 0), throttle_time_ms, error_code, session_id
_TOP = struct.Struct(">iBihi")
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset: read at once
_PARTITION_HEAD = struct.Struct(">ihqqq")
# the same, then a null or empty aborted_transactions (the one byte 0 or 1) and
# preferred_read_replica: a follower's usual partition (read_uncommitted), read at once
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
        if r.end >= _TOP.size and r.buf[4] == 0:  # no tagged fields in the header: read at once
            _, _, self.throttle_time_ms, self.error_code, self.session_id = _TOP.unpack_from(r.buf, 0)
            r.pos = _TOP.size
        else:
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
            buf, end = r.buf, r.end
            for _ in range(r.compact_array_length()):
                pos = r.pos
                if end - pos >= _PLAIN_HEAD.size and buf[pos + _PARTITION_HEAD.size] <= 1:
                    partition, error_code, high_watermark, last_stable_offset, log_start_offset, n, _ = \
                        _PLAIN_HEAD.unpack_from(buf, pos)
                    pos += _PLAIN_HEAD.size
                    aborted = None if n == 0 else []
                else:
                    partition, error_code, high_watermark, last_stable_offset, log_start_offset = \
                        _PARTITION_HEAD.unpack_from(buf, r._take(_PARTITION_HEAD.size))
                    n = r.compact_array_length()
                    aborted = None if n < 0 else [_aborted(r) for _ in range(n)]
                    r.int32()  # preferred_read_replica: consumers only (KIP-392)
                    pos = r.pos
                # records: compact nullable bytes, its length's varint read here when it takes one to
                # three bytes (up to 2 MiB: a partition's answer up to replica.fetch.max.bytes), then
                # no tagged fields (one 0 byte): the usual partition takes no Reader calls
                size = -1
                if end - pos >= 3:
                    b0, b1, b2 = buf[pos], buf[pos + 1], buf[pos + 2]
                    if b0 < 0x80:
                        size, pos = b0, pos + 1
                    elif b1 < 0x80:
                        size, pos = (b0 & 0x7F) | b1 << 7, pos + 2
                    elif b2 < 0x80:
                        size, pos = (b0 & 0x7F) | (b1 & 0x7F) << 7 | b2 << 14, pos + 3
                if size < 0:  # longer, or near the end of the frame
                    r.pos = pos
                    size = r.uvarint()
                    pos = r.pos
                if size:
                    size -= 1
                    if pos + size > end:
                        raise DecodeError(f"need {size} bytes at {pos}, have {end - pos}")
                    records = buf[pos:pos + size]
                    pos += size
                else:
                    records = None
                if pos < end and buf[pos] == 0:  # no tagged fields
                    r.pos = pos + 1
                else:
                    r.pos = pos
                    r.skip_tagged_fields()
                yield FetchedPartition(topic, partition, error_code, high_watermark, last_stable_offset,
                                       log_start_offset, aborted, records)
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        if r.remaining():
            raise DecodeError(f"{r.remaining()} bytes after the Fetch answer")


__all__ = ["FETCH_WALK_VERSION", "FetchAnswer", "FetchedPartition"]
