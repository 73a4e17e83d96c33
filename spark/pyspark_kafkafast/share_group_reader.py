"""Micro-batches through a share group (KIP-932): the `shareGroup` option of the `kafkafast` source.

The driver's stream reader is the group's one member for the query. Each micro-batch is what
its acquisition got: `latestOffset` acquires records with ShareFetch (kafkafast's ShareConsumer
in explicit mode, `acquire`: the answer's acquired offset ranges, no record decoded) and
returns them as the batch's end offset; `partitions` turns the ranges into tasks (split by
`minPartitions` like any range), which read the offsets from the partition leaders as the
offset-range source does. The records stay acquired by the driver, under the group's
acquisition lock, while the batch runs; when Spark has committed the batch the driver accepts
them (ShareAcknowledge, ACCEPT). A batch that fails stops the query, and `stop` closes the
share sessions, which releases what is still held (or the locks expire), so the group
delivers those records again.

Why the driver holds the records rather than the tasks: only the member that acquired a record
may acknowledge it (the broker answers INVALID_RECORD_STATE otherwise, as Kafka does), and a
Python data source's task cannot outlive its read nor learn whether its micro-batch committed;
a task that accepted its records at the end of its read would lose them when the sink then
failed. The cost is that ShareFetch answers carry the acquired batches' bytes to the driver,
which drops them undecoded.

The batch's end offset, as Spark's checkpoint keeps it:
`{"shareGroup": "g", "batch": 3, "acquired": {"topic": {"0": [[first, last], ...]}}}`, the
ranges inclusive; `batch` counts the batches this stream made, so each end differs from its
start.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from kafkafast.client.share_consumer import AcquiredRange, ShareConsumer
from pyspark_kafkafast.options import KafkaFastOptionError, SourceOptions, Subscribe
from pyspark_kafkafast.planning import OffsetRange, split_ranges
from pyspark_kafkafast.readers import OffsetRangePartition, read_offset_range
from pyspark_kafkafast.schema import arrow_schema

logger = logging.getLogger("pyspark_kafkafast")

# How long the first ShareFetch of a trigger waits for records (Kafka's fetch.max.wait.ms
# default); the rounds after it only take what is there at once.
ACQUIRE_WAIT_MS = 500
# Records one ShareFetch round asks for; the group's group.share.partition.max.record.locks
# bounds what one partition can have acquired in all.
RECORDS_PER_ROUND = 10_000


def ranges_to_json(ranges: Sequence[AcquiredRange]) -> dict[str, dict[str, list[list[int]]]]:
    """Acquired ranges per topic and partition, sorted, adjacent ones merged."""
    out: dict[str, dict[str, list[list[int]]]] = {}
    for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.first_offset)):
        spans = out.setdefault(r.topic, {}).setdefault(str(r.partition), [])
        if spans and spans[-1][1] + 1 == r.first_offset:
            spans[-1][1] = r.last_offset
        else:
            spans.append([r.first_offset, r.last_offset])
    return out


def ranges_from_json(acquired: dict[str, dict[str, list[list[int]]]]) -> list[OffsetRange]:
    return [OffsetRange(topic, int(p), first, last + 1)
            for topic, parts in sorted(acquired.items())
            for p, spans in sorted(parts.items(), key=lambda kv: int(kv[0])) for first, last in spans]


class ShareGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """initialOffset / latestOffset (acquire) / partitions / commit (accept) / stop (release).

    maxOffsetsPerTrigger bounds the records a micro-batch acquires (whole record batches are
    acquired, so it can be passed by up to one batch). Trigger.AvailableNow ends the query at
    the first trigger that acquires nothing.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        assert isinstance(opts.subscription, Subscribe) and opts.share_group is not None  # options.py checks
        self.opts = opts
        self.group = opts.share_group
        self.arrow_schema = arrow_schema(schema)
        self._consumer: ShareConsumer | None = None
        self._held: dict[str, Any] | None = None  # the end offset of the batch whose records this member holds
        self._stopping = False
        self._terminate_after_stop: Callable[[], None] | None = None

    # -- driver side ---------------------------------------------------------------------
    def _share_consumer(self) -> ShareConsumer:
        if self._consumer is None:
            o = self.opts
            assert isinstance(o.subscription, Subscribe)
            self._consumer = ShareConsumer(*o.subscription.topics, bootstrap_servers=o.bootstrap, group_id=self.group,
                                           acknowledgement_mode="explicit", client_id="kafkafast-spark",
                                           request_timeout_ms=o.request_timeout_ms, security=o.security)
            self._stop_on_sigterm()
            if not self._consumer.wait_for_assignment(o.request_timeout_ms):
                logger.warning("share group %s: no partitions assigned within %d ms", self.group, o.request_timeout_ms)
        return self._consumer

    def _stop_on_sigterm(self) -> None:
        """Spark 4.3 ends a query's stream reader by terminating its Python process (the
        runner's stopWorker sends SIGTERM, and closes the socket, on which the runner calls
        `stop`) without waiting for it; so `stop` runs on SIGTERM, and a SIGTERM that comes
        while `stop` is closing ends the process only once the close is done. So the records
        held go back to the group at once, not when their locks expire, and the member leaves
        the group (else it keeps its share of the partitions until the group's session
        timeout)."""
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None:  # a handler not installed from Python
            previous = signal.SIG_DFL

        def terminate(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGTERM, previous)
            if callable(previous):
                previous(signum, frame)
            else:
                os.kill(os.getpid(), signal.SIGTERM)

        def on_sigterm(signum: int, frame: Any) -> None:
            if self._stopping:  # this handler interrupted `stop`: it terminates when the close is done
                self._terminate_after_stop = lambda: terminate(signum, frame)
                return
            try:
                self.stop()
            finally:
                terminate(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)

    def initialOffset(self) -> dict:
        return {"shareGroup": self.group, "batch": 0, "acquired": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the query ends at the first trigger whose acquisition gets nothing

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._check_group(start)
        # Spark asks for the next batch's end only once the batch ending at `start` committed.
        self._accept_through(start)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        consumer = self._share_consumer()
        acquired: list[AcquiredRange] = []
        count, wait_ms = 0, ACQUIRE_WAIT_MS
        while max_rows is None or count < max_rows:
            room = RECORDS_PER_ROUND if max_rows is None else min(RECORDS_PER_ROUND, max_rows - count)
            got = consumer.acquire(timeout_ms=wait_ms, max_records=room)
            if not got:
                break
            acquired += got
            count += sum(r.last_offset - r.first_offset + 1 for r in got)
            wait_ms = 0
        if not acquired:
            return start
        end = {"shareGroup": self.group, "batch": int(start.get("batch", 0)) + 1, "acquired": ranges_to_json(acquired)}
        self._held = end
        logger.info("share group %s: batch %d acquired %d records", self.group, end["batch"], count)
        return end

    def _check_group(self, offset: dict) -> None:
        if offset.get("shareGroup") != self.group:
            raise KafkaFastOptionError(f"the checkpoint's offsets are not those of share group {self.group!r} "
                                       f"({offset!r}): a query's shareGroup (or its use of one) cannot change "
                                       "across restarts of its checkpoint")

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._check_group(end)
        return [OffsetRangePartition(r) for r in split_ranges(ranges_from_json(end["acquired"]),
                                                              self.opts.min_partitions)]

    def commit(self, end: dict) -> None:
        self._accept_through(end)

    def _accept_through(self, offset: dict) -> None:
        """Accepts the held records when the batch holding them is `offset`'s or an earlier one."""
        held = self._held
        if held is None or held["batch"] > int(offset.get("batch", 0)) or self._consumer is None:
            return
        for r in ranges_from_json(held["acquired"]):
            self._consumer.acknowledge_range(r.topic, r.partition, r.start, r.until - 1)
        failed = {f"{tp.topic}-{tp.partition}": type(err).__name__
                  for tp, err in self._consumer.commit_sync().items() if err is not None}
        self._held = None
        if failed:
            # Their locks expired before the commit (share.record.lock.duration.ms): the group
            # has delivered them again or will, so they are read twice.
            logger.warning("share group %s: accepting batch %d failed for %s; those records will be delivered again "
                           "(is the group's share.record.lock.duration.ms longer than a micro-batch?)",
                           self.group, held["batch"], failed)

    def stop(self) -> None:
        """Closes the share sessions (records still held go back to the group) and leaves the group."""
        self._stopping = True  # first: a SIGTERM from here on waits for the close (`_stop_on_sigterm`)
        try:
            if self._consumer is not None:
                consumer, self._consumer = self._consumer, None
                consumer.close()
        finally:
            self._stopping = False
            if self._terminate_after_stop is not None:
                self._terminate_after_stop()

    # -- task side -----------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, OffsetRangePartition):
            yield from read_offset_range(self.opts, self.arrow_schema, partition.offset_range)
