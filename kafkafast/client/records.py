"""Records as the client hands them out, and the decoding of fetched record sets.

`ConsumerRecord` and `decode_consumer_records` come from the record codec twin (compiled
when built): each v2 batch of a fetched record set is CRC-checked and decompressed here,
then its records become ConsumerRecords in one call, straight from the batch bytes, with
no intermediate Record objects. Records before the requested offset (a fetch starts at
the batch holding it) and control batches are dropped. Legacy v0/v1 message sets are
decoded by `kafkafast.records.legacy`.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from kafkafast.protocol.errors import CorruptMessageError
from kafkafast.records.batch import (
    ConsumerRecord,
    batch_crc_ok,
    decode_consumer_records,
    iter_entries,
    read_batch_header,
)
from kafkafast.records.compression import decompress
from kafkafast.records.legacy import decode_legacy_entry
from kafkafast.records.model import BATCH_HEADER_SIZE, CODEC_NONE

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordMetadata(NamedTuple):
    """Where a produced record landed (offset -1 with acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def fetched_next_offset(buf: bytes | memoryview | None, start: int) -> int:
    """The offset to fetch after this record set: past its last complete entry (batch
    headers only: nothing is checked or decoded). `decode_fetched` agrees with it on
    record sets it accepts."""
    next_offset = start
    if not buf:
        return next_offset
    try:
        for pos, size, magic in iter_entries(buf):
            if magic == 2 and size >= BATCH_HEADER_SIZE:  # base offset + last offset delta + 1
                batch_next = _I64.unpack_from(buf, pos)[0] + _I32.unpack_from(buf, pos + 23)[0] + 1
            elif magic in (0, 1):  # a legacy entry's offset is its last record's
                batch_next = _I64.unpack_from(buf, pos)[0] + 1
            else:
                break
            if batch_next > next_offset:
                next_offset = batch_next
    except CorruptMessageError:
        pass  # decode_fetched reports corrupt data; this only reads headers
    return next_offset


def decode_fetched(
    buf: bytes | memoryview | None, topic: str, partition: int, start: int, end: int | None = None,
    out: list[ConsumerRecord] | None = None, aborted: list | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Records of a fetched record set with offsets in [start, end), and the offset to
    fetch next (past skipped control batches, and past the last complete batch).

    A partial entry at the end is ignored (brokers truncate the last batch of a fetch
    response to max_bytes); batches wholly before `start` are CRC-checked, not decoded.
    Records are appended to `out` when given: on CorruptMessageError it holds the
    records before the bad data.

    `aborted` (READ_COMMITTED): the fetch response's aborted transactions (producer id,
    first offset); a transactional batch of a producer whose aborted transaction began at
    or before the batch is skipped, until that producer's next control batch (Kafka's
    consumer algorithm)."""
    if out is None:
        out = []
    next_offset = start
    if not buf:
        return out, next_offset
    stop = -1 if end is None else end
    mv = memoryview(buf)
    pending = sorted(aborted, key=lambda a: a.first_offset, reverse=True) if aborted else None
    aborting: set[int] = set()
    for pos, size, magic in iter_entries(mv):
        if magic == 2:
            header = read_batch_header(mv, pos)
            if not batch_crc_ok(mv, pos, size):
                raise CorruptMessageError(f"{topic}-{partition}: batch at offset {header.base_offset}: CRC32C mismatch")
            batch_next = header.next_offset
            if batch_next > next_offset:
                next_offset = batch_next
            if pending is not None:
                while pending and pending[-1].first_offset < batch_next:
                    aborting.add(pending.pop().producer_id)
                if header.is_control:
                    aborting.discard(header.producer_id)
                    continue
                if header.is_transactional and header.producer_id in aborting:
                    continue
            if batch_next > start and not header.is_control:
                payload: bytes | memoryview = mv[pos + BATCH_HEADER_SIZE : pos + size]
                if header.compression != CODEC_NONE:
                    payload = decompress(header.compression, payload)
                decode_consumer_records(payload, header.records_count, header.base_offset, header.first_timestamp,
                                        header.max_timestamp if header.timestamp_type else -1,
                                        topic, partition, start, stop, out)
        elif magic in (0, 1):
            legacy, records = decode_legacy_entry(mv, pos)
            ts_type = legacy.timestamp_type
            if records and records[-1].offset + 1 > next_offset:
                next_offset = records[-1].offset + 1
            for r in records:
                if r.offset < start:
                    continue
                if end is not None and r.offset >= end:
                    break
                out.append(ConsumerRecord(topic, partition, r.offset, r.timestamp, ts_type, r.key, r.value, r.headers))
        else:
            raise CorruptMessageError(f"unknown magic {magic} at {pos}")
        if end is not None and next_offset >= end:
            break
    return out, next_offset


__all__ = ["ConsumerRecord", "RecordMetadata", "decode_fetched", "fetched_next_offset"]
