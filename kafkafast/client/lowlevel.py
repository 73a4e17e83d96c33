"""Low-level reads without a group: offsets by time, partition lists, a range of a partition.

Each function opens its own connections (bootstrap -> metadata -> partition leaders) and
closes them when done, so they can be called from anywhere (Spark executors included).
Signatures are stable; the synchronous twins are `*_sync` here and in
`kafkafast.client.sync`.

A range of a partition comes as lists of `ConsumerRecord`s (`fetch_range`) or as
`pyarrow.RecordBatch`es decoded straight from the fetched bytes into Arrow columns
(`fetch_arrow`, `read_arrow`; see `kafkafast.client.arrow`).

Timestamps for `list_offsets`: `EARLIEST` (-2), `LATEST` (-1), or milliseconds since the
epoch (the first offset whose timestamp is >= it; (-1, -1) when there is none).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from kafkafast.client.cluster import Cluster
from kafkafast.client.records import ConsumerRecord, decode_fetched, fetched_next_offset
from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import KafkaError, NetworkError, OffsetOutOfRangeError, for_code
from kafkafast.records.compression import MAX_DECOMPRESSED_SIZE

EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

T = TypeVar("T")

_RETRIES = 5


async def _with_cluster(bootstrap: str, fn: Callable[[Cluster], Awaitable[T]], topics: list[str] | None = None,
                        security: Any = None) -> T:
    cluster = Cluster(bootstrap, metadata_max_age_ms=0, allow_auto_topic_creation=False, security=security)
    try:
        if topics:
            cluster.add_topics(topics)
        await cluster.start()
        return await fn(cluster)
    finally:
        await cluster.close()


async def list_offsets_with(
    cluster: Cluster, topic_partitions: Sequence[tuple[str, int]], timestamp: int, *, isolation_level: int = READ_UNCOMMITTED,
) -> dict[tuple[str, int], tuple[int, int]]:
    """`list_offsets` on an open `Cluster`."""
    wanted = [(t, p) for t, p in topic_partitions]
    result: dict[tuple[str, int], tuple[int, int]] = {}
    for attempt in range(_RETRIES):
        for topic in {t for t, _ in wanted}:
            await cluster.wait_for_topic(topic)
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in wanted:
            by_leader.setdefault(cluster.leader_for(tp), []).append(tp)
        retry: list[tuple[str, int]] = []
        last_err: type[KafkaError] | None = None

        async def one(leader: int, tps: list[tuple[str, int]]) -> None:
            nonlocal last_err
            Topic = gen.ListOffsetsRequest.ListOffsetsTopic
            Part = Topic.ListOffsetsPartition
            topics: dict[str, Any] = {}
            for t, p in tps:
                topics.setdefault(t, Topic(name=t, partitions=[])).partitions.append(
                    Part(partition_index=p, timestamp=timestamp))
            req = gen.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=list(topics.values()))
            try:
                resp = await cluster.send(leader, req)
            except NetworkError:
                retry.extend(tps)
                return
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        err = for_code(p.error_code)
                        if not err.retriable:
                            raise err(f"ListOffsets {t.name}-{p.partition_index}")
                        last_err = err
                        retry.append((t.name, p.partition_index))
                    else:
                        result[(t.name, p.partition_index)] = (p.offset, p.timestamp)

        await asyncio.gather(*(one(leader, tps) for leader, tps in by_leader.items()))
        if not retry:
            return result
        wanted = retry
        await asyncio.sleep(0.1 * (attempt + 1))
        await cluster.refresh_metadata()
    raise (last_err or NetworkError)(f"ListOffsets failed for {wanted}")


async def list_offsets(
    bootstrap: str, topic_partitions: list[tuple[str, int]], timestamp: int, *, security: Any = None,
) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (offset, timestamp)} for `timestamp` (-2 earliest, -1 latest, or ms).
    `security` here and below: kafkafast.security.client.ClientSecurity (TLS, SASL), or None."""
    return await _with_cluster(bootstrap, lambda c: list_offsets_with(c, topic_partitions, timestamp),
                               sorted({t for t, _ in topic_partitions}), security)


async def partitions_for(bootstrap: str, topic: str, *, security: Any = None) -> list[int]:
    """Partition ids of `topic`, sorted; UnknownTopicOrPartitionError if it does not exist."""
    async def run(cluster: Cluster) -> list[int]:
        return await cluster.wait_for_topic(topic, timeout=5.0)
    return await _with_cluster(bootstrap, run, [topic], security)


async def topics(bootstrap: str, *, security: Any = None) -> list[str]:
    """Names of all topics (internal ones excluded), sorted."""
    async def run(cluster: Cluster) -> list[str]:
        cluster.want_all_topics = True
        await cluster.refresh_metadata()
        return sorted(t.name for t in cluster.topics.values() if not t.is_internal and not t.error_code)
    return await _with_cluster(bootstrap, run, None, security)


def fetch_request(
    parts: dict[str, list[tuple[int, int, int]]], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
    isolation_level: int = READ_UNCOMMITTED,
) -> Any:
    """A Fetch request for {topic: [(partition, fetch_offset, partition_max_bytes)]}."""
    FT = gen.FetchRequest.FetchTopic
    FP = FT.FetchPartition
    return gen.FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level, session_id=0, session_epoch=-1,
        topics=[FT(topic=t, partitions=[FP(partition=p, fetch_offset=o, partition_max_bytes=m, current_leader_epoch=-1,
                                           log_start_offset=-1)
                                        for p, o, m in ps]) for t, ps in parts.items()],
        forgotten_topics_data=[], rack_id="",
    )


async def _fetch_loop(
    cluster: Cluster, topic: str, partition: int, start: int, end: int, decode: Callable[[Any, int, Any], tuple[T, int]], *,
    max_bytes: int, max_wait_ms: int, isolation_level: int, timeout_ms: int | None, prefetch: bool = True,
) -> AsyncIterator[T]:
    """Fetches [start, end) of one partition from its leader; each fetched record set goes
    to `decode(record_set, offset, aborted transactions or None)` -> (result, next offset), and each truthy result is
    yielded. Retries, waiting for offsets not written yet and the timeout are shared by
    every way of decoding.

    `prefetch`: as soon as a response is in, the Fetch for the offset after its last
    complete batch (read from the batch headers alone) is sent, before the record set is
    decoded and handed on: the broker sends the next record set while this one is decoded
    and consumed, instead of the two taking turns. A prefetched answer for an offset the
    decoder did not arrive at (an end bound, an error) is dropped."""
    offset = start
    deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
    failures = 0
    pending: tuple[int, Any, Any] | None = None  # (offset, connection, future of the raw answer)
    await cluster.wait_for_topic(topic)

    def send(conn: Any, at: int) -> Any:
        return conn.send_nowait(fetch_request({topic: [(partition, at, max_bytes)]}, max_wait_ms=max_wait_ms,
                                              min_bytes=1, max_bytes=max_bytes, isolation_level=isolation_level))

    try:
        while offset < end:
            try:
                if pending is not None and pending[0] == offset and not pending[1].closed:
                    _, conn, fut = pending
                else:
                    _drop(pending)
                    conn = await cluster.leader_connection((topic, partition))
                    fut = send(conn, offset)
                pending = None
                resp = conn.decode(gen.FetchRequest.API_KEY, conn.version(gen.FetchRequest.API_KEY), await fut)
            except NetworkError:
                pending = None
                failures += 1
                if failures > _RETRIES:
                    raise
                await asyncio.sleep(0.1 * failures)
                await cluster.refresh_metadata()
                continue
            if resp.error_code:
                raise for_code(resp.error_code)("Fetch")
            pdata = resp.responses[0].partitions[0]
            if pdata.error_code:
                err = for_code(pdata.error_code)
                if err is OffsetOutOfRangeError or not err.retriable:
                    raise err(f"Fetch {topic}-{partition} at {offset} (log start {pdata.log_start_offset}, "
                              f"high watermark {pdata.high_watermark})")
                failures += 1
                if failures > _RETRIES:
                    raise err(f"Fetch {topic}-{partition}")
                await asyncio.sleep(0.1 * failures)
                await cluster.refresh_metadata()
                continue
            failures = 0
            if prefetch and pdata.records:
                ahead = fetched_next_offset(pdata.records, offset)
                if offset < ahead < end:
                    pending = (ahead, conn, send(conn, ahead))
            aborted = pdata.aborted_transactions if isolation_level else None  # READ_COMMITTED
            result, next_offset = decode(pdata.records, offset, aborted)
            if next_offset <= offset and pdata.records and len(pdata.records) >= max_bytes:
                max_bytes *= 2  # one batch larger than max_bytes (pre-KIP-74 brokers)
                continue
            if result:
                yield result
            if next_offset > offset:
                offset = next_offset
                if timeout_ms is not None:
                    deadline = time.monotonic() + timeout_ms / 1000.0
            elif pdata.high_watermark <= offset:
                if deadline is not None and time.monotonic() > deadline:
                    raise OffsetOutOfRangeError(
                        f"{topic}-{partition}: offset {offset} not reached (high watermark {pdata.high_watermark})")
            if deadline is not None and time.monotonic() > deadline and offset < end:
                raise for_code(7)(f"fetch_range {topic}-{partition} [{start}, {end}) stopped at {offset}")
    finally:
        _drop(pending)


def _drop(pending: tuple[int, Any, Any] | None) -> None:
    """Forgets a prefetched Fetch: its answer (or error) is read when it comes and dropped."""
    if pending is not None:
        pending[2].add_done_callback(lambda f: f.cancelled() or f.exception())


async def fetch_range_with(
    cluster: Cluster, topic: str, partition: int, start: int, end: int, *,
    max_bytes: int = 4 * 1024 * 1024, max_wait_ms: int = 500, isolation_level: int = READ_UNCOMMITTED,
    timeout_ms: int | None = 60000,
) -> AsyncIterator[list[ConsumerRecord]]:
    """`fetch_range` on an open `Cluster`."""
    def decode(buf: Any, offset: int, aborted: Any) -> tuple[list[ConsumerRecord], int]:
        return decode_fetched(buf, topic, partition, offset, end, aborted=aborted)
    async for records in _fetch_loop(cluster, topic, partition, start, end, decode, max_bytes=max_bytes,
                                     max_wait_ms=max_wait_ms, isolation_level=isolation_level, timeout_ms=timeout_ms):
        yield records


async def fetch_arrow_with(
    cluster: Cluster, topic: str, partition: int, start: int, end: int, *,
    max_records: int = 10_000, include_headers: bool = True, max_bytes: int = 4 * 1024 * 1024,
    max_wait_ms: int = 500, isolation_level: int = READ_UNCOMMITTED, timeout_ms: int | None = 60000,
    timestamp_unit: str = "ms", max_decompressed_bytes: int = MAX_DECOMPRESSED_SIZE,
) -> AsyncIterator[Any]:
    """`fetch_arrow` on an open `Cluster`."""
    from kafkafast.client import arrow  # pyarrow is needed only here

    columns = arrow.ArrowColumns(include_headers, timestamp_unit)
    scratch = arrow.DecompressBuffer(max_decompressed_bytes)  # kept for the whole read

    def decode(buf: Any, offset: int, aborted: Any) -> tuple[bool, int]:
        next_offset = arrow.decode_fetched_arrow(columns, buf, offset, end, aborted=aborted, scratch=scratch)
        return arrow.columns_full(columns, max_records), next_offset
    async for _ in _fetch_loop(cluster, topic, partition, start, end, decode, max_bytes=max_bytes,
                               max_wait_ms=max_wait_ms, isolation_level=isolation_level, timeout_ms=timeout_ms):
        for batch in arrow.record_batches(columns, max_records):
            yield batch
    for batch in arrow.record_batches(columns, max_records):
        yield batch


async def fetch_range(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *,
    max_bytes: int = 4 * 1024 * 1024, isolation_level: int = READ_UNCOMMITTED, timeout_ms: int | None = 60000,
    security: Any = None,
) -> AsyncIterator[list[ConsumerRecord]]:
    """Lists of records with offsets in [start, end) of one partition, read from its leader.

    Gaps (compacted topics, control batches) are skipped; waits (up to `timeout_ms`) for
    offsets not written yet; OffsetOutOfRangeError when `start` is below the log start.
    """
    cluster = Cluster(bootstrap, metadata_max_age_ms=0, allow_auto_topic_creation=False, security=security)
    try:
        cluster.add_topics([topic])
        await cluster.start()
        async for batch in fetch_range_with(cluster, topic, partition, start, end, max_bytes=max_bytes,
                                            isolation_level=isolation_level, timeout_ms=timeout_ms):
            yield batch
    finally:
        await cluster.close()


async def fetch_arrow(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *,
    max_records: int = 10_000, include_headers: bool = True, max_bytes: int = 4 * 1024 * 1024,
    isolation_level: int = READ_UNCOMMITTED, timeout_ms: int | None = 60000, timestamp_unit: str = "ms",
    max_decompressed_bytes: int = MAX_DECOMPRESSED_SIZE, security: Any = None,
) -> AsyncIterator[Any]:
    """The records with offsets in [start, end) of one partition as `pyarrow.RecordBatch`es
    of at most `max_records` rows, decoded straight from the fetched bytes into Arrow
    columns (`kafkafast.client.arrow`: schema `record_schema(include_headers,
    timestamp_unit)`; timestamps in "ms", or "us" as Spark's). Compressed batches are
    decompressed into one buffer kept for the whole read, never larger than
    `max_decompressed_bytes` (a batch that decompresses to more fails with
    DecompressedSizeError). Gaps, waiting and errors as `fetch_range`. Needs pyarrow."""
    cluster = Cluster(bootstrap, metadata_max_age_ms=0, allow_auto_topic_creation=False, security=security)
    try:
        cluster.add_topics([topic])
        await cluster.start()
        async for batch in fetch_arrow_with(cluster, topic, partition, start, end, max_records=max_records,
                                            include_headers=include_headers, max_bytes=max_bytes,
                                            isolation_level=isolation_level, timeout_ms=timeout_ms,
                                            timestamp_unit=timestamp_unit,
                                            max_decompressed_bytes=max_decompressed_bytes):
            yield batch
    finally:
        await cluster.close()


# -- synchronous twins ----------------------------------------------------------------

def list_offsets_sync(
    bootstrap: str, topic_partitions: list[tuple[str, int]], timestamp: int,
) -> dict[tuple[str, int], tuple[int, int]]:
    return asyncio.run(list_offsets(bootstrap, topic_partitions, timestamp))


def partitions_for_sync(bootstrap: str, topic: str) -> list[int]:
    return asyncio.run(partitions_for(bootstrap, topic))


def topics_sync(bootstrap: str) -> list[str]:
    return asyncio.run(topics(bootstrap))


def _drive(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterates an async generator on a private event loop."""
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(agen.aclose())  # type: ignore[attr-defined]  # an async generator
        loop.close()


def fetch_range_sync(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *,
    max_bytes: int = 4 * 1024 * 1024, isolation_level: int = READ_UNCOMMITTED, timeout_ms: int | None = 60000,
    security: Any = None,
) -> Iterator[list[ConsumerRecord]]:
    """Generator over the same lists as `fetch_range`, driving a private event loop."""
    return _drive(fetch_range(bootstrap, topic, partition, start, end, max_bytes=max_bytes,
                              isolation_level=isolation_level, timeout_ms=timeout_ms, security=security))


def read_arrow(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *,
    max_records: int = 10_000, include_headers: bool = True, max_bytes: int = 4 * 1024 * 1024,
    isolation_level: int = READ_UNCOMMITTED, timeout_ms: int | None = 60000, timestamp_unit: str = "ms",
    max_decompressed_bytes: int = MAX_DECOMPRESSED_SIZE, security: Any = None,
) -> Iterator[Any]:
    """Generator over the same `pyarrow.RecordBatch`es as `fetch_arrow`, driving a private
    event loop: the records with offsets in [start, end) of one partition, at most
    `max_records` rows per batch."""
    return _drive(fetch_arrow(bootstrap, topic, partition, start, end, max_records=max_records,
                              include_headers=include_headers, max_bytes=max_bytes,
                              isolation_level=isolation_level, timeout_ms=timeout_ms, timestamp_unit=timestamp_unit,
                              max_decompressed_bytes=max_decompressed_bytes, security=security))


__all__ = [
    "EARLIEST", "LATEST", "READ_COMMITTED", "READ_UNCOMMITTED", "fetch_arrow", "fetch_arrow_with", "fetch_range",
    "fetch_range_sync", "fetch_range_with",
    "fetch_request", "list_offsets", "list_offsets_sync", "list_offsets_with", "partitions_for",
    "partitions_for_sync", "read_arrow", "topics", "topics_sync",
]
