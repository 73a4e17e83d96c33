"""The producer's record accumulator: one queue of batches per partition.

`append` adds a record to the last open batch of its partition (a compiled
`BatchBuilder`), or opens a new batch when that one is full (`batch.size`), reserving
`batch.size` bytes of `buffer.memory`; when the memory is used up, appends wait until
completed batches give it back (back-pressure). A partition is *ready* when its first
batch is full, has waited `linger.ms`, or a flush/close is under way, or it is a retry
whose backoff is over. The sender `drain`s ready partitions of one leader into one
Produce request.

Idempotence: each partition keeps the next sequence number; a batch gets its base
sequence (and is built, once) when it is first drained, and keeps both across retries.
At most 5 batches of a partition are in flight (the broker remembers the last 5 for
duplicate detection). A retriable failure puts the batch back at the front of its queue
in sequence order and switches the partition to *retry mode*: one batch in flight until
every earlier batch is acknowledged, so batches reach the log in sequence order and a
resent batch that had in fact been written is answered as a duplicate, not written twice.

Batch memory is reused: once a batch is acknowledged (or failed), its builder is reset and
kept for a next batch (up to buffer.memory's worth), so appends write into pages
that are already mapped instead of faulting in fresh ones. The builder only reuses the
buffer when nothing else holds the batch it built any more (see `BatchBuilder.reset`): a
batch handed to the connection is never written while in flight.

The per-record path (the partition's open batch takes the record) is the producer's own
(`AIOProducer.append`); the accumulator opens batches when there is no open one or it is
full. Appends may come from another thread (the sync facade, which sets `threaded`), so
the queues are guarded by one lock; everything else runs on the event loop. An
asyncio-only producer appends on the loop thread, between the sender's steps, so its
appends skip the lock (it costs a third of an append).
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from kafkafast.client.cluster import TopicPartition
from kafkafast.records import BatchBuilder

MAX_IN_FLIGHT_PER_PARTITION_IDEMPOTENT = 5
# Reset builders kept for reuse: at least this many, and up to buffer.memory's worth, as
# the Java producer's BufferPool does. There are never more builders than were alive at
# once, so spares and open batches together stay within about buffer.memory.
MIN_SPARE_BUILDERS = 4


class ProducerBatch:
    """Records for one partition, sent together; `future` gets (base offset, log append time)."""

    __slots__ = ("tp", "builder", "created", "future", "attempts", "base_sequence", "payload", "reserved",
                 "next_attempt", "count", "done", "built_by")

    def __init__(self, tp: TopicPartition, builder: BatchBuilder, future: asyncio.Future, reserved: int) -> None:
        self.tp = tp
        self.builder: BatchBuilder | None = builder
        self.created = time.monotonic()
        self.future = future
        self.attempts = 0
        self.base_sequence = -1
        self.payload: bytes | None = None
        self.reserved = reserved
        self.next_attempt = 0.0
        self.count = 0
        self.done = False
        self.built_by: BatchBuilder | None = None  # the sealed builder, reset for reuse on completion

    def __repr__(self) -> str:
        return f"ProducerBatch({self.tp}, seq={self.base_sequence}, count={self.count}, attempts={self.attempts})"


class _PartitionState:
    __slots__ = ("next_sequence", "in_flight", "retry_mode")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.in_flight: list[ProducerBatch] = []
        self.retry_mode = False


class RecordAccumulator:
    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop,
        batch_size: int,
        linger_ms: float,
        compression: int,
        buffer_memory: int,
        idempotent: bool,
        retry_backoff_ms: int,
    ) -> None:
        self.loop = loop
        self.batch_size = batch_size
        self.linger = linger_ms / 1000.0
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.idempotent = idempotent
        self.transactional = False  # batches carry the transactional attribute (a transactional producer)
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.states: dict[TopicPartition, _PartitionState] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.spare_builders: list[BatchBuilder] = []
        self.max_spare_builders = max(MIN_SPARE_BUILDERS, buffer_memory // max(batch_size, 1))
        self.used = 0
        self.lock = threading.Lock()
        # Set before records are appended from another thread (the sync facade): appends
        # then take the lock too; on the loop thread alone they need not (no other writer).
        self.threaded = False
        self.memory_freed = threading.Condition(self.lock)
        self._async_memory_waiters: list[asyncio.Future] = []
        self.flushing = 0
        self.closing = False
        self.wakeup: Callable[[], None] = lambda: None  # set by the sender (loop thread only)

    # -- appending (any thread) --------------------------------------------------------

    def open_batch(
        self, tp: TopicPartition, timestamp: int, key: Any, value: Any, headers: Iterable[tuple[str, bytes | None]],
    ) -> tuple[ProducerBatch, int, int] | None:
        """Starts a new batch of `tp` with this record, for when the partition has no open
        batch or its last one is full (the producer appends to the open batch itself:
        that is the per-record path). (batch, 0, event), or None when a new batch would
        exceed buffer.memory; event 1: the sender must arm a linger timer, 2: the batch is
        already full (send it now). Called on the loop thread, or with `lock` held when
        appends come from another thread (`threaded`)."""
        q = self.queues.get(tp)
        if self.used + self.batch_size > self.buffer_memory and self.used > 0:
            return None
        spare = self.spare_builders
        builder = spare.pop() if spare else BatchBuilder(self.compression, max_size=self.batch_size,
                                                         is_transactional=self.transactional)
        builder.append(timestamp, key, value, headers)
        reserved = max(self.batch_size, builder.estimated_size)
        batch = ProducerBatch(tp, builder, self.loop.create_future(), reserved)
        batch.count = 1
        self.used += reserved
        if q is None:
            q = self.queues[tp] = deque()
        q.append(batch)
        self.incomplete.add(batch)
        return batch, 0, (2 if builder.estimated_size >= self.batch_size else 1)

    def wait_memory_blocking(self, timeout: float) -> bool:
        with self.lock:
            if self.used + self.batch_size <= self.buffer_memory:
                return True
            return self.memory_freed.wait(timeout)

    def memory_future(self) -> asyncio.Future:
        fut = self.loop.create_future()
        self._async_memory_waiters.append(fut)
        return fut

    # -- sending (loop thread) ---------------------------------------------------------

    def ready(self, leader_for: Callable[[TopicPartition], int], now: float,
              can_send: Callable[[int], bool]) -> tuple[dict[int, list[TopicPartition]], float, bool]:
        """({leader: [ready partitions]}, seconds until the next batch may become ready,
        some partition has no known leader)."""
        ready: dict[int, list[TopicPartition]] = {}
        next_check = 3600.0
        unknown = False
        linger = self.linger
        flushing = self.flushing > 0 or self.closing
        with self.lock:
            for tp, q in self.queues.items():
                if not q:
                    continue
                batch = q[0]
                leader = leader_for(tp)
                if leader < 0:
                    unknown = True
                    continue
                if batch.attempts:
                    wait = batch.next_attempt - now
                    if wait > 0:
                        next_check = min(next_check, wait)
                        continue
                elif not (flushing or len(q) > 1 or batch.builder is None
                          or batch.builder.estimated_size >= self.batch_size):
                    wait = batch.created + linger - now
                    if wait > 0:
                        next_check = min(next_check, wait)
                        continue
                if not can_send(leader):
                    continue
                if self.idempotent:
                    st = self.states.get(tp)
                    if st is not None and st.in_flight and (
                            st.retry_mode or len(st.in_flight) >= MAX_IN_FLIGHT_PER_PARTITION_IDEMPOTENT):
                        continue
                ready.setdefault(leader, []).append(tp)
        return ready, next_check, unknown

    def drain(self, tps: list[TopicPartition], max_request_size: int) -> list[ProducerBatch]:
        """Takes the first batch of each partition (up to max_request_size in total), builds it
        if it is new, and records it as in flight."""
        out: list[ProducerBatch] = []
        size = 0
        with self.lock:
            for tp in tps:
                q = self.queues.get(tp)
                if not q:
                    continue
                batch = q[0]
                est = len(batch.payload) if batch.payload is not None else batch.builder.estimated_size  # type: ignore[union-attr]
                if out and size + est > max_request_size:
                    break
                q.popleft()
                if batch.payload is None:
                    self._seal(batch)
                size += len(batch.payload)  # type: ignore[arg-type]
                if self.idempotent:
                    st = self.states[tp]
                    st.in_flight.append(batch)
                out.append(batch)
        return out

    def _seal(self, batch: ProducerBatch) -> None:
        builder = batch.builder
        assert builder is not None
        if self.idempotent:
            st = self.states.get(batch.tp)
            if st is None:
                st = self.states[batch.tp] = _PartitionState()
            batch.base_sequence = st.next_sequence
            st.next_sequence = (st.next_sequence + builder.record_count) & 0x7FFFFFFF
            builder.producer_id = self.producer_id
            builder.producer_epoch = self.producer_epoch
            builder.base_sequence = batch.base_sequence
        batch.payload = builder.build()
        batch.builder = None
        batch.built_by = builder

    def requeue(self, batch: ProducerBatch) -> None:
        """Puts a batch that failed with a retriable error back at the front of its queue."""
        batch.attempts += 1
        batch.next_attempt = time.monotonic() + self.retry_backoff * min(batch.attempts, 10)
        with self.lock:
            q = self.queues.setdefault(batch.tp, deque())
            if self.idempotent:
                st = self.states[batch.tp]
                if batch in st.in_flight:
                    st.in_flight.remove(batch)
                st.retry_mode = True
                i = 0
                while i < len(q) and q[i].payload is not None and q[i].base_sequence < batch.base_sequence:
                    i += 1
                q.insert(i, batch)
            else:
                q.appendleft(batch)

    def earlier_unacked(self, batch: ProducerBatch) -> bool:
        """True if a batch of the same partition with a lower sequence is still unacknowledged."""
        st = self.states.get(batch.tp)
        if st is None:
            return False
        if any(b.base_sequence < batch.base_sequence for b in st.in_flight if b is not batch):
            return True
        q = self.queues.get(batch.tp)
        return q is not None and any(b.payload is not None and b.base_sequence < batch.base_sequence for b in q)

    def complete(self, batch: ProducerBatch, result: tuple[int, int] | None, exc: BaseException | None) -> None:
        if batch.done:
            return
        batch.done = True
        with self.lock:
            if self.idempotent:
                st = self.states.get(batch.tp)
                if st is not None:
                    if batch in st.in_flight:
                        st.in_flight.remove(batch)
                    if st.retry_mode and not st.in_flight:
                        q = self.queues.get(batch.tp)
                        if not q or q[0].payload is None:
                            st.retry_mode = False
            self.incomplete.discard(batch)
            self.used -= batch.reserved
            builder = batch.built_by
            if builder is not None:
                batch.built_by = None
                batch.payload = None  # the connection has let go of it unless it still writes it
                if len(self.spare_builders) < self.max_spare_builders and builder.reset():
                    builder.producer_id = builder.producer_epoch = builder.base_sequence = -1
                    self.spare_builders.append(builder)
            self.memory_freed.notify_all()
        waiters, self._async_memory_waiters = self._async_memory_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
        fut = batch.future
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
                fut.exception()  # nobody may be waiting; do not log it as unretrieved
            else:
                fut.set_result(result)

    def remove_from_queue(self, batch: ProducerBatch) -> None:
        with self.lock:
            q = self.queues.get(batch.tp)
            if q is not None and batch in q:
                q.remove(batch)

    def expired(self, now: float, delivery_timeout: float) -> list[ProducerBatch]:
        """Queued (not in-flight) batches older than delivery.timeout.ms, taken out of their queues."""
        out: list[ProducerBatch] = []
        with self.lock:
            for q in self.queues.values():
                while q and now - q[0].created > delivery_timeout:
                    out.append(q.popleft())
        return out

    def has_unsent(self) -> bool:
        with self.lock:
            return any(self.queues.values())


__all__ = ["ProducerBatch", "RecordAccumulator"]
