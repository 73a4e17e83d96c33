"""The aborted-transaction index (`<base>.txnindex`, one per segment) and control records.

A transaction that ended with an ABORT marker is recorded in the index of the segment the
marker went to, so that a READ_COMMITTED fetch can tell the consumer which producer's
records to drop. Kafka's format: a flat sequence of 34-byte entries, big-endian::

    int16 version (0), int64 producer id, int64 first offset, int64 last offset (the
    marker's), int64 last stable offset (after the transaction completed)

Control records (the one record of a control batch): key = int16 version (0) + int16 type
(0 ABORT, 1 COMMIT); value = int16 version (0) + int32 coordinator epoch.

Entries are appended with one `os.write` each; readers in any process read the files of the
segments they need (`collect_aborted`), so no state is shared beyond the files.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from kafkafast.records import BatchBuilder, decode_batch

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
ABORT, COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def txn_index_path(dir: str, base_offset: int) -> str:
    return os.path.join(dir, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")


def read_entries(path: str) -> list[AbortedTxn]:
    """The whole entries of an index file ([] when missing; a torn tail is ignored)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return []
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != 0:
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def append_entry(path: str, entry: AbortedTxn) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, _ENTRY.pack(0, entry.producer_id, entry.first_offset, entry.last_offset,
                                 entry.last_stable_offset))
    finally:
        os.close(fd)


def rewrite(path: str, entries: list[AbortedTxn]) -> None:
    """Replace the file with `entries` (truncation, recovery); removed when empty."""
    if not entries:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        for e in entries:
            fh.write(_ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset))
    os.replace(tmp, path)


def collect_aborted(dir: str, segment_bases: list[int], fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """Kafka's collectAbortedTxns: the aborted transactions overlapping [fetch_offset,
    upper_offset), from the segment holding `fetch_offset` on (a transaction's entry sits in
    the segment of its marker, which is at or after the fetch offset when it overlaps)."""
    start = 0
    for i, base in enumerate(segment_bases):
        if base <= fetch_offset:
            start = i
    out = []
    for base in segment_bases[start:]:
        if base >= upper_offset and out:
            break
        for e in read_entries(txn_index_path(dir, base)):
            if e.last_offset >= fetch_offset and e.first_offset < upper_offset:
                out.append(e)
    return out


def control_batch(producer_id: int, producer_epoch: int, marker: int, coordinator_epoch: int,
                  timestamp: int) -> bytearray:
    """One control batch (transactional + control attributes) holding a COMMIT/ABORT marker."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                           is_transactional=True, is_control=True)
    builder.append(timestamp, _CONTROL_KEY.pack(0, marker), _CONTROL_VALUE.pack(0, coordinator_epoch))
    return bytearray(builder.build())


def control_marker(buf, pos: int = 0) -> tuple[int, int]:
    """The marker type (ABORT/COMMIT) and coordinator epoch of the control batch at `pos`;
    type -1 if it holds no marker, epoch -1 if its value carries none."""
    _h, records = decode_batch(buf, pos, check_crc=False)
    for rec in records:
        if rec.key is not None and len(rec.key) >= _CONTROL_KEY.size:
            kind = _CONTROL_KEY.unpack_from(bytes(rec.key), 0)[1]
            value = rec.value
            if value is None or len(value) < _CONTROL_VALUE.size:
                return kind, -1
            return kind, _CONTROL_VALUE.unpack_from(bytes(value), 0)[1]
    return -1, -1
