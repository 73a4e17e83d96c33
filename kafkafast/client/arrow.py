"""Fetched record sets of one partition -> `pyarrow.RecordBatch`es, with no Python object
per record.

`decode_fetched_arrow` walks a fetched record set with `records.walk_fetched` (as
`decode_fetched` does: CRC check, control batches skipped, a partial last batch ignored,
legacy entries read) and hands each v2 batch's records payload to an `ArrowColumns` of
the arrow_decode twin (compiled when built; `kafkafast.native.load("arrow_decode")`),
which appends the fields
straight to Arrow column buffers: an uncompressed batch is read in place from the fetched
buffer, a compressed one from its decompressed payload, and every key, value and header
byte is copied once, into its column. `record_batches` makes the Arrow arrays from those
buffers (`pa.Array.from_buffers` over `pa.py_buffer`, no copy) and cuts them into batches of
at most `max_records` rows.

The schema (`RECORD_SCHEMA`) has the column names of Spark's Kafka source:

    offset int64, timestamp timestamp[ms, UTC], timestampType int32 (0 CreateTime,
    1 LogAppendTime), key binary, value binary,
    headers list<struct<key: string, value: binary>> (only with include_headers)

Needs pyarrow (`pip install kafkafast[arrow]`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from kafkafast import native
from kafkafast.client.records import walk_fetched
from kafkafast.records.compression import DecompressBuffer
from kafkafast.records.model import BatchHeader

_twin = native.load("arrow_decode")
ArrowColumns = _twin.ArrowColumns

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
RECORD_SCHEMA = pa.schema([
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADERS_TYPE),
])
RECORD_SCHEMA_NO_HEADERS = pa.schema(list(RECORD_SCHEMA)[:5])
TIMESTAMP_TYPES = {"ms": TIMESTAMP_TYPE, "us": pa.timestamp("us", tz="UTC")}
_SCHEMAS = {(h, unit): pa.schema([f.with_type(TIMESTAMP_TYPES[unit]) if f.name == "timestamp" else f
                                  for f in (RECORD_SCHEMA if h else RECORD_SCHEMA_NO_HEADERS)])
            for h in (False, True) for unit in TIMESTAMP_TYPES}


def record_schema(include_headers: bool = True, timestamp_unit: str = "ms") -> pa.Schema:
    """RECORD_SCHEMA (or without headers), with timestamps in `timestamp_unit` ("ms", or
    "us" as Spark's TimestampType)."""
    return _SCHEMAS[(include_headers, timestamp_unit)]


# Columns are taken once they hold this many key/value/header bytes, whatever max_records
# says, so int32 Arrow offsets never overflow and memory stays bounded.
MAX_COLUMN_BYTES = 256 * 1024 * 1024

DEFAULT_MAX_RECORDS = 10_000


def decode_fetched_arrow(columns: Any, buf: bytes | memoryview | None, start: int, end: int | None = None, *,
                         skip_batch: Callable[[BatchHeader], bool] | None = None, aborted: list | None = None,
                         scratch: DecompressBuffer | None = None) -> int:
    """Adds the records of a fetched record set with offsets in [start, end) to `columns`
    (an ArrowColumns); returns the offset to fetch next. The walk (CRC checks, control
    batches, aborted transactions and `skip_batch`, partial last batch) is `records.walk_fetched`; a malformed
    record raises CorruptMessageError. `scratch`: the reusable buffer compressed batches are
    decompressed into (one per reader, kept across calls), else new bytes per batch."""
    stop = -1 if end is None else end

    def batch(header: BatchHeader, payload: bytes | memoryview) -> None:
        columns.add_records(payload, header.records_count, header.base_offset, header.first_timestamp,
                            header.max_timestamp if header.timestamp_type else -1, start, stop)

    def legacy(header: Any, records: list) -> None:
        for r in records:
            if start <= r.offset and (end is None or r.offset < end):
                columns.add_record(r.offset, r.timestamp, header.timestamp_type, r.key, r.value, r.headers)

    return walk_fetched(buf, start, end, batch, legacy, skip_batch=skip_batch, aborted=aborted, scratch=scratch)


def _binary(type_: pa.DataType, n: int, nulls: int, offsets: Any, data: Any, valid: Any) -> pa.Array:
    return pa.Array.from_buffers(type_, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offsets),
                                            pa.py_buffer(data)], null_count=nulls)


def to_record_batch(taken: tuple, include_headers: bool, timestamp_unit: str = "ms") -> pa.RecordBatch:
    """The RecordBatch (`record_schema(include_headers, timestamp_unit)`) of what
    `ArrowColumns.take()` handed out."""
    n, nh, key_nulls, value_nulls, hvalue_nulls, b = taken
    schema = record_schema(include_headers, timestamp_unit)
    arrays = [
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(b[0])]),
        pa.Array.from_buffers(TIMESTAMP_TYPES[timestamp_unit], n, [None, pa.py_buffer(b[1])]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(b[2])]),
        _binary(pa.binary(), n, key_nulls, b[3], b[4], b[5]),
        _binary(pa.binary(), n, value_nulls, b[6], b[7], b[8]),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    struct_type = HEADERS_TYPE.value_type
    entries = pa.Array.from_buffers(struct_type, nh, [None], children=[
        _binary(pa.string(), nh, 0, b[10], b[11], None),
        _binary(pa.binary(), nh, hvalue_nulls, b[12], b[13], b[14]),
    ])
    arrays.append(pa.Array.from_buffers(HEADERS_TYPE, n, [None, pa.py_buffer(b[9])], children=[entries]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def record_batches(columns: Any, max_records: int = DEFAULT_MAX_RECORDS) -> Iterator[pa.RecordBatch]:
    """Takes what `columns` holds and yields it as RecordBatches of at most `max_records`
    rows (zero-copy slices of one batch); nothing when it holds no records."""
    if not len(columns):
        return
    batch = to_record_batch(columns.take(), columns.include_headers, columns.timestamp_unit)
    for i in range(0, batch.num_rows, max_records):
        yield batch.slice(i, max_records)


def columns_full(columns: Any, max_records: int) -> bool:
    """Whether `columns` should be taken now: max_records rows, or MAX_COLUMN_BYTES of data."""
    return len(columns) >= max_records or columns.data_bytes >= MAX_COLUMN_BYTES


__all__ = ["ArrowColumns", "DEFAULT_MAX_RECORDS", "DecompressBuffer", "HEADERS_TYPE", "RECORD_SCHEMA",
           "RECORD_SCHEMA_NO_HEADERS", "columns_full", "decode_fetched_arrow", "record_batches", "record_schema",
           "to_record_batch"]
