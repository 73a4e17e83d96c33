"""What the client knows about the cluster, and the connections to its brokers.

`Cluster` bootstraps from a list of `host:port` addresses, asks Metadata for brokers and
partition leaders, keeps one `BrokerConnection` per broker (opened on first use, reopened
after it drops) and refreshes metadata on demand (NOT_LEADER / UNKNOWN_TOPIC errors) and
every `metadata_max_age_ms`.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kafkafast.client.connection import BrokerConnection
from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    LeaderNotAvailableError,
    NetworkError,
    SaslAuthenticationFailedError,
    UnknownTopicOrPartitionError,
    for_code,
)

logger = logging.getLogger("kafkafast.client")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    error_code: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    error_code: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    is_internal: bool = False


def parse_bootstrap(bootstrap: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "127.0.0.1", int(port or 9092)))
    if not out:
        raise ValueError(f"no bootstrap address in {bootstrap!r}")
    return out


class Cluster:
    """Metadata and connections; every client (producer, consumer, admin, low-level) has one."""

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        *,
        client_id: str = "kafkafast",
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        max_in_flight: int = 5,
        retry_backoff_ms: int = 100,
        allow_auto_topic_creation: bool = True,
        security: Any = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security  # TLS context and SASL login (kafkafast.security.client.ClientSecurity), or None
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age = metadata_max_age_ms / 1000.0
        self.max_in_flight = max_in_flight
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.wanted_topics: set[str] = set()
        self.want_all_topics = False
        self.last_refresh = 0.0
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._refreshing: asyncio.Future | None = None
        self._refresh_task: asyncio.Task | None = None
        self.metadata_version = 0  # bumped on every refresh
        self.on_update: list[Callable[[], None]] = []  # called after every refresh
        self.closed = False

    # -- connections ------------------------------------------------------------------

    def _new_conn(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(host, port, node_id=node_id, client_id=self.client_id,
                                max_in_flight=self.max_in_flight, request_timeout_ms=self.request_timeout_ms,
                                security=self.security)

    async def start(self) -> Cluster:
        await self.refresh_metadata()
        if self.metadata_max_age > 0:
            self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_periodically())
        return self

    async def _refresh_periodically(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.metadata_max_age)
            try:
                await self.refresh_metadata()
            except KafkaError as exc:
                logger.warning("periodic metadata refresh failed: %r", exc)

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: an open one if there is, else bootstrap addresses."""
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        candidates = [(b.host, b.port, b.node_id) for b in self.brokers.values()]
        random.shuffle(candidates)
        candidates += [(h, p, -1) for h, p in self.bootstrap]
        last: Exception | None = None
        for host, port, node_id in candidates:
            try:
                if node_id >= 0:
                    return await self.connection(node_id)
                conn = await self._new_conn(host, port, -1).connect()
                self._bootstrap_conn = conn
                return conn
            except SaslAuthenticationFailedError:
                raise  # a refused login is not a broker being away: fatal, as Kafka's AuthenticationException
            except KafkaError as exc:
                last = exc
        raise NetworkError(f"no broker reachable (tried {candidates}): {last!r}")

    async def connection(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        info = self.brokers.get(node_id)
        if info is None:
            await self.refresh_metadata()
            info = self.brokers.get(node_id)
            if info is None:
                raise LeaderNotAvailableError(f"broker {node_id} is not in the metadata")
        fut = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = fut
        try:
            conn = await self._new_conn(info.host, info.port, node_id).connect()
            self._conns[node_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            del self._connecting[node_id]

    def connection_if_open(self, node_id: int) -> BrokerConnection | None:
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def send(self, node_id: int, request: Any) -> Any:
        conn = await self.connection(node_id)
        return await conn.send(request)

    async def send_any(self, request: Any) -> Any:
        conn = await self.any_connection()
        return await conn.send(request)

    # -- metadata ---------------------------------------------------------------------

    def add_topics(self, topics: list[str] | set[str]) -> bool:
        """Adds topics to those refreshed; True if any was new."""
        new = set(topics) - self.wanted_topics
        self.wanted_topics |= new
        return bool(new)

    async def refresh_metadata(self, topics: list[str] | None = None) -> None:
        """Refreshes brokers and the wanted topics (or `topics`, added to them). Concurrent
        calls share one request."""
        if topics:
            self.add_topics(topics)
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
            return
        fut = asyncio.get_running_loop().create_future()
        self._refreshing = fut
        try:
            await self._refresh()
            fut.set_result(None)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._refreshing = None

    async def _refresh(self) -> None:
        last: Exception | None = None
        for attempt in range(3):
            try:
                conn = await self.any_connection()
                version = conn.version(3)
                Topic = gen.MetadataRequest.MetadataRequestTopic
                if self.want_all_topics:
                    req_topics = None
                else:
                    req_topics = [Topic(name=t) for t in sorted(self.wanted_topics)]
                req = gen.MetadataRequest(topics=req_topics,
                                          allow_auto_topic_creation=self.allow_auto_topic_creation)
                resp = await conn.send(req, version=version)
                break
            except NetworkError as exc:
                last = exc
                await asyncio.sleep(self.retry_backoff * (attempt + 1))
        else:
            raise NetworkError(f"metadata refresh failed: {last!r}")
        self._apply_metadata(resp)

    def _apply_metadata(self, resp: Any) -> None:
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        topics: dict[str, TopicInfo] = {} if self.want_all_topics else dict(self.topics)
        for t in resp.topics:
            info = TopicInfo(t.name, t.error_code, is_internal=t.is_internal)
            for p in t.partitions:
                info.partitions[p.partition_index] = PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch,
                                                                   p.error_code)
            topics[t.name] = info
        self.topics = topics
        self.last_refresh = time.monotonic()
        self.metadata_version += 1
        for fn in self.on_update:
            fn()
        for node_id, conn in list(self._conns.items()):
            broker = self.brokers.get(node_id)
            if broker is None or (broker.host, broker.port) != (conn.host, conn.port):
                conn.close()
                del self._conns[node_id]

    def partitions_for(self, topic: str) -> list[int] | None:
        info = self.topics.get(topic)
        if info is None or info.error_code or not info.partitions:
            return None
        return sorted(info.partitions)

    def leader_for(self, tp: TopicPartition | tuple[str, int]) -> int:
        """Leader node id, -1 when unknown."""
        info = self.topics.get(tp[0])
        if info is None:
            return -1
        p = info.partitions.get(tp[1])
        return -1 if p is None else p.leader

    async def wait_for_topic(self, topic: str, timeout: float | None = None) -> list[int]:
        """Partition ids of `topic`, refreshing metadata until it is known."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.request_timeout_ms / 1000.0)
        self.add_topics([topic])
        backoff = self.retry_backoff
        while True:
            parts = self.partitions_for(topic)
            if parts is not None and all(p.leader >= 0 for p in self.topics[topic].partitions.values()):
                return parts
            info = self.topics.get(topic)
            if time.monotonic() >= deadline:
                code = info.error_code if info is not None and info.error_code else UnknownTopicOrPartitionError.code
                raise for_code(code)(f"topic {topic!r} has no usable metadata")
            if info is not None and info.error_code and not for_code(info.error_code).retriable:
                raise for_code(info.error_code)(f"topic {topic!r}")
            await self.refresh_metadata()
            if self.partitions_for(topic) is None:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def leader_connection(self, tp: TopicPartition | tuple[str, int]) -> BrokerConnection:
        leader = self.leader_for(tp)
        if leader < 0:
            await self.wait_for_topic(tp[0])
            leader = self.leader_for(tp)
            if leader < 0:
                raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]}")
        return await self.connection(leader)

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        """Node id of the group (key_type 0) or transaction (1) coordinator; the node is
        added to the broker list if the metadata did not have it."""
        backoff = self.retry_backoff
        deadline = time.monotonic() + self.request_timeout_ms / 1000.0
        while True:
            conn = await self.any_connection()
            v = conn.version(10)
            resp = await conn.send(gen.FindCoordinatorRequest(key=key, key_type=key_type), version=v)
            code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            if code == 0:
                if node not in self.brokers or (self.brokers[node].host, self.brokers[node].port) != (host, port):
                    self.brokers[node] = BrokerInfo(node, host, port)
                return node
            err = for_code(code)
            if not err.retriable or time.monotonic() > deadline:
                raise err(f"FindCoordinator({key!r}): {resp.error_message or err.name}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def close(self) -> None:
        self.closed = True
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            self._refresh_task = None
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()
            self._bootstrap_conn = None


__all__ = ["BrokerInfo", "Cluster", "OffsetAndMetadata", "PartitionInfo", "TopicInfo", "TopicPartition",
           "parse_bootstrap", "CoordinatorNotAvailableError"]
