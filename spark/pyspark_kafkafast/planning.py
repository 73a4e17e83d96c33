"""Driver-side planning: which partitions, which offsets, which Spark tasks.

Everything here is pure logic over an `OffsetLookup` (the broker calls live in
`broker_calls.py`), so it is unit-tested without a broker or Spark.

An offset range `[start, until)` is what one Spark task reads. Offsets in checkpoints and
ranges are "next offset to read" positions, as in Spark's Kafka source: a partition whose
last record has offset 5 has latest offset 6.
"""
from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from pyspark_kafkafast.options import (
    EARLIEST,
    LATEST,
    EarliestOffsets,
    GlobalTimestamp,
    KafkaFastOptionError,
    LatestOffsets,
    OffsetSpec,
    SpecificOffsets,
    SpecificTimestamps,
    Subscription,
    TopicPartition,
)

logger = logging.getLogger("pyspark_kafkafast")

PartitionOffsets = dict[TopicPartition, int]

FAIL_ON_DATA_LOSS_HINT = (
    "Some data may have been lost because it is no longer available in Kafka; either the data was "
    "aged out by Kafka or the topic was deleted before all the data in it was processed. If you "
    "don't want the query to fail in such cases, set the source option failOnDataLoss to false.")


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic or partition) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """What one Spark task reads: offsets [start, until) of one partition."""

    topic: str
    partition: int
    start: int
    until: int

    @property
    def size(self) -> int:
        return self.until - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


class OffsetLookup(Protocol):
    """The broker questions planning asks; each answers for many partitions in one round trip."""

    def partitions(self, subscription: Subscription) -> list[TopicPartition]: ...

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets: ...

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets: ...

    def for_timestamps(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset with timestamp >= the given one; None when there is none."""
        ...


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {FAIL_ON_DATA_LOSS_HINT}")
    logger.warning("%s. Continuing because failOnDataLoss is false.", message)


# ------------------------------------------------------------------ checkpoint offsets
def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's KafkaSourceOffset layout: {topic: {"partition": offset}}, sorted for stable JSON."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]] | str) -> PartitionOffsets:
    if isinstance(doc, str):
        doc = json.loads(doc)
    if "shareGroup" in doc:
        raise KafkaFastOptionError(f"the checkpoint holds the micro-batches of share group {doc['shareGroup']!r}: "
                                   "the query's source must keep its shareGroup option across restarts")
    return {(topic, int(p)): int(off) for topic, parts in doc.items() for p, off in parts.items()}


# ------------------------------------------------------------------ resolving offset specs
def resolve_offsets(spec: OffsetSpec, tps: list[TopicPartition], lookup: OffsetLookup,
                    *, starting: bool) -> PartitionOffsets:
    """Concrete offsets for every partition in `tps` (Spark's fetchPartitionOffsets)."""
    which = "startingOffsets" if starting else "endingOffsets"
    if isinstance(spec, EarliestOffsets):
        return lookup.earliest(tps)
    if isinstance(spec, LatestOffsets):
        return lookup.latest(tps)
    if isinstance(spec, SpecificOffsets):
        _require_all_partitions(spec.offsets, tps, which)
        return _resolve_special(dict(spec.offsets), lookup)
    if isinstance(spec, SpecificTimestamps):
        _require_all_partitions(spec.timestamps, tps, which + "ByTimestamp")
        return _resolve_timestamps(dict(spec.timestamps), lookup, starting, spec.no_match_latest)
    if isinstance(spec, GlobalTimestamp):
        return _resolve_timestamps({tp: spec.timestamp for tp in tps}, lookup, starting, spec.no_match_latest)
    raise TypeError(f"unknown offset spec {spec!r}")


def _require_all_partitions(given: Mapping[TopicPartition, int], tps: list[TopicPartition], what: str) -> None:
    if set(given) != set(tps):
        raise KafkaFastOptionError(
            f"If {what} contains specific offsets, you must specify all TopicPartitions. "
            f"Use -1 for latest, -2 for earliest. Specified: {sorted(given)} Assigned: {sorted(tps)}")


def _resolve_special(offsets: PartitionOffsets, lookup: OffsetLookup) -> PartitionOffsets:
    earliest = [tp for tp, off in offsets.items() if off == EARLIEST]
    latest = [tp for tp, off in offsets.items() if off == LATEST]
    if earliest:
        offsets.update(lookup.earliest(earliest))
    if latest:
        offsets.update(lookup.latest(latest))
    return offsets


def _resolve_timestamps(timestamps: Mapping[TopicPartition, int], lookup: OffsetLookup, starting: bool,
                        no_match_latest: bool) -> PartitionOffsets:
    found = lookup.for_timestamps(timestamps)
    out: PartitionOffsets = {}
    for tp, offset in found.items():
        if offset is None:
            if starting and not no_match_latest:
                raise KafkaFastOptionError(
                    f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp "
                    f"{timestamps[tp]}.")
            offset = LATEST
        out[tp] = offset
    return _resolve_special(out, lookup)


# ------------------------------------------------------------------ splitting into tasks
def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: drop empty ranges; when there are fewer ranges than
    `min_partitions`, split the large ones into pieces in proportion to their share of the
    total, leaving ranges that would get one piece whole."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)

    def part_count(size: int, of_total: int, parts: int) -> int:
        return max(_round_half_up(size / of_total * parts), 1)

    unsplit = {r for r in ranges if part_count(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if r in unsplit else part_count(r.size, split_total, split_min)
        remaining, start = r.size, r.start
        for i in range(parts):
            piece = remaining // (parts - i)  # the last piece takes the rounding
            remaining -= piece
            end = min(start + piece, r.until)
            if end > start:
                out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))  # Scala's math.round, not Python's banker's rounding


# ------------------------------------------------------------------ batch
def plan_batch(subscription: Subscription, starting: OffsetSpec, ending: OffsetSpec, lookup: OffsetLookup,
               min_partitions: int | None) -> list[OffsetRange]:
    tps = sorted(lookup.partitions(subscription))
    start = resolve_offsets(starting, tps, lookup, starting=True)
    until = resolve_offsets(ending, tps, lookup, starting=False)
    ranges = []
    for tp in tps:
        if until[tp] < start[tp]:
            raise KafkaFastOptionError(
                f"Beginning offset {start[tp]} is after the ending offset {until[tp]} for topic {tp[0]} "
                f"partition {tp[1]}. You either provided an invalid fromOffset, or the Kafka topic has been damaged")
        ranges.append(OffsetRange(tp[0], tp[1], start[tp], until[tp]))
    return split_ranges(ranges, min_partitions)


# ------------------------------------------------------------------ streaming
def rate_limit(limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               new_partition_start: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """Spread at most `limit` offsets over the partitions in proportion to their backlog
    (Spark's rateLimit); a partition with any backlog gets at least one offset."""
    sizes: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, new_partition_start.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start.get(tp, new_partition_start.get(tp))
        assert begin is not None
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + step)
    return out


def backlog(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    """Records available past `start` (a new partition counts from 0, as Spark does)."""
    return sum(max(off - start.get(tp, 0), 0) for tp, off in latest.items())


def plan_micro_batch(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                     lookup: OffsetLookup, fail_on_data_loss: bool,
                     min_partitions: int | None) -> list[OffsetRange]:
    """Ranges between two checkpointed offsets (Spark's getOffsetRangesFromResolvedOffsets):
    partitions new since `start` are read from their earliest offset, gone ones are reported."""
    new = [tp for tp in end if tp not in start]
    new_start = lookup.earliest(new) if new else {}
    if set(new_start) != set(new):
        report_data_loss(f"Cannot find earliest offsets of {sorted(set(new) - set(new_start))}. "
                         "Some data may have been missed", fail_on_data_loss)
    for tp, off in sorted(new_start.items()):
        if off != 0:
            report_data_loss(f"Added partition {tp[0]}-{tp[1]} starts from {off} instead of 0. "
                             "Some data may have been missed", fail_on_data_loss)
    gone = sorted(set(start) - set(end))
    if gone:
        report_data_loss(f"{gone} are gone. Some data may have been missed", fail_on_data_loss)
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, new_start.get(tp))
        if begin is None:
            continue
        if end[tp] < begin:
            report_data_loss(f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to {end[tp]}, "
                             "some data may have been missed", fail_on_data_loss)
        ranges.append(OffsetRange(tp[0], tp[1], begin, end[tp]))
    return split_ranges(ranges, min_partitions)
