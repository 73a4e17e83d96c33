"""The asyncio producer: `AIOProducer`.

    producer = await AIOProducer("127.0.0.1:9092", linger_ms=5).start()
    fut = await producer.send("topic", b"value", key=b"key", headers=[("h", b"v")])
    meta = await fut                       # RecordMetadata(topic, partition, offset, timestamp)
    await producer.flush(); await producer.close()

`send` partitions the record, appends it to the accumulator (waiting for buffer memory
when it is used up) and returns a `DeliveryFuture` at once; the sender task drains ready
batches per leader into Produce requests, at most `max_in_flight_requests_per_connection`
per broker, retries retriable failures (with backoff, until `delivery_timeout_ms`) and
completes the futures. Settings follow the Java producer's names and defaults.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from time import time_ns
from collections.abc import Callable, Generator, Iterable
from operator import itemgetter
from typing import Any

from kafkafast.client.accumulator import ProducerBatch, RecordAccumulator
from kafkafast.client.cluster import Cluster, TopicPartition
from kafkafast.client.connection import BrokerConnection
from kafkafast.client.partitioner import Partitioner, PartitionFn
from kafkafast.client.records import RecordMetadata
from kafkafast.client.transactions import TransactionManager
from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import (
    DuplicateSequenceNumberError,
    InvalidRequestError,
    KafkaError,
    MessageTooLargeError,
    NetworkError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    for_code,
)
from kafkafast.records import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from kafkafast.records.batch import append_to_last

logger = logging.getLogger("kafkafast.client.producer")

CODECS = {None: CODEC_NONE, "none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4,
          "zstd": CODEC_ZSTD}
# Errors after which the partition's leader may have moved.
_METADATA_ERRORS = {3, 5, 6, 13, 15, 16}

Headers = Iterable[tuple[str, bytes | None]] | None
# send() yields to the event loop at least this often (in bytes of values appended).
_YIELD_EVERY_BYTES = 256 * 1024


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class DeliveryFuture(tuple):  # type: ignore[type-arg]
    """Awaitable result of one `send`: RecordMetadata, or the typed error of the batch.

    Made once per record, so it is a tuple (batch, index in batch, timestamp) underneath:
    half the cost of an object with an `__init__`."""

    __slots__ = ()
    batch: ProducerBatch = property(itemgetter(0))  # type: ignore[assignment]
    index: int = property(itemgetter(1))  # type: ignore[assignment]
    timestamp: int = property(itemgetter(2))  # type: ignore[assignment]

    def _meta(self, result: tuple[int, int]) -> RecordMetadata:
        base, log_append_time = result
        tp = self.batch.tp
        return RecordMetadata(tp.topic, tp.partition, base + self.index if base >= 0 else -1,
                              log_append_time if log_append_time >= 0 else self.timestamp)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        result = yield from self.batch.future.__await__()
        return self._meta(result)

    def done(self) -> bool:
        return self.batch.future.done()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """As `concurrent.futures.Future.result`: waits up to `timeout` seconds (None: no
        limit) and raises TimeoutError after that, or the batch's typed error. On the
        producer's own loop nothing may block, so there an unfinished delivery raises
        asyncio.InvalidStateError at once, as an asyncio future's result() does."""
        fut = self.batch.future
        if fut.done() or _running_loop() is fut.get_loop():
            return self._meta(fut.result())
        return self.get(timeout)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Blocks until delivered: for threads other than the producer's loop (the sync
        facade's callers). Raises the batch's typed error, or TimeoutError after `timeout`
        seconds."""
        fut = self.batch.future
        if not fut.done():
            done = threading.Event()
            fut.get_loop().call_soon_threadsafe(fut.add_done_callback, lambda _f: done.set())
            if not done.wait(timeout):
                raise TimeoutError(f"{self.batch.tp}: not delivered within {timeout} s")
        return self._meta(fut.result())

    def add_done_callback(self, fn: Callable[[DeliveryFuture], None]) -> None:
        """Calls fn(self) on the producer's loop once delivered or failed."""
        self.batch.future.add_done_callback(lambda _f: fn(self))


class AIOProducer:
    def __init__(
        self,
        bootstrap_servers: str | list[str],
        *,
        client_id: str = "kafkafast-producer",
        acks: int | str = "all",
        compression_type: str | None = "none",
        batch_size: int = 16384,
        linger_ms: float = 5,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60000,
        max_request_size: int = 1024 * 1024,
        max_in_flight_requests_per_connection: int = 5,
        request_timeout_ms: int = 30000,
        delivery_timeout_ms: int = 120000,
        retries: int = 2147483647,
        retry_backoff_ms: int = 100,
        enable_idempotence: bool | None = None,
        partitioner: str | PartitionFn = "default",
        metadata_max_age_ms: int = 300000,
        allow_auto_create_topics: bool = True,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        security: Any = None,
    ) -> None:
        self.acks = -1 if acks in ("all", -1, "-1") else int(acks)
        if transactional_id is not None:
            if enable_idempotence is False or self.acks != -1:
                raise ValueError("a transactional producer is idempotent: acks=all, enable_idempotence not False")
            enable_idempotence = True
        if self.acks not in (-1, 0, 1):
            raise ValueError(f"acks must be 0, 1 or all, not {acks!r}")
        if compression_type not in CODECS:
            raise ValueError(f"unknown compression_type {compression_type!r}")
        self.compression = CODECS[compression_type]
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1 and retries > 0 and max_in_flight_requests_per_connection <= 5
        elif enable_idempotence and (self.acks != -1 or max_in_flight_requests_per_connection > 5):
            raise ValueError("idempotence needs acks=all and max_in_flight_requests_per_connection <= 5")
        self.idempotent = bool(enable_idempotence)
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.max_block = max_block_ms / 1000.0
        self.max_request_size = max_request_size
        self.max_in_flight = max_in_flight_requests_per_connection
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.partitioner = Partitioner(partitioner)
        self.cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                               metadata_max_age_ms=metadata_max_age_ms, max_in_flight=max(self.max_in_flight, 1),
                               retry_backoff_ms=retry_backoff_ms, allow_auto_topic_creation=allow_auto_create_topics,
                               security=security)  # kafkafast.security.client.ClientSecurity, or None
        self.acc: RecordAccumulator | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._in_flight: dict[int, int] = {}
        self._connecting: set[int] = set()
        self._sender: asyncio.Task | None = None
        self._waiter: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        self._refresh_wanted = False
        self._refreshing = False
        self._closed = False
        self._fatal: BaseException | None = None
        self._num_partitions: dict[str, int] = {}
        self._tps: dict[str, list[TopicPartition]] = {}
        self._unyielded = 0  # payload bytes appended by send() since it last yielded to the loop
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.txn: Any = None  # kafkafast.client.transactions.TransactionManager of a transactional producer
        self._txn_failures: list[BaseException] = []

    # -- life cycle --------------------------------------------------------------------

    async def start(self) -> AIOProducer:
        self.loop = asyncio.get_running_loop()
        await self.cluster.start()
        # A batch never outgrows a request: a record that would take it past max.request.size
        # opens a batch of its own, where `append` rejects it when it is too large alone.
        self.acc = RecordAccumulator(loop=self.loop, batch_size=min(self.batch_size, self.max_request_size),
                                     linger_ms=self.linger_ms,
                                     compression=self.compression, buffer_memory=self.buffer_memory,
                                     idempotent=self.idempotent, retry_backoff_ms=self.retry_backoff_ms)
        self.acc.wakeup = self.wakeup
        self.cluster.on_update.append(self._on_metadata)
        if self.transactional_id is not None:
            self.acc.transactional = True
            self.txn = TransactionManager(self, self.transactional_id, self.transaction_timeout_ms)
        elif self.idempotent:
            await self._init_producer_id()
        self._sender = self.loop.create_task(self._run())
        return self

    async def __aenter__(self) -> AIOProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _init_producer_id(self) -> None:
        assert self.acc is not None
        for attempt in range(10):
            conn = await self.cluster.any_connection()
            if not conn.supports(22):
                logger.warning("broker does not support InitProducerId; idempotence disabled")
                self.idempotent = self.acc.idempotent = False
                return
            resp = await conn.send(gen.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1,
                                                             producer_id=-1, producer_epoch=-1))
            if resp.error_code == 0:
                self.acc.producer_id = resp.producer_id
                self.acc.producer_epoch = resp.producer_epoch
                return
            err = for_code(resp.error_code)
            if not err.retriable:
                raise err("InitProducerId")
            await asyncio.sleep(self.retry_backoff_ms / 1000.0 * (attempt + 1))
        raise for_code(resp.error_code)("InitProducerId")

    # -- transactions (a transactional_id was given; see client/transactions.py) ------------

    async def init_transactions(self) -> None:
        """Gets the producer id and epoch of the transactional id (fencing older instances)."""
        await self._txn().init()

    def begin_transaction(self) -> None:
        self._txn().begin()

    async def send_offsets_to_transaction(self, offsets: dict[Any, Any], group_id: str) -> None:
        """Commits the consumer offsets {(topic, partition): offset} with the transaction."""
        await self._txn().send_offsets(offsets, group_id)

    async def commit_transaction(self) -> None:
        await self._txn().end(True)

    async def prepare_transaction(self) -> tuple[int, int]:
        """Flushes the open transaction and leaves it open (closing the producer does not end
        it): (producer id, epoch) for `transactions.end_prepared_transaction`, which commits
        or aborts it from any process; the first phase of a two-phase commit."""
        return await self._txn().prepare()

    async def abort_transaction(self) -> None:
        await self._txn().end(False)

    def _txn(self) -> Any:
        if self.txn is None:
            raise KafkaError("the producer has no transactional_id")
        return self.txn

    def fail_partition(self, tp: TopicPartition, exc: BaseException) -> None:
        """Fails every buffered batch of `tp` (its partition could not join the transaction)."""
        acc = self.acc
        assert acc is not None
        with acc.lock:
            q = acc.queues.get(tp)
            batches = list(q) if q else []
            if q:
                q.clear()
        for b in batches:
            acc.complete(b, None, exc)
        self._txn_failures.append(exc)

    def take_failures(self) -> list[BaseException]:
        out, self._txn_failures = self._txn_failures, []
        return out

    async def flush(self, timeout: float | None = None) -> None:
        """Sends everything buffered now (ignoring linger) and waits until it is acknowledged."""
        acc = self.acc
        assert acc is not None
        pending = [b.future for b in list(acc.incomplete)]
        if not pending:
            return
        acc.flushing += 1
        try:
            self.wakeup()
            await asyncio.wait(pending, timeout=timeout)
        finally:
            acc.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        if self.acc is not None:
            self.acc.closing = True
            try:
                await self.flush(timeout)
            finally:
                self._closed = True
                self.wakeup()
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            try:
                await self._sender
            except asyncio.CancelledError:
                pass
        await self.cluster.close()

    # -- sending -----------------------------------------------------------------------

    def _on_metadata(self) -> None:
        """Every metadata refresh (on errors, and every metadata.max.age.ms) updates the
        partition counts records are partitioned over: added partitions get records."""
        for t in list(self._num_partitions):
            parts = self.cluster.partitions_for(t)
            if parts:
                self._num_partitions[t] = len(parts)

    async def partitions_for(self, topic: str) -> list[int]:
        parts = await self.cluster.wait_for_topic(topic, timeout=self.max_block)
        self._num_partitions[topic] = len(parts)
        return parts

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, *, headers: Headers = None,
        partition: int | None = None, timestamp_ms: int | None = None,
    ) -> DeliveryFuture:
        """Buffers one record; the returned future completes when the broker acknowledges it."""
        n = self._num_partitions.get(topic)
        if n is None:
            n = len(await self.partitions_for(topic))
        res = self.append(topic, value, key, headers, partition, timestamp_ms, n)
        if res is None:
            deadline = time.monotonic() + self.max_block
            while res is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError(f"buffer.memory full for {self.max_block:.1f}s")
                try:
                    await asyncio.wait_for(self.acc.memory_future(), left)  # type: ignore[union-attr]
                except asyncio.TimeoutError:
                    pass
                res = self.append(topic, value, key, headers, partition, timestamp_ms, n)
        else:
            self._unyielded += 1 if value is None else len(value)
            if res[1] == 0 or self._unyielded >= _YIELD_EVERY_BYTES:
                # A batch just filled up, or a while passed: let the sender ship and the
                # connection flush and read answers while we append.
                self._unyielded = 0
                await asyncio.sleep(0)
        return res

    async def send_and_wait(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                            **kw: Any) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kw))

    def append(self, topic: str, value: bytes | None, key: bytes | None, headers: Headers, partition: int | None,
               timestamp_ms: int | None, num_partitions: int) -> DeliveryFuture | None:
        """Partitions and appends one record; None when buffer memory is full. From another
        thread than the loop's only once `acc.threaded` is set (the sync facade does)."""
        if self._closed:
            raise KafkaError("producer is closed")
        if self._fatal is not None:
            raise self._fatal
        txn = self.txn
        if txn is not None and not txn.in_transaction:
            raise KafkaError("a transactional producer sends only within begin_transaction()")
        if partition is None:
            partition = self.partitioner(topic, key, num_partitions)
        elif not 0 <= partition < num_partitions:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} (topic has {num_partitions} partitions)")
        ts = timestamp_ms if timestamp_ms is not None else time_ns() // 1_000_000
        tps = self._tps.get(topic)
        if tps is None or len(tps) != num_partitions:  # one TopicPartition per partition, not per record
            tps = self._tps[topic] = [TopicPartition(topic, i) for i in range(num_partitions)]
        acc = self.acc
        assert acc is not None
        tp = tps[partition]
        if txn is not None:
            txn.on_append(tp)
        if headers is None:
            headers = ()
        lock = acc.lock if acc.threaded else None
        if lock is not None:
            lock.acquire()  # not `with`: this is the per-record path, and `with` costs twice as much
        try:
            # The usual case: the partition's open batch takes the record (compiled).
            fut = append_to_last(acc.queues.get(tp), ts, key, value, headers, DeliveryFuture)
            if fut is not None:
                return fut
            # No open batch, or it is full: a new one, which makes a full one ready to send.
            res = acc.open_batch(tp, ts, key, value, headers)
        finally:
            if lock is not None:
                lock.release()
        if res is None:
            return None
        batch, index, event = res
        builder = batch.builder
        if builder is not None and builder.estimated_size > self.max_request_size:
            # The record alone is larger than a request may be (RecordTooLargeException in Java).
            acc.remove_from_queue(batch)
            exc = MessageTooLargeError(f"record of {builder.estimated_size} bytes > max.request.size "
                                       f"{self.max_request_size}")
            if self._in_loop_thread():
                acc.complete(batch, None, exc)
            else:
                self.loop.call_soon_threadsafe(acc.complete, batch, None, exc)  # type: ignore[union-attr]
        elif event == 2 or self.linger_ms <= 0 or len(acc.queues[tp]) > 1:
            # A batch is ready: this one is full already, or the one before it is.
            self._wake_from_any_thread()
            if self.partitioner.is_keyless(key):
                self.partitioner.on_new_batch(topic, num_partitions, partition)
        else:
            self._arm_from_any_thread(batch.created + self.linger_ms / 1000.0)
        return DeliveryFuture((batch, index, ts))

    # -- sender ------------------------------------------------------------------------

    def _wake_from_any_thread(self) -> None:
        loop = self.loop
        assert loop is not None
        if self._in_loop_thread():
            self.wakeup()
        else:
            loop.call_soon_threadsafe(self.wakeup)

    def _arm_from_any_thread(self, when: float) -> None:
        if self._in_loop_thread():
            self._arm(when)
        else:
            self.loop.call_soon_threadsafe(self._arm, when)  # type: ignore[union-attr]

    def _in_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def _arm(self, when: float) -> None:
        """Wakes the sender at monotonic time `when` unless it is woken earlier anyway."""
        timer = self._timer
        if timer is not None:
            if self._timer_when <= when + 0.0005:
                return
            timer.cancel()
        loop = self.loop
        assert loop is not None
        self._timer_when = when
        self._timer = loop.call_later(max(0.0, when - time.monotonic()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.wakeup()

    def wakeup(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _can_send(self, node: int) -> bool:
        return self._in_flight.get(node, 0) < self.max_in_flight

    async def _run(self) -> None:
        acc = self.acc
        loop = self.loop
        assert acc is not None and loop is not None
        cluster = self.cluster
        while True:
            try:
                now = time.monotonic()
                ready, next_check, unknown = acc.ready(cluster.leader_for, now, self._can_send)
                if unknown or self._refresh_wanted:
                    self._refresh_soon()
                if self.txn is not None:  # partitions not in the transaction yet wait for AddPartitionsToTxn
                    ready = {node: [tp for tp in tps if self.txn.may_send(tp)] for node, tps in ready.items()}
                for node, tps in ready.items():
                    conn = cluster.connection_if_open(node)
                    if conn is None:
                        self._connect_soon(node)
                        continue
                    batches = acc.drain(tps, self.max_request_size)
                    if batches:
                        self._send_batches(conn, node, batches)
                for batch in acc.expired(now, self.delivery_timeout):
                    acc.complete(batch, None, RequestTimedOutError(
                        f"{batch.tp}: not delivered within delivery.timeout.ms"))
                if self._closed and not acc.incomplete:
                    return
                self._waiter = loop.create_future()
                if next_check < 3600.0:
                    self._arm(now + next_check)
                await self._waiter
                self._waiter = None
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the sender alive; the failure is logged
                logger.exception("producer sender iteration failed")
                await asyncio.sleep(self.retry_backoff_ms / 1000.0)

    def _refresh_soon(self) -> None:
        self._refresh_wanted = True
        if self._refreshing:
            return
        self._refreshing = True

        async def run() -> None:
            try:
                await asyncio.sleep(self.retry_backoff_ms / 1000.0)
                self._refresh_wanted = False
                await self.cluster.refresh_metadata()
            except Exception as exc:
                logger.warning("metadata refresh failed: %r", exc)
            finally:
                self._refreshing = False
                self.wakeup()

        self.loop.create_task(run())  # type: ignore[union-attr]

    def _connect_soon(self, node: int) -> None:
        if node in self._connecting:
            return
        self._connecting.add(node)

        async def run() -> None:
            try:
                await self.cluster.connection(node)
            except Exception as exc:
                logger.warning("cannot connect to broker %d: %r", node, exc)
                self._refresh_wanted = True
                await asyncio.sleep(self.retry_backoff_ms / 1000.0)
            finally:
                self._connecting.discard(node)
                self.wakeup()

        self.loop.create_task(run())  # type: ignore[union-attr]

    def _send_batches(self, conn: BrokerConnection, node: int, batches: list[ProducerBatch]) -> None:
        TD = gen.ProduceRequest.TopicProduceData
        PD = TD.PartitionProduceData
        topics: dict[str, Any] = {}
        for b in batches:
            td = topics.get(b.tp.topic)
            if td is None:
                td = topics[b.tp.topic] = TD(name=b.tp.topic, partition_data=[])
            td.partition_data.append(PD(index=b.tp.partition, records=b.payload))
        req = gen.ProduceRequest(transactional_id=self.transactional_id, acks=self.acks, timeout_ms=self.request_timeout_ms,
                                 topic_data=list(topics.values()))
        acc = self.acc
        assert acc is not None
        try:
            version = conn.version(0)
            if self.acks == 0:
                conn.send_oneway(req, version)
                for b in batches:
                    acc.complete(b, (-1, -1), None)
                return
            fut = conn.send_nowait(req, version)
        except KafkaError as exc:
            self._on_failure(batches, exc)
            return
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        fut.add_done_callback(lambda f: self._on_response(f, conn, node, version, batches))

    def _on_response(self, fut: asyncio.Future, conn: BrokerConnection, node: int, version: int,
                     batches: list[ProducerBatch]) -> None:
        self._in_flight[node] -= 1
        try:
            exc = fut.exception()
            if exc is not None:
                self._on_failure(batches, exc)
                return
            resp = conn.decode(0, version, fut.result())
            by_tp: dict[tuple[str, int], Any] = {}
            for t in resp.responses:
                for p in t.partition_responses:
                    by_tp[(t.name, p.index)] = p
            for b in batches:
                p = by_tp.get(b.tp)
                if p is None:
                    self._on_failure([b], InvalidRequestError(f"no answer for {b.tp}"))
                elif p.error_code == 0 or p.error_code == DuplicateSequenceNumberError.code:
                    self.acc.complete(b, (p.base_offset, p.log_append_time_ms), None)  # type: ignore[union-attr]
                else:
                    err = for_code(p.error_code)
                    self._on_failure([b], err(f"{b.tp}: {p.error_message or err.name}"))
        finally:
            self.wakeup()

    def _on_failure(self, batches: list[ProducerBatch], exc: BaseException) -> None:
        acc = self.acc
        assert acc is not None
        now = time.monotonic()
        for b in batches:
            retriable = isinstance(exc, KafkaError) and exc.retriable
            if isinstance(exc, OutOfOrderSequenceNumberError) and acc.idempotent and acc.earlier_unacked(b):
                retriable = True  # an earlier batch is being resent; this one follows it
            if isinstance(exc, KafkaError) and exc.code in _METADATA_ERRORS:
                self._refresh_wanted = True
            if retriable and b.attempts < self.retries and now - b.created < self.delivery_timeout:
                logger.debug("retrying %r after %r", b, exc)
                acc.requeue(b)
            else:
                acc.complete(b, None, exc)
                if self.txn is not None:
                    self._txn_failures.append(exc)
        self.wakeup()


__all__ = ["AIOProducer", "DeliveryFuture", "CODECS"]
