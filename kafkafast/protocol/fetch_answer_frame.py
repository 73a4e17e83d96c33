"""A whole Fetch v12+ response frame written straight to its parts (no generated objects): the
answer of the leader's lean path for a follower's fetch (broker/handlers/fetch.py), whose
partitions carry no error, no aborted transactions and no preferred read replica. The same
parts' bytes as `api.encode_response` of the generated FetchResponse with `PartitionAnswer`s
(tests/unit/test_fetch_answer.py compares them):

    size int32, correlation_id int32, header tagged fields (none)
    throttle_time_ms int32 (0), error_code int16 (0), session_id int32
    responses [compact array]: topic compact_string (v12) | topic_id uuid (v13+),
        partitions [compact array]: partition_index int32, error_code int16 (0),
            high_watermark int64, last_stable_offset int64, log_start_offset int64,
            aborted_transactions (null), preferred_read_replica int32 (-1),
            records compact bytes (a FileRegion: its own part), tagged fields (none)
        tagged fields (none)
    tagged fields (none: no node_endpoints)
"""
from __future__ import annotations

import struct

from kafkafast.protocol.fetch_ask import _compact_string, _uvarint
from kafkafast.protocol.primitives import FileRegion

_HEAD = struct.Struct(">iiBihi")  # size (set last), correlation_id, tags; throttle, error_code, session_id
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted (null),
# preferred_read_replica
_PARTITION = struct.Struct(">ihqqqBi")
_VARINT2 = struct.Struct(">BB")
_VARINT3 = struct.Struct(">BBB")
# (partition_index, high_watermark, last_stable_offset, log_start_offset, records)
Answered = tuple


def _count(buf: bytearray, n: int) -> None:
    """A compact array's count (n + 1 as an unsigned varint) onto `buf`."""
    if n < 0x7f:
        buf.append(n + 1)
    else:
        buf += _uvarint(n + 1)


def fetch_answer_frame(correlation_id: int, session_id: int, version: int, topics: list) -> list:
    """The frame's parts (size prefix included); `topics`: (name, topic id, [Answered]) in order.
    Records are bytes or a FileRegion (sent with sendfile). The size is counted as the parts
    are made (a region's length taken once); an array count under 127 is one byte, appended."""
    buf = bytearray(_HEAD.pack(0, correlation_id, 0, 0, 0, session_id))
    _count(buf, len(topics))
    parts = []
    size = -4  # the frame's size, without its prefix
    by_name = version <= 12
    pack = _PARTITION.pack
    for name, topic_id, answered in topics:
        buf += _compact_string(name) if by_name else topic_id
        _count(buf, len(answered))
        for index, hw, lso, log_start, records in answered:
            buf += pack(index, 0, hw, lso, log_start, 0, -1)
            if type(records) is bytes and not records:
                buf.append(1)  # empty records: compact length 0
            else:
                n = records.length if type(records) is FileRegion else len(records)
                v = n + 1  # the compact length as an unsigned varint, up to 3 bytes (2 MiB) inline
                if v < 0x80:
                    buf.append(v)
                elif v < 0x4000:
                    buf += _VARINT2.pack(v & 0x7F | 0x80, v >> 7)
                elif v < 0x200000:
                    buf += _VARINT3.pack(v & 0x7F | 0x80, (v >> 7) & 0x7F | 0x80, v >> 14)
                else:
                    buf += _uvarint(v)
                if n and not isinstance(records, (bytes, bytearray, memoryview)):
                    size += len(buf) + n
                    parts.append(buf)
                    parts.append(records)
                    buf = bytearray()
                else:
                    buf += records
            buf.append(0)
        buf.append(0)
    buf.append(0)
    parts.append(buf)
    parts[0][0:4] = (size + len(buf)).to_bytes(4, "big")
    return parts


__all__ = ["Answered", "fetch_answer_frame"]
