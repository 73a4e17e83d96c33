"""A Fetch answer's partition (v12+, flexible versions) written straight into the answer's bytes:
the mirror of `fetch_walk`, which reads them on the follower.

`PartitionAnswer` stands for the generated `FetchResponse.PartitionData` of a partition answered
without an error (no diverging epoch, current leader or snapshot id: its tagged fields are
empty) and encodes to the same bytes (tests/unit/test_fetch_answer.py compares them); it is
built without the generated object's nested defaults and encoded with one pack of its fixed
fields. Records may be a `FileRegion` (its own part, sent with sendfile).
"""
from __future__ import annotations

import struct
from typing import Any

from kafkafast.protocol.primitives import FileRegion, Writer

FLEXIBLE_VERSION = 12
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_HEAD = struct.Struct(">ihqqq")
_I32 = struct.Struct(">i")


class PartitionAnswer:
    """One partition of a Fetch answer (v12+) with error_code 0: the fields that
    `FetchResponse.PartitionData` names, read the same way by the handler and the session."""

    __slots__ = ("partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "aborted_transactions", "preferred_read_replica", "records")

    def __init__(self, partition_index: int, high_watermark: int, last_stable_offset: int, log_start_offset: int,
                 aborted_transactions: list | None, records: bytes | FileRegion) -> None:
        self.partition_index = partition_index
        self.error_code = 0
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions
        self.preferred_read_replica = -1
        self.records = records

    def encode(self, w: Writer, version: int) -> None:
        """The bytes `FetchResponse.PartitionData.encode` writes for the same fields (v12+)."""
        w.buf += _HEAD.pack(self.partition_index, self.error_code, self.high_watermark, self.last_stable_offset,
                            self.log_start_offset)
        aborted: Any = self.aborted_transactions
        if aborted is None:
            w.buf.append(0)
        else:
            w.compact_array_length(len(aborted))
            for item in aborted:
                item.encode(w, version)
        w.buf += _I32.pack(self.preferred_read_replica)
        w.records(self.records, True)
        w.buf.append(0)  # no tagged fields


__all__ = ["FLEXIBLE_VERSION", "PartitionAnswer"]
