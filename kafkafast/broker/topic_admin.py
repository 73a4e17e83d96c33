"""Topic administration, once for every mode: creation, partition addition, deletion and
topic configs, with Kafka's checks and defaults, written through a topic store.

`TopicAdmin` validates (the topic's name, its configs, the `__consumer_offsets` defaults, the
replication factor against the brokers there are, a manual assignment, the partition count)
and places the replicas (`replica_assignment.py`, Kafka's `AdminUtils`); the store keeps the
result. Two stores, chosen where the broker is built:

* `FileTopicStore` (here): a single node's `__kafkafast_topics.json` (`topics.py`); the only
  broker is this one, so every replica list is [this broker] and a replication factor above 1
  is Kafka's answer for a one-broker cluster (INVALID_REPLICATION_FACTOR);
* `ZkTopicStore` (`kafkafast/cluster/zk_topic_store.py`): the znodes of Kafka's ZooKeeper mode,
  which the controller acts on.

A store answers `live_brokers`, `check_new_name`, `assignment` (the current replica lists) and
writes `create`, `add_partitions`, `delete`, `set_configs`; `run` calls an admin method from
the event loop (a ZooKeeper store off the loop, in a thread; the file store in place).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Protocol, TypeVar

from kafkafast.broker.group_coordinator import OFFSETS_TOPIC
from kafkafast.broker.replica_assignment import assign_replicas
from kafkafast.broker.topics import TopicMeta, TopicStore, validate_topic_name
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.protocol import errors as E
from kafkafast.storage.config import LogConfig

log = logging.getLogger("kafkafast.topic_admin")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Assignment:
    """A topic's replica lists as its store holds them: `version` is the store's token for a
    conditional write (a znode version; unused by the file store); `reassigning` whether a
    reassignment of one of its partitions is in progress."""
    topic_id: bytes
    replicas: dict[int, list[int]]
    version: Any = None
    reassigning: bool = False


class TopicStoreBackend(Protocol):
    def live_brokers(self) -> dict[int, str | None]: ...
    def check_new_name(self, name: str) -> None: ...
    def assignment(self, name: str) -> Assignment: ...
    def create(self, meta: TopicMeta, replicas: dict[int, list[int]]) -> None: ...
    def add_partitions(self, name: str, current: Assignment, extra: dict[int, list[int]]) -> None: ...
    def delete(self, name: str) -> None: ...
    def set_configs(self, name: str, configs: dict[str, str]) -> None: ...
    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


def check_collision(name: str, existing: Iterable[str]) -> None:
    """TOPIC_ALREADY_EXISTS for `name` itself; INVALID_TOPIC_EXCEPTION for a name that differs
    only in '.' against '_' (Kafka's metric names cannot tell them apart)."""
    collide = name.replace(".", "_")
    for other in existing:
        if other == name:
            raise E.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if other.replace(".", "_") == collide:
            raise E.InvalidTopicError(f"Topic '{name}' collides with existing topic '{other}'")


def check_replicas(partition: int, replicas: list[int], live: dict[int, str | None], rf: int) -> None:
    """A manual replica list: `rf` replicas, no broker twice, every broker registered."""
    if len(replicas) != rf or len(set(replicas)) != len(replicas) or any(r not in live for r in replicas):
        raise E.InvalidReplicaAssignmentError(
            f"Invalid replica assignment for partition {partition}: {list(replicas)} (replication factor {rf}, "
            f"live brokers {sorted(live)})")


class TopicAdmin:
    """The broker's topic administration (see the module docstring)."""

    def __init__(self, broker: Any, store: TopicStoreBackend) -> None:
        self.broker = broker
        self.store = store

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Awaitable[T]:
        """`fn(*args, **kwargs)` for a request handler: where the store can wait (ZooKeeper), off the loop."""
        return self.store.run(fn, *args, **kwargs)

    # -- create ------------------------------------------------------------------------------
    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None, *,
               replication_factor: int = -1, assignment: dict[int, list[int]] | None = None,
               validate_only: bool = False) -> TopicMeta:
        """A new topic of `partitions` partitions (or as many as `assignment` lists) with
        `replication_factor` replicas each (-1: the broker's default for the topic)."""
        broker = self.broker
        validate_topic_name(name)
        self.store.check_new_name(name)
        configs = dict(configs or {})
        if name == OFFSETS_TOPIC:
            configs.setdefault("cleanup.policy", "compact")
            configs.setdefault("segment.bytes", broker.config.get("offsets.topic.segment.bytes") or "104857600")
            if replication_factor < 0:
                replication_factor = broker.config.get_int("offsets.topic.replication.factor")
        elif name == TXN_TOPIC and replication_factor < 0:  # configs from TransactionCoordinator.ensure_topic
            replication_factor = broker.config.get_int("transaction.state.log.replication.factor")
        if replication_factor < 0:
            replication_factor = broker.config.get_int("default.replication.factor")
        LogConfig.from_props(configs, broker.default_log_config)  # raises InvalidConfigError
        live = self.store.live_brokers()
        if assignment is None:
            assignment = assign_replicas(live, partitions, replication_factor)
        else:
            if not assignment:
                raise E.InvalidReplicaAssignmentError("an assignment of no partitions")
            rf = len(next(iter(assignment.values())))
            if rf == 0:
                raise E.InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
            for p, replicas in sorted(assignment.items()):
                check_replicas(p, replicas, live, rf)
        meta = TopicMeta(name, TopicStore.new_topic_id(), len(assignment), configs)
        if not validate_only:
            self.store.create(meta, assignment)
        return meta

    def auto_create(self, name: str) -> TopicMeta | None:
        """The topic a Metadata request or a coordinator asked for, created with the broker's
        defaults if auto.create.topics.enable; None when it is not there (or cannot be created:
        the reason goes to the log)."""
        config = self.broker.config
        if not config.get_bool("auto.create.topics.enable"):
            return None
        try:
            return self.create(name, config.get_int("offsets.topic.num.partitions" if name == OFFSETS_TOPIC
                                                    else "num.partitions"))
        except E.TopicAlreadyExistsError:
            self.broker.refresh_topics()
            return self.broker.topics.get(name)
        except E.KafkaError as exc:
            log.info("auto-creating %s failed: %s", name, exc)
            return None

    # -- partitions --------------------------------------------------------------------------
    def add_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None, *,
                       validate_only: bool = False) -> None:
        """Kafka's createPartitions: more partitions (never fewer: INVALID_PARTITIONS), placed as
        `assignments` says (one replica list per new partition, each as long as the topic's
        replication factor, of registered brokers, no broker twice) or over the live brokers;
        REASSIGNMENT_IN_PROGRESS while a partition of the topic is being reassigned."""
        current = self.store.assignment(name)
        have = len(current.replicas)
        if count <= have:
            raise E.InvalidPartitionsError(
                f"Topic currently has {have} partitions, which is higher than the requested {count}.")
        if current.reassigning:
            raise E.ReassignmentInProgressError(f"A partition reassignment is in progress for the topic '{name}'.")
        rf = len(next(iter(current.replicas.values())))
        live = self.store.live_brokers()
        if assignments:
            if len(assignments) != count - have:
                raise E.InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {count - have} but {len(assignments)} "
                    "assignments provided.")
            extra = {}
            for i, replicas in enumerate(assignments, start=have):
                check_replicas(i, replicas, live, rf)
                extra[i] = list(replicas)
        else:
            extra = assign_replicas(live, count - have, rf, start_partition=have)
        if not validate_only:
            self.store.add_partitions(name, current, extra)

    # -- delete, configs ---------------------------------------------------------------------
    def delete(self, name: str) -> None:
        """UNKNOWN_TOPIC_OR_PARTITION when there is no such topic."""
        self.store.delete(name)

    def set_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        """Replaces the topic's config overrides (INVALID_CONFIG for a bad one; nothing changes
        then) and gives its open partitions the new log config."""
        cfg = LogConfig.from_props(configs, self.broker.default_log_config)
        if validate_only:
            return
        self.store.set_configs(name, dict(configs))
        for (topic, _), part in list(self.broker.partitions.items()):
            if topic == name:
                part.log.config = cfg


class FileTopicStore:
    """A single node's topics: `TopicStore`'s file in the first log dir; this broker is the only one."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)  # a local file under a lock held for microseconds: in place

    def live_brokers(self) -> dict[int, str | None]:
        return {self.broker.node_id: self.broker.config.get("broker.rack") or None}

    def check_new_name(self, name: str) -> None:
        self.broker.refresh_topics()
        check_collision(name, self.broker.topics.names())

    def assignment(self, name: str) -> Assignment:
        self.broker.refresh_topics()
        meta = self.broker.topics.get(name)
        if meta is None:
            raise E.UnknownTopicOrPartitionError()
        return Assignment(meta.topic_id, {i: [self.broker.node_id] for i in range(meta.partitions)})

    def _changed(self) -> None:
        self.broker._apply_topics()
        self.broker.notify_metadata_changed()

    def create(self, meta: TopicMeta, replicas: dict[int, list[int]]) -> None:
        with self.broker.topics.change() as topics:
            check_collision(meta.name, topics)  # again, under the lock: another worker may have created it
            topics[meta.name] = meta
        self._changed()

    def add_partitions(self, name: str, current: Assignment, extra: dict[int, list[int]]) -> None:
        with self.broker.topics.change() as topics:
            meta = topics.get(name)
            if meta is None or meta.topic_id != current.topic_id:
                raise E.UnknownTopicOrPartitionError()
            if meta.partitions != len(current.replicas):
                raise E.ReassignmentInProgressError("the topic's partitions changed meanwhile; retry")
            meta.partitions += len(extra)
        self._changed()

    def delete(self, name: str) -> None:
        self.broker.placement.delete_topic(name)  # the partitions' logs live where the placement says

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        with self.broker.topics.change() as topics:
            meta = topics.get(name)
            if meta is None:
                raise E.UnknownTopicOrPartitionError()
            meta.configs = configs
        self._changed()
