"""Batch and streaming writers of the `kafkafast` sink.

Each Spark task receives Arrow batches with the columns `value` (required), `key`,
`topic` (unless the `topic` option is set, which wins, as in Spark), `partition` and
`headers`; it produces every row with the kafkafast producer (batching, compression and
acks from the `kafka.*` options) and flushes before returning its commit message, so a
committed task has every record acknowledged. Rows without a partition are placed by the
producer's default partitioner (murmur2 of the key; sticky for null keys).

With `exactlyOnce=true` the write is a two-phase commit over Kafka transactions (the
guarantee and its limits: spark/README.md, "Exactly-once writes"):

- each task writes with a transactional producer whose transactional.id is
  `<transactionalIdPrefix>-<query id>-<partition id>` (streaming: the query id survives
  restarts from the checkpoint; batch writes: an id drawn per write). `init_transactions`
  fences an earlier attempt of the same task (a retry, or the run before a restart) and
  ends its open transaction. The task then records the micro-batch id in the same
  transaction (TxnOffsetCommit of group = the transactional id), flushes, and returns the
  transaction still open (`prepare_transaction`) with its producer id and epoch;
- the driver's commit (called by Spark once every task succeeded) commits each task's
  transaction with EndTxn (`end_prepared_transaction`); abort aborts them;
- a task whose transactional id already holds a committed batch id >= this one skips the
  batch: it was committed before Spark could record it (a driver that died between the
  Kafka commit and its commit log), so the replay adds nothing.
"""
from __future__ import annotations

import asyncio
import uuid
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

from kafkafast.protocol.errors import KafkaError
from pyspark_kafkafast.broker_calls import named
from pyspark_kafkafast.options import SinkOptions
from pyspark_kafkafast.schema import validate_sink_schema


@dataclass
class ProducedRecords(WriterCommitMessage):
    records: int


@dataclass
class PreparedTransaction(WriterCommitMessage):
    """A task's flushed, still open transaction (producer_id -1: nothing to commit, the task
    had no rows or skipped a batch committed before)."""

    records: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    batch_id: int
    skipped: bool = False


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


async def _send_rows(producer: Any, opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> tuple[int, str | None]:
    """Sends every row; (rows, topic of the first row). A failed delivery raises ProduceError
    after the producer was flushed."""
    failures: list[BaseException] = []

    def delivered(fut: Any) -> None:
        try:
            fut.result()
        except BaseException as exc:  # noqa: BLE001 - collected, re-raised after flush
            failures.append(exc)

    count = 0
    first_topic = None
    for batch in batches:
        for topic, key, value, partition, headers in rows_of(batch, opts.topic):
            fut = await producer.send(topic, value, key, headers=headers, partition=partition)
            fut.add_done_callback(delivered)
            if first_topic is None:
                first_topic = topic
            count += 1
        if failures:
            break
        await asyncio.sleep(0)  # let the sender drain while Spark prepares the next batch
    await producer.flush()
    if failures:
        first = failures[0]
        raise ProduceError(f"{len(failures)} record(s) not delivered; first error: {type(first).__name__}: "
                           f"{named(first) if isinstance(first, KafkaError) else first}")
    return count, first_topic


def _producer(opts: SinkOptions, transactional_id: str | None = None) -> Any:
    from kafkafast.client.producer import AIOProducer

    return AIOProducer(opts.bootstrap, client_id="kafkafast-spark-writer", acks=opts.acks,
                       compression_type=opts.compression, linger_ms=opts.linger_ms, batch_size=opts.batch_size,
                       transactional_id=transactional_id, transaction_timeout_ms=opts.transaction_timeout_ms,
                       security=opts.security)


async def produce_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    producer = _producer(opts)
    await producer.start()
    try:
        return (await _send_rows(producer, opts, batches))[0]
    finally:
        await producer.close()


async def last_committed_batch(opts: SinkOptions, transactional_id: str) -> int | None:
    """The highest batch id a committed transaction of `transactional_id` recorded."""
    from kafkafast.client.admin import AdminClient

    async with AdminClient(opts.bootstrap, client_id="kafkafast-spark-writer", security=opts.security) as admin:
        rows = (await admin.group_offsets(transactional_id)).rows
    committed = [c for c, _end in rows.values() if c is not None]
    return max(committed) if committed else None


async def produce_transaction(opts: SinkOptions, batches: Iterator[pa.RecordBatch], transactional_id: str,
                              batch_id: int) -> PreparedTransaction:
    """The task side of an exactly-once write: the rows in one transaction, flushed and left
    open for the driver to commit, with `batch_id` recorded in it."""
    producer = _producer(opts, transactional_id)
    await producer.start()
    try:
        await producer.init_transactions()  # fences earlier attempts; their open transaction ends first
        last = await last_committed_batch(opts, transactional_id)
        if last is not None and last >= batch_id:
            for _ in batches:  # committed before: the replay writes nothing
                pass
            return PreparedTransaction(0, transactional_id, -1, -1, batch_id, skipped=True)
        producer.begin_transaction()
        count, first_topic = await _send_rows(producer, opts, batches)
        if first_topic is None:
            return PreparedTransaction(0, transactional_id, -1, -1, batch_id)
        await producer.send_offsets_to_transaction({(first_topic, 0): batch_id}, transactional_id)
        producer_id, epoch = await producer.prepare_transaction()
        return PreparedTransaction(count, transactional_id, producer_id, epoch, batch_id)
    finally:
        await producer.close()


async def end_transactions(opts: SinkOptions, messages: list[WriterCommitMessage | None], commit: bool) -> None:
    """The driver side: EndTxn for every prepared transaction of the tasks."""
    from kafkafast.client.cluster import Cluster
    from kafkafast.client.transactions import end_prepared_transaction

    prepared = [m for m in messages if isinstance(m, PreparedTransaction) and m.producer_id >= 0]
    if not prepared:
        return
    cluster = Cluster(opts.bootstrap, client_id="kafkafast-spark-committer", security=opts.security)
    await cluster.start()
    try:
        results = await asyncio.gather(*(end_prepared_transaction(cluster, m.transactional_id, m.producer_id,
                                                                  m.producer_epoch, commit) for m in prepared),
                                       return_exceptions=True)
    finally:
        await cluster.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors and commit:
        raise ProduceError(f"{len(errors)} of {len(prepared)} task transaction(s) could not commit; first error: "
                           f"{errors[0]!r}")


def task_transaction(prefix: str, write_id: str | None) -> tuple[str, int]:
    """(transactional id, batch id) of this task: the streaming query id and micro-batch id
    Spark sets as local properties (a batch write passes its own id and batch 0)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None, "runs in a Spark task"
    query = write_id or ctx.getLocalProperty("sql.streaming.queryId")
    batch = ctx.getLocalProperty("streaming.sql.batchId") if write_id is None else "0"
    if not query or batch is None:
        raise ProduceError("exactlyOnce=true: the task has no streaming query id / batch id")
    return f"{prefix}-{query}-{ctx.partitionId()}", int(batch)


def write_task(opts: SinkOptions, iterator: Iterator[pa.RecordBatch], write_id: str | None = None
               ) -> WriterCommitMessage:
    try:
        if not opts.exactly_once:
            return ProducedRecords(asyncio.run(produce_batches(opts, iterator)))
        transactional_id, batch_id = task_transaction(opts.transactional_id_prefix, write_id)
        return asyncio.run(produce_transaction(opts, iterator, transactional_id, batch_id))
    except KafkaError as exc:  # e.g. TOPIC_AUTHORIZATION_FAILED, named as Kafka names it
        raise named(exc) from exc


class KafkaFastBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_sink_schema(schema, opts.topic)
        self.opts = opts
        self.write_id = uuid.uuid4().hex  # drawn on the driver: every task of this write shares it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.opts, iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.exactly_once:
            asyncio.run(end_transactions(self.opts, messages, True))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.exactly_once:
            asyncio.run(end_transactions(self.opts, messages, False))


class KafkaFastStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_sink_schema(schema, opts.topic)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # exactlyOnce: the tasks' transactions become visible now, all of them; else every
        # record was acknowledged before its task committed (at-least-once, as Spark's sink).
        if self.opts.exactly_once:
            asyncio.run(end_transactions(self.opts, messages, True))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # exactlyOnce: the prepared transactions are aborted (a task that failed left its own
        # open; the next attempt of that task, or the transaction timeout, ends it). Without
        # it acknowledged records cannot be taken back.
        if self.opts.exactly_once:
            asyncio.run(end_transactions(self.opts, messages, False))
