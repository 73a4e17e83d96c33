"""What this broker knows of the cluster, from the controller's UpdateMetadata requests
(Kafka's `ZkMetadataCache`): live brokers and the endpoint of each of their listeners
(clients are answered with the endpoints of the listener they came in on; the broker's own
connections use the inter-broker listener's), the controller, and each
partition's leader, leader epoch, replicas, ISR and offline replicas. Also the topic view
(`ClusterTopics`) the handlers read through `broker.topics` in cluster mode."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kafkafast.broker.topics import TopicMeta

LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str  # host and port: the inter-broker listener's endpoint
    port: int
    rack: str | None
    listeners: tuple[tuple[str, str, int], ...] = ()  # (listener name, host, port) of every listener

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """The broker's endpoint on `listener` (None: it has no such listener); the
        inter-broker one for None (internal connections)."""
        if listener is None:
            return self.host, self.port
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


class MetadataCache:
    def __init__(self, listener: str) -> None:
        self.listener = listener
        self.controller_id = -1
        self.controller_epoch = 0
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        self.topic_ids: dict[str, bytes] = {}

    def update(self, req: Any) -> list[str]:
        """Applies an UpdateMetadata request; returns the topics seen for the first time."""
        self.controller_id = req.controller_id
        self.controller_epoch = req.controller_epoch
        brokers = {}
        for b in req.live_brokers:
            eps = {e.listener: e for e in b.endpoints}
            ep = eps.get(self.listener) or next(iter(eps.values()), None)
            if ep is not None:
                brokers[b.id] = BrokerEndpoint(b.id, ep.host, ep.port, b.rack,
                                               tuple((e.listener, e.host, e.port) for e in b.endpoints))
        self.brokers = brokers
        new_topics = []
        for ts in req.topic_states:
            name = ts.topic_name
            for ps in ts.partition_states:
                if ps.leader == LEADER_DURING_DELETE:
                    parts = self.partitions.get(name)
                    if parts is not None:
                        parts.pop(ps.partition_index, None)
                        if not parts:
                            del self.partitions[name]
                            self.topic_ids.pop(name, None)
                    continue
                if name not in self.partitions:
                    self.partitions[name] = {}
                    new_topics.append(name)
                self.partitions[name][ps.partition_index] = PartitionInfo(
                    ps.leader, ps.leader_epoch, tuple(ps.replicas), tuple(ps.isr), tuple(ps.offline_replicas))
            if name in self.partitions and ts.topic_id and ts.topic_id != bytes(16):
                self.topic_ids[name] = bytes(ts.topic_id)
        return new_topics

    def brokers_on(self, listener: str | None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of the live brokers that have `listener`, by id (Kafka
        leaves out the brokers without the client's listener)."""
        out = []
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            ep = b.endpoint(listener)
            if ep is not None:
                out.append((b.broker_id, ep[0], ep[1], b.rack))
        return out

    def leader_of(self, topic: str, partition: int) -> int:
        info = self.partitions.get(topic, {}).get(partition)
        return info.leader if info is not None else -1


class ClusterTopics:
    """`broker.topics` in cluster mode: TopicStore's reading interface over the metadata
    cache, with the topic configs read from ZooKeeper when a topic first appears."""

    def __init__(self, cache: MetadataCache, read_configs: Callable[[str], dict[str, str]]) -> None:
        self.cache = cache
        self.read_configs = read_configs
        self.configs: dict[str, dict[str, str]] = {}
        self.extra: dict[str, TopicMeta] = {}  # created here, not yet announced by the controller

    def load(self) -> bool:
        return False

    def _meta(self, name: str) -> TopicMeta | None:
        parts = self.cache.partitions.get(name)
        if not parts:
            return self.extra.get(name)
        self.extra.pop(name, None)
        if name not in self.configs:
            self.configs[name] = self.read_configs(name)
        return TopicMeta(name, self.cache.topic_ids.get(name, bytes(16)), max(parts) + 1, self.configs[name])

    def get(self, name: str) -> TopicMeta | None:
        return self._meta(name)

    def names(self) -> set[str]:
        return {n for n, parts in self.cache.partitions.items() if parts} | set(self.extra)

    @property
    def topics(self) -> dict[str, TopicMeta]:
        out = {}
        for name in list(self.cache.partitions) + list(self.extra):
            meta = self._meta(name)
            if meta is not None:
                out[name] = meta
        return out

    @property
    def by_id(self) -> dict[bytes, TopicMeta]:
        return {m.topic_id: m for m in self.topics.values()}
