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

_HEAD = struct.Struct(">iiBihi")  # size (set last), correlation_id, tags; throttle, error_code, session_id
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted (null),
# preferred_read_replica
_PARTITION = struct.Struct(">ihqqqBi")
# (partition_index, high_watermark, last_stable_offset, log_start_offset, records)
Answered = tuple


def fetch_answer_frame(correlation_id: int, session_id: int, version: int, topics: list) -> list:
    """The frame's parts (size prefix included); `topics`: (name, topic id, [Answered]) in order.
    Records are bytes or a FileRegion (sent with sendfile)."""
    buf = bytearray(_HEAD.pack(0, correlation_id, 0, 0, 0, session_id))
    buf += _uvarint(len(topics) + 1)
    parts = []
    by_name = version <= 12
    pack = _PARTITION.pack
    for name, topic_id, answered in topics:
        buf += _compact_string(name) if by_name else topic_id
        buf += _uvarint(len(answered) + 1)
        for index, hw, lso, log_start, records in answered:
            buf += pack(index, 0, hw, lso, log_start, 0, -1)
            n = len(records)
            buf += _uvarint(n + 1)
            if n and not isinstance(records, (bytes, bytearray, memoryview)):
                parts.append(buf)
                parts.append(records)
                buf = bytearray()
            else:
                buf += records
            buf.append(0)
        buf.append(0)
    buf.append(0)
    parts.append(buf)
    parts[0][0:4] = (sum(len(p) for p in parts) - 4).to_bytes(4, "big")
    return parts


__all__ = ["Answered", "fetch_answer_frame"]
