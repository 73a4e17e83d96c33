"""Batch and streaming writers of the `kafkafast` sink.

Each Spark task receives Arrow batches with the columns `value` (required), `key`,
`topic` (unless the `topic` option is set, which wins, as in Spark), `partition` and
`headers`; it produces every row with the kafkafast producer (batching, compression and
acks from the `kafka.*` options) and flushes before returning its commit message, so a
committed task has every record acknowledged. Rows without a partition are placed by the
producer's default partitioner (murmur2 of the key; sticky for null keys).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from pyspark_kafkafast.options import SinkOptions
from pyspark_kafkafast.schema import validate_sink_schema


@dataclass
class ProducedRecords(WriterCommitMessage):
    records: int


class ProduceError(RuntimeError):
    """A record could not be delivered; the task fails and Spark retries or aborts."""


def _column(batch: pa.RecordBatch, names: dict[str, int], name: str, binary: bool = False) -> list[Any] | None:
    i = names.get(name)
    if i is None:
        return None
    col = batch.column(i)
    if binary and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        col = col.cast(pa.binary())
    return col.to_pylist()


def rows_of(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[tuple[str, bytes | None, bytes | None,
                                                                               int | None, list | None]]:
    """(topic, key, value, partition, headers) per row, with Spark's null-topic check."""
    n = batch.num_rows
    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    values = _column(batch, names, "value", binary=True)
    assert values is not None
    keys = _column(batch, names, "key", binary=True) or [None] * n
    topics = [topic_option] * n if topic_option is not None else _column(batch, names, "topic")
    assert topics is not None
    partitions = _column(batch, names, "partition") or [None] * n
    headers = _column(batch, names, "headers") or [None] * n
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise ValueError("null topic present in the data. Use the topic option for setting a topic.")
        h = headers[i]
        yield (topic, keys[i], values[i], partitions[i],
               [(e["key"], e["value"]) for e in h] if h else None)


async def produce_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    from kafkafast.client.producer import AIOProducer

    producer = AIOProducer(opts.bootstrap, client_id="kafkafast-spark-writer", acks=opts.acks,
                           compression_type=opts.compression, linger_ms=opts.linger_ms,
                           batch_size=opts.batch_size)
    await producer.start()
    failures: list[BaseException] = []

    def delivered(fut: Any) -> None:
        try:
            fut.result()
        except BaseException as exc:  # noqa: BLE001 - collected, re-raised after flush
            failures.append(exc)

    count = 0
    try:
        for batch in batches:
            for topic, key, value, partition, headers in rows_of(batch, opts.topic):
                fut = await producer.send(topic, value, key, headers=headers, partition=partition)
                fut.add_done_callback(delivered)
                count += 1
            if failures:
                break
            await asyncio.sleep(0)  # let the sender drain while Spark prepares the next batch
        await producer.flush()
    finally:
        await producer.close()
    if failures:
        raise ProduceError(f"{len(failures)} record(s) not delivered; first error: {failures[0]!r}")
    return count


class KafkaFastBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_sink_schema(schema, opts.topic)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return ProducedRecords(asyncio.run(produce_batches(self.opts, iterator)))


class KafkaFastStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_sink_schema(schema, opts.topic)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return ProducedRecords(asyncio.run(produce_batches(self.opts, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Records are acknowledged by the broker before each task commits; nothing to finish here.
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Kafka has no way to take back acknowledged records (no transactions): at-least-once, as Spark's sink.
        pass
