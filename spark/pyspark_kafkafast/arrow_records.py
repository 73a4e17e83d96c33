"""Arrow batches of the kafkafast client -> Arrow batches in the source schema.

The client decodes fetched record batches straight into Arrow columns
(`kafkafast.client.arrow`), with timestamps already in Spark's microseconds
(`timestamp_unit="us"`); here those columns are placed in Spark's Kafka-source order
without copying, next to the two constant columns (topic, partition), which are built once
per task and sliced (zero-copy) for each batch. No per-record Python work and no cast
happens on either side.

Those two columns are assembled from raw buffers rather than with `pa.array`/`pa.scalar`:
converting Python objects makes pyarrow import pandas (about a quarter of a second, and more
on a busy machine), which a Spark Python worker otherwise never loads.
"""
from __future__ import annotations

import array

import pyarrow as pa


def repeated_string(value: str, n: int) -> pa.Array:
    """A string array of `n` copies of `value`, built from its buffers."""
    data = value.encode()
    offsets = array.array("i", range(0, (n + 1) * len(data), len(data))) if data else array.array("i", [0]) * (n + 1)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def repeated_int32(value: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array.array("i", [value]) * n)])


class _Constants:
    """The topic and partition columns of one task, as long as the longest batch so far."""

    __slots__ = ("key", "topic", "partition")

    def __init__(self) -> None:
        self.key: tuple[str, int] | None = None
        self.topic: pa.Array | None = None
        self.partition: pa.Array | None = None

    def columns(self, topic: str, partition: int, n: int) -> tuple[pa.Array, pa.Array]:
        if self.topic is None or self.partition is None or self.key != (topic, partition) or len(self.topic) < n:
            self.key = (topic, partition)
            self.topic = repeated_string(topic, n)
            self.partition = repeated_int32(partition, n)
        if len(self.topic) == n:
            return self.topic, self.partition
        return self.topic.slice(0, n), self.partition.slice(0, n)


_constants = _Constants()


def to_source_batch(topic: str, partition: int, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` (kafkafast.client.arrow.record_schema, headers present when `schema` has
    them) as a RecordBatch of the source's Arrow `schema`."""
    n = batch.num_rows
    topics, partitions = _constants.columns(topic, partition, n)
    timestamps = batch.column("timestamp")
    ts_type = schema.field("timestamp").type
    if timestamps.type != ts_type:  # batches decoded with timestamp_unit="ms"
        timestamps = timestamps.cast(ts_type)
    columns = [
        batch.column("key"),
        batch.column("value"),
        topics,
        partitions,
        batch.column("offset"),
        timestamps,
        batch.column("timestampType"),
    ]
    if len(schema) == 8:
        columns.append(batch.column("headers"))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
