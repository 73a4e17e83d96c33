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
from collections.abc import Callable
from typing import NamedTuple

from kafkafast.protocol.errors import CorruptMessageError
from kafkafast.records.batch import (
    ConsumerRecord,
    batch_crc_ok,
    decode_consumer_records,
    iter_entries,
    read_batch_header,
)
from kafkafast.records.compression import DecompressBuffer, decompress
from kafkafast.records.legacy import decode_legacy_entry
from kafkafast.records.model import BATCH_HEADER_SIZE, CODEC_NONE, BatchHeader, LegacyHeader, Record

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


def walk_fetched(
    buf: bytes | memoryview | None, start: int, end: int | None,
    on_batch: Callable[[BatchHeader, bytes | memoryview], object],
    on_legacy: Callable[[LegacyHeader, list[Record]], object], *,
    skip_batch: Callable[[BatchHeader], bool] | None = None, where: str = "", aborted: list | None = None,
    scratch: DecompressBuffer | None = None,
) -> int:
    """Walks a fetched record set and returns the offset to fetch next (past skipped
    control batches, and past the last complete batch); stops once that reaches `end`.

    Each v2 batch is CRC-checked; `on_batch(header, payload)` gets the uncompressed
    records payload (in place in `buf` when the batch is not compressed) of each batch
    that holds offsets at or past `start`, unless it is a control batch or
    `skip_batch(header)` says so (the hook for aborted transactions under read_committed).
    Legacy entries go to `on_legacy(header, records)`. A partial entry at the end is
    ignored (brokers truncate the last batch of a fetch response to max_bytes). `where`
    prefixes error messages.

    `aborted` (READ_COMMITTED): the fetch response's aborted transactions (producer id,
    first offset); a transactional batch of a producer whose aborted transaction began at
    or before the batch is skipped, until that producer's next control batch (Kafka's
    consumer algorithm).

    `scratch`: compressed batches are decompressed into this reusable buffer (the payload
    handed to `on_batch` is then valid only during the call), else into new bytes."""
    next_offset = start
    if not buf:
        return next_offset
    mv = memoryview(buf)
    pending = sorted(aborted, key=lambda a: a.first_offset, reverse=True) if aborted else None
    aborting: set[int] = set()
    for pos, size, magic in iter_entries(mv):
        if magic == 2:
            header = read_batch_header(mv, pos)
            if not batch_crc_ok(mv, pos, size):
                raise CorruptMessageError(f"{where}batch at offset {header.base_offset}: CRC32C mismatch")
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
            if batch_next > start and not header.is_control and not (skip_batch is not None and skip_batch(header)):
                payload: bytes | memoryview = mv[pos + BATCH_HEADER_SIZE : pos + size]
                if header.compression != CODEC_NONE:
                    payload = (decompress(header.compression, payload) if scratch is None
                               else scratch.decompress(header.compression, payload))
                on_batch(header, payload)
        elif magic in (0, 1):
            legacy, records = decode_legacy_entry(mv, pos)
            if records and records[-1].offset + 1 > next_offset:
                next_offset = records[-1].offset + 1
            on_legacy(legacy, records)
        else:
            raise CorruptMessageError(f"{where}unknown magic {magic} at {pos}")
        if end is not None and next_offset >= end:
            break
    return next_offset


def decode_fetched(
    buf: bytes | memoryview | None, topic: str, partition: int, start: int, end: int | None = None,
    out: list[ConsumerRecord] | None = None, aborted: list | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Records of a fetched record set with offsets in [start, end), and the offset to
    fetch next (`walk_fetched`); batches wholly before `start` are CRC-checked, not
    decoded. Records are appended to `out` when given: on CorruptMessageError it holds the
    records before the bad data. `aborted`: as for `walk_fetched` (READ_COMMITTED)."""
    records: list[ConsumerRecord] = [] if out is None else out
    stop = -1 if end is None else end

    def batch(header: BatchHeader, payload: bytes | memoryview) -> None:
        decode_consumer_records(payload, header.records_count, header.base_offset, header.first_timestamp,
                                header.max_timestamp if header.timestamp_type else -1,
                                topic, partition, start, stop, records)

    def legacy(header: LegacyHeader, entry: list[Record]) -> None:
        records.extend(ConsumerRecord(topic, partition, r.offset, r.timestamp, header.timestamp_type, r.key, r.value,
                                      r.headers)
                       for r in entry if start <= r.offset and (end is None or r.offset < end))

    return records, walk_fetched(buf, start, end, batch, legacy, where=f"{topic}-{partition}: ", aborted=aborted)


__all__ = ["ConsumerRecord", "RecordMetadata", "decode_fetched", "fetched_next_offset", "walk_fetched"]
