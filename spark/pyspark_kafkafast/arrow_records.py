"""Arrow batches of the kafkafast client -> Arrow batches in the source schema.

The client decodes fetched record batches straight into Arrow columns
(`kafkafast.client.arrow`); here those columns are placed in Spark's Kafka-source order
without copying, next to the two constant columns (topic, partition), and the timestamp
column is converted from milliseconds to Spark's microseconds in one vectorised cast. No
per-record Python work happens on either side.
"""
from __future__ import annotations

import pyarrow as pa


def to_source_batch(topic: str, partition: int, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` (kafkafast.client.arrow.RECORD_SCHEMA, headers present when `schema` has
    them) as a RecordBatch of the source's Arrow `schema`."""
    n = batch.num_rows
    columns = [
        batch.column("key"),
        batch.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        batch.column("offset"),
        batch.column("timestamp").cast(schema.field("timestamp").type),
        batch.column("timestampType"),
    ]
    if len(schema) == 8:
        columns.append(batch.column("headers"))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
