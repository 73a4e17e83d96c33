"""Records of one partition -> one Arrow RecordBatch in the source schema.

A column is built per field with one list comprehension over the records and handed to
Arrow in one call; the constant columns (topic, partition) are repeated scalars, and the
timestamp column is converted from milliseconds with one vectorised multiply. Spark then
receives the batch as Arrow, with no per-row Python work on its side.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def records_to_batch(topic: str, partition: int, records: Sequence[Any], schema: pa.Schema) -> pa.RecordBatch:
    """`records` have offset, timestamp (ms), timestamp_type, key, value and headers
    (list of (str, bytes | None)) attributes, as the kafkafast client returns them."""
    n = len(records)
    ts_ms = pa.array([r.timestamp for r in records], pa.int64())
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([r.offset for r in records], pa.int64()),
        pc.multiply(ts_ms, 1000).cast(schema.field("timestamp").type),
        pa.array([r.timestamp_type for r in records], pa.int32()),
    ]
    if len(schema) == 8:
        columns.append(_headers_column(records, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers_column(records: Sequence[Any], list_type: pa.ListType) -> pa.Array:
    offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    total = 0
    for r in records:
        for k, v in r.headers:
            keys.append(k if isinstance(k, str) else bytes(k).decode("utf-8", "replace"))
            values.append(None if v is None else bytes(v))
        total += len(r.headers)
        offsets.append(total)
    struct_type: pa.StructType = list_type.value_type
    entries = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(struct_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=list_type)
