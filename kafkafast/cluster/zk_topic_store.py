"""The topic store of a ZooKeeper-mode broker: the znodes Kafka's ZooKeeper mode keeps topics
in, which the controller acts on (`controller.py`). The checks and defaults are
`kafkafast/broker/topic_admin.py`'s, the same as a single node's; this writes:

    /brokers/topics/<t>             {"version": 3, "topic_id": ..., "partitions": {"<p>": [replicas]}, ...}
    /config/topics/<t>              the topic's config overrides (before the assignment, as Kafka)
    /admin/delete_topics/<t>        a deletion the controller carries out
    /config/changes/config_change_  a topic's changed configs, for every broker's watch

Every call blocks on ZooKeeper: `run` takes it off the event loop.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from kafkafast.broker.topic_admin import Assignment, check_collision
from kafkafast.broker.topics import TopicMeta
from kafkafast.cluster import zk_data as Z
from kafkafast.protocol import errors as E

T = TypeVar("T")


class ZkTopicStore:
    def __init__(self, broker: Any, node: Any) -> None:
        self.broker = broker
        self.node = node  # the broker's ZooKeeper session (its control plane's)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    def live_brokers(self) -> dict[int, str | None]:
        return self.node.live_brokers()

    def check_new_name(self, name: str) -> None:
        zk = self.node.zk
        if zk.exists(f"{Z.DELETE_TOPICS}/{name}") is not None:
            raise E.TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
        check_collision(name, zk.get_children(Z.TOPICS))

    def assignment(self, name: str) -> Assignment:
        """The assignment znode's replicas at its version; reassigning while a partition of the
        topic adds or removes replicas (in the znode) or is in a pending /admin/reassign_partitions plan."""
        try:
            data, stat = self.node.zk.get(Z.topic_path(name))
        except NoNodeError:
            raise E.UnknownTopicOrPartitionError() from None
        tid, replicas = Z.parse_topic_assignment(data)
        adding, removing = Z.parse_reassigning(data)
        reassigning = bool(adding or removing) or name in self._pending_reassignment_topics()
        return Assignment(tid or Z.new_topic_id(), replicas, stat.version, reassigning)

    def _pending_reassignment_topics(self) -> set[str]:
        try:
            data, _ = self.node.zk.get(Z.REASSIGN_PARTITIONS)
        except NoNodeError:
            return set()
        try:
            return {str(e["topic"]) for e in Z.loads(data).get("partitions") or []}
        except (ValueError, TypeError, KeyError, AttributeError):
            return set()

    def create(self, meta: TopicMeta, replicas: dict[int, list[int]]) -> None:
        zk = self.node.zk
        zk.ensure_path(Z.CONFIG_TOPICS)
        try:
            zk.create(Z.topic_config_path(meta.name), Z.entity_config_json(meta.configs))
        except NodeExistsError:
            zk.set(Z.topic_config_path(meta.name), Z.entity_config_json(meta.configs))
        try:
            zk.create(Z.topic_path(meta.name), Z.topic_assignment_json(meta.topic_id, replicas))
        except NodeExistsError:
            raise E.TopicAlreadyExistsError(f"Topic '{meta.name}' already exists.") from None
        self.broker.topics.extra[meta.name] = meta  # until the controller's UpdateMetadata announces it

    def add_partitions(self, name: str, current: Assignment, extra: dict[int, list[int]]) -> None:
        """At the version read: a reassignment written meanwhile wins."""
        try:
            self.node.zk.set(Z.topic_path(name), Z.topic_assignment_json(current.topic_id,
                                                                         {**current.replicas, **extra}),
                             version=current.version)
        except BadVersionError:
            raise E.ReassignmentInProgressError("the topic's assignment changed meanwhile; retry") from None

    def delete(self, name: str) -> None:
        zk = self.node.zk
        if zk.exists(Z.topic_path(name)) is None:
            raise E.UnknownTopicOrPartitionError()
        try:
            zk.create(f"{Z.DELETE_TOPICS}/{name}", b"", makepath=True)
        except NodeExistsError:
            pass

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        if self.node.zk.exists(Z.topic_path(name)) is None:
            raise E.UnknownTopicOrPartitionError()
        self.node.write_config(Z.topic_config_path(name), configs, "topics", name)
        self.broker.topics.configs[name] = configs
