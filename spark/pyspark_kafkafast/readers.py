"""Batch and micro-batch readers of the `kafkafast` source.

Planning (which partitions, which offsets, which tasks) runs once per query or micro-batch
on the driver; each Spark task then reads its one `[start, until)` range straight from the
partition leader and yields Arrow record batches.

Streaming offsets are recorded in Spark's checkpoint as Spark's Kafka source records them:
`{"topic": {"0": 42, "1": 17}}`, each value the next offset to read.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pyspark_kafkafast.arrow_records import to_source_batch
from pyspark_kafkafast.options import SourceOptions
from pyspark_kafkafast.planning import (
    OffsetLookup,
    OffsetRange,
    PartitionOffsets,
    backlog,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    plan_micro_batch,
    rate_limit,
    resolve_offsets,
)
from pyspark_kafkafast.schema import arrow_schema

if TYPE_CHECKING:
    from pyspark_kafkafast.broker_calls import BrokerLookup

logger = logging.getLogger("pyspark_kafkafast")


class OffsetRangePartition(InputPartition):
    """One Spark task: one offset range of one Kafka partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range

    def __repr__(self) -> str:
        r = self.offset_range
        return f"OffsetRangePartition({r.topic}-{r.partition} [{r.start}, {r.until}))"


def _lookup(opts: SourceOptions) -> BrokerLookup:
    from pyspark_kafkafast.broker_calls import BrokerLookup
    return BrokerLookup(opts.bootstrap, isolation_level=isolation_level(opts), security=opts.security,
                        request_timeout_ms=opts.request_timeout_ms,
                        attempts=opts.fetch_offset_attempts, retry_interval_ms=opts.fetch_offset_retry_interval_ms)


def isolation_level(opts: SourceOptions) -> int:
    """Spark's option kafka.isolation.level: read_committed (1) or read_uncommitted (0, the default)."""
    return 1 if opts.kafka_params.get("isolation.level", "").strip().lower() == "read_committed" else 0


def read_offset_range(opts: SourceOptions, schema: pa.Schema, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The task body shared by batch and streaming reads (runs on a Spark worker)."""
    from pyspark_kafkafast.broker_calls import read_range
    for batch in read_range(opts.bootstrap, r, fail_on_data_loss=opts.fail_on_data_loss,
                            max_bytes=opts.fetch_max_bytes, timeout_ms=opts.poll_timeout_ms,
                            max_records=opts.max_records_per_batch, include_headers=len(schema) == 8,
                            isolation_level=isolation_level(opts), security=opts.security):
        yield to_source_batch(r.topic, r.partition, batch, schema)


class KafkaFastBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.arrow_schema = arrow_schema(schema)

    def partitions(self) -> Sequence[InputPartition]:
        o = self.opts
        with _lookup(o) as lookup:
            ranges = plan_batch(o.subscription, o.starting, o.ending, lookup, o.min_partitions)
        logger.info("kafkafast batch read planned %d ranges", len(ranges))
        return [OffsetRangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # With no ranges planned Spark still runs one task, with a partition that is not ours.
        if isinstance(partition, OffsetRangePartition):
            yield from read_offset_range(self.opts, self.arrow_schema, partition.offset_range)


class KafkaFastStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: initialOffset / latestOffset(start, limit) / partitions / read.

    Read limits follow Spark's Kafka source: maxOffsetsPerTrigger becomes the engine's
    ReadMaxRows and is spread over partitions in proportion to their backlog; with
    minOffsetsPerTrigger a trigger is skipped while fewer records are waiting, unless
    maxTriggerDelay has passed since the last batch; ReadAllAvailable (e.g. for
    Trigger.AvailableNow) ignores both. Partitions that appear later are read from their
    earliest offset.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.arrow_schema = arrow_schema(schema)
        self._available_now = False
        self._available_now_target: PartitionOffsets | None = None
        self._latest: PartitionOffsets = {}
        self._last_trigger_ms = 0.0

    # -- driver side ---------------------------------------------------------------------
    def initialOffset(self) -> dict:
        with _lookup(self.opts) as lookup:
            tps = sorted(lookup.partitions(self.opts.subscription))
            offsets = resolve_offsets(self.opts.starting, tps, lookup, starting=True)
        logger.info("kafkafast stream starts at %s", offsets)
        return offsets_to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def _current_latest(self, lookup: OffsetLookup) -> PartitionOffsets:
        if self._available_now and self._available_now_target is not None:
            return self._available_now_target
        latest = lookup.latest(lookup.partitions(self.opts.subscription))
        if self._available_now:
            self._available_now_target = latest
        return latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        with _lookup(self.opts) as lookup:
            latest = self._current_latest(lookup)
            self._latest = latest
            end = self.limit_offsets(begin, latest, limit, lookup)
        return offsets_to_json(end)

    def limit_offsets(self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit,
                      lookup: OffsetLookup) -> PartitionOffsets:
        if isinstance(limit, ReadAllAvailable):
            return latest
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger
        if min_rows is not None and self._delay_batch(min_rows, begin, latest):
            return begin
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if max_rows is None:
            return latest
        new = [tp for tp in latest if tp not in begin]
        return rate_limit(max_rows, begin, latest, lookup.earliest(new) if new else {})

    def _delay_batch(self, min_rows: int, begin: PartitionOffsets, latest: PartitionOffsets) -> bool:
        now = time.monotonic() * 1000
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms or backlog(begin, latest) >= min_rows:
            self._last_trigger_ms = now
            return False
        return True

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        with _lookup(self.opts) as lookup:
            ranges = plan_micro_batch(offsets_from_json(start), offsets_from_json(end), lookup,
                                      self.opts.fail_on_data_loss, self.opts.min_partitions)
        return [OffsetRangePartition(r) for r in ranges]

    def commit(self, end: dict) -> None:
        # Progress lives in Spark's checkpoint; nothing is committed to Kafka.
        pass

    # -- task side -----------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, OffsetRangePartition):
            yield from read_offset_range(self.opts, self.arrow_schema, partition.offset_range)
