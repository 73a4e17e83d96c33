"""The broker in cluster mode (`zookeeper.connect` set): what is ZooKeeper's about it.

Topics live in ZooKeeper; this broker opens a partition only when the controller makes it a
replica (LeaderAndIsr) and knows the rest of the cluster from UpdateMetadata. The replicas
themselves are the data plane's, the same as on a single node (`broker/replica_manager.py`,
`broker.replicas`: roles, the high watermark, follower positions, ISR changes, fencing, the
coordinators' loading); this class feeds it the controller's requests through
`zk_control.ZkControl` (which owns this broker's controller epoch, its controller connection,
its ISR changes sent as AlterPartition, a new registration and the controlled shutdown), gives
it the follower fetchers (`fetcher.FetcherManager`), and keeps this broker's ZooKeeper node
and the topic admin through ZooKeeper (the registration, the config watches and the controlled
shutdown are `ZkControl`'s lifecycle hooks). Everything runs on the
broker's event loop; ZooKeeper calls go to threads.

The same class runs in one process and in each worker of the pre-fork runtime: what depends
on the processes (its ZooKeeper session, which process holds a replica's log and who appends
to it, the start, the controlled shutdown, a new registration) is its placement's
(`cluster/placement.py`: `ClusterLocalPlacement`, or a worker's `ClusterWorkerPlacement`).
"""
from __future__ import annotations

import asyncio
from typing import Any

from kafkafast.broker.broker import Broker
from kafkafast.broker.replication_throttle import ReplicationQuota
from kafkafast.broker.topic_admin import TopicAdmin
from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.dynamic_configs import ZkDynamicConfigs
from kafkafast.cluster.zk_control import ZkControl
from kafkafast.cluster.zk_topic_store import ZkTopicStore
from kafkafast.cluster.metadata_cache import ClusterTopics, MetadataCache
from kafkafast.cluster.node import ZkProducerIds
from kafkafast.cluster.placement import ClusterLocalPlacement, ReplicaPlacement
from kafkafast.security.context import security_of
from kafkafast.storage.config import LogConfig


class ClusterBroker(Broker):
    dynamic: ZkDynamicConfigs  # made by ZkControl.make_dynamic_configs
    placement: ReplicaPlacement  # one process (ClusterLocalPlacement) or a worker's (cluster/worker_placement.py)

    def __init__(self, config: Any, placement: ReplicaPlacement | None = None) -> None:
        super().__init__(config, placement or ClusterLocalPlacement(), ZkControl)
        self.node = self.placement.make_node(config, self.log_dirs[0])
        self.cluster = self.node
        self.metadata = MetadataCache(self.node.inter_broker_listener)
        self.topics = ClusterTopics(self.metadata, self.node.topic_configs)  # type: ignore[assignment]
        self.topic_admin = TopicAdmin(self, ZkTopicStore(self))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.follower_quota = ReplicationQuota(config.get_int("follower.replication.throttled.rate"))  # (the fetchers')

    # -- lifecycle ----------------------------------------------------------------------------
    def _load_cluster_id(self) -> str:
        return ""  # read from ZooKeeper in load()

    def load(self) -> None:
        self.node.connect()
        self.cluster_id, self.node_id = self.node.establish_identity(self.config.get("cluster.id"))
        # the change notifications seen before the dynamic broker configs are read: the watch
        # (ZkControl.on_listening) takes every later one
        self.control.seen_config_changes = set(self.node.zk.get_children(Z.CONFIG_CHANGES))
        self.dynamic.attach(self.node, self.node_id)
        self.dynamic.loaded()
        self.apply_dynamic_configs()  # before the logs open with the topic defaults
        # ACLs and SCRAM credentials live in ZooKeeper: loaded before this broker registers
        # (security/zk_stores.py)
        security_of(self)
        self.producer_ids = ZkProducerIds(self.node)
        self.log_manager.load_all(self._config_for_topic)
        self.log_cleaner = self.new_log_cleaner()
        self.started = True

    def _config_for_topic(self, topic: str) -> LogConfig:
        configs = self.node.topic_configs(topic)
        return LogConfig.from_props(configs, self.default_log_config) if configs else self.default_log_config

    async def start(self) -> None:
        self.placement.before_start()
        self.loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.load)
        self.load = lambda: None  # type: ignore[method-assign]  (Broker.start calls it)
        await super().start()  # (the fetchers, share and transaction coordinators: ZkControl's make_*)
        self.placement.after_start()

    async def replica_log(self, topic: str, index: int) -> Any:
        """The log of a replica this process holds: the one loaded at start, else a new one."""
        lg = self.log_manager.get(topic, index)
        if lg is None:
            lg = self.log_manager.create(topic, index, await self.replica_config(topic))
        return lg

    async def replica_config(self, topic: str) -> LogConfig:
        """The topic's log config, its overrides read from ZooKeeper."""
        return await asyncio.to_thread(self._config_for_topic, topic)
