"""The only module that talks to Kafka: planning questions on the driver, range reads on
executors, through `kafkafast.client.lowlevel` (no consumer group is ever joined).

Every call opens its own connections and closes them, so nothing socket- or loop-related
survives pickling to a Spark worker.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kafkafast.client import lowlevel
from kafkafast.client.cluster import Cluster
from kafkafast.protocol.errors import KafkaError, OffsetOutOfRangeError, UnknownTopicOrPartitionError, for_code

from pyspark_kafkafast.options import Assign, Subscribe, SubscribePattern, Subscription, TopicPartition
from pyspark_kafkafast.planning import OffsetRange, PartitionOffsets, report_data_loss

logger = logging.getLogger("pyspark_kafkafast")


def named(exc: KafkaError) -> KafkaError:
    """The error with Kafka's error name in its message (TOPIC_AUTHORIZATION_FAILED: ...), the
    name a Spark user searches for in the query's failure."""
    return exc if str(exc).startswith(exc.name) else type(exc)(f"{exc.name}: {exc}")


class BrokerLookup:
    """`planning.OffsetLookup` answered by a Kafka-compatible broker.

    Used as a context manager (`with BrokerLookup(...) as lookup:`) all its calls share one
    event loop and one set of connections, opened at the first call and closed at the end:
    a batch plan asks for metadata, earliest and latest offsets over one bootstrap instead of
    three. Outside a `with` block each call opens and closes its own.
    """

    def __init__(self, bootstrap: str, *, request_timeout_ms: int = 30000, isolation_level: int = 0,
                 security: Any = None, attempts: int = 1, retry_interval_ms: int = 1000) -> None:
        self.bootstrap = bootstrap
        self.request_timeout_ms = request_timeout_ms
        self.isolation_level = isolation_level  # 1 (read_committed): "latest" is the last stable offset
        self.security = security  # kafkafast.security.client.ClientSecurity (TLS, SASL), or None
        # Spark's fetchOffset.numRetries / fetchOffset.retryIntervalMs: a call that fails with a
        # retriable error (a broker not reachable, a leader moving) is made `attempts` times.
        self.attempts = attempts
        self.retry_interval = retry_interval_ms / 1000.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cluster: Cluster | None = None

    def __enter__(self) -> BrokerLookup:
        self._loop = asyncio.new_event_loop()
        return self

    def __exit__(self, *exc_info: object) -> None:
        loop, cluster = self._loop, self._cluster
        self._loop = self._cluster = None
        if loop is None:
            return
        try:
            if cluster is not None:
                loop.run_until_complete(cluster.close())
        finally:
            loop.close()

    def _new_cluster(self, topics: list[str] | None, all_topics: bool) -> Cluster:
        cluster = Cluster(self.bootstrap, metadata_max_age_ms=0, allow_auto_topic_creation=False,
                          request_timeout_ms=self.request_timeout_ms, client_id="kafkafast-spark",
                          security=self.security)
        cluster.want_all_topics = all_topics
        if topics:
            cluster.add_topics(topics)
        return cluster

    def _run(self, topics: list[str] | None, fn: Any, *, all_topics: bool = False) -> Any:
        for attempt in range(1, self.attempts + 1):
            try:
                return self._run_once(topics, fn, all_topics)
            except KafkaError as exc:
                if not exc.retriable or attempt >= self.attempts:
                    raise named(exc) from exc
                logger.warning("kafkafast planning call failed (attempt %d of %d), retrying in %.1f s: %s",
                               attempt, self.attempts, self.retry_interval, exc)
                self._drop_shared()
                time.sleep(self.retry_interval)
        raise AssertionError("unreachable")

    def _drop_shared(self) -> None:
        """Closes the shared connections after a failure, so the next attempt bootstraps anew."""
        if self._loop is not None and self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            self._loop.run_until_complete(cluster.close())

    def _run_once(self, topics: list[str] | None, fn: Any, all_topics: bool) -> Any:
        if self._loop is not None:
            return self._loop.run_until_complete(self._run_shared(topics, fn, all_topics))

        async def once() -> Any:
            cluster = self._new_cluster(topics, all_topics)
            try:
                await cluster.start()
                return await fn(cluster)
            finally:
                await cluster.close()
        return asyncio.run(once())

    async def _run_shared(self, topics: list[str] | None, fn: Any, all_topics: bool) -> Any:
        cluster = self._cluster
        if cluster is None:
            cluster = self._cluster = self._new_cluster(topics, all_topics)
            await cluster.start()
        elif cluster.add_topics(topics or []) or (all_topics and not cluster.want_all_topics):
            cluster.want_all_topics = cluster.want_all_topics or all_topics
            await cluster.refresh_metadata()
        return await fn(cluster)

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        if isinstance(subscription, Assign):
            return sorted(set(subscription.partitions))
        if isinstance(subscription, Subscribe):
            async def subscribed(cluster: Cluster) -> list[TopicPartition]:
                # A topic that does not exist (yet) has no partitions, as with Kafka's subscribe();
                # one the principal may not describe fails the query (never a silent empty read).
                for t in subscription.topics:
                    info = cluster.topics.get(t)
                    if info is not None and info.error_code and info.error_code != UnknownTopicOrPartitionError.code:
                        raise for_code(info.error_code)(f"Metadata for topic {t!r}")
                return [(t, p) for t in subscription.topics for p in (cluster.partitions_for(t) or [])]
            return sorted(self._run(list(subscription.topics), subscribed))
        if isinstance(subscription, SubscribePattern):
            async def matching(cluster: Cluster) -> list[TopicPartition]:
                return [(t.name, p) for t in cluster.topics.values()
                        if not t.is_internal and not t.error_code and subscription.matches(t.name)
                        for p in t.partitions]
            return sorted(self._run(None, matching, all_topics=True))
        raise TypeError(f"unknown subscription {subscription!r}")

    def _list(self, timestamps: Mapping[int, list[TopicPartition]]) -> dict[TopicPartition, int]:
        wanted = [tp for tps in timestamps.values() for tp in tps]
        if not wanted:
            return {}

        async def run(cluster: Cluster) -> dict[TopicPartition, int]:
            out: dict[TopicPartition, int] = {}
            for ts, tps in timestamps.items():
                found = await lowlevel.list_offsets_with(cluster, list(tps), ts, isolation_level=self.isolation_level)
                out.update({tp: off for tp, (off, _) in found.items()})
            return out
        return self._run(sorted({t for t, _ in wanted}), run)

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list({lowlevel.EARLIEST: list(tps)})

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list({lowlevel.LATEST: list(tps)})

    def for_timestamps(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        by_ts: dict[int, list[TopicPartition]] = {}
        for tp, ts in timestamps.items():
            by_ts.setdefault(int(ts), []).append(tp)
        found = self._list(by_ts)
        return {tp: (None if off < 0 else off) for tp, off in found.items()}


def read_range(bootstrap: str, r: OffsetRange, *, fail_on_data_loss: bool, max_bytes: int, timeout_ms: int,
               max_records: int, include_headers: bool, isolation_level: int = 0, security: Any = None
               ) -> Iterator[Any]:
    """`pyarrow.RecordBatch`es (kafkafast.client.arrow.record_schema, timestamps in
    microseconds as Spark's TimestampType) of the records with
    offsets in [r.start, r.until), read from the partition leader, at most `max_records`
    rows each.

    `timeout_ms` (kafkaConsumer.pollTimeoutMs): how long to wait for offsets of the range that
    are not there yet before failing the task. `security`: ClientSecurity or None.
    isolation_level 1 (kafka.isolation.level=read_committed): aborted records and control
    batches are skipped. When offsets the range needs have been deleted (retention) the read fails with
    DataLossError, or with failOnDataLoss=false continues at the log start offset, as Spark's
    Kafka reader does.
    """
    position = r.start  # next offset not yet handed out
    while position < r.until:
        try:
            for batch in lowlevel.read_arrow(bootstrap, r.topic, r.partition, position, r.until,
                                             max_records=max_records, include_headers=include_headers,
                                             max_bytes=max_bytes, timeout_ms=timeout_ms,
                                             isolation_level=isolation_level, timestamp_unit="us",
                                             security=security):
                position = batch.column("offset")[-1].as_py() + 1
                yield batch
            return
        except OffsetOutOfRangeError as exc:
            earliest = BrokerLookup(bootstrap, security=security).earliest([r.topic_partition]).get(
                r.topic_partition, r.until)
            if earliest <= position:
                raise
            report_data_loss(f"Cannot fetch offset {position} of {r.topic}-{r.partition} ({exc}); the earliest "
                             f"available offset is {earliest}", fail_on_data_loss)
            position = earliest
        except KafkaError as exc:
            raise named(exc) from exc
