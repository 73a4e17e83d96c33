"""The broker in cluster mode (`zookeeper.connect` set): what is ZooKeeper's about it.

Topics live in ZooKeeper; this broker opens a partition only when the controller makes it a
replica (LeaderAndIsr) and knows the rest of the cluster from UpdateMetadata. The replicas
themselves are the data plane's, the same as on a single node (`broker/replica_manager.py`,
`broker.replicas`: roles, the high watermark, follower positions, ISR changes, fencing, the
coordinators' loading); this class feeds it the controller's requests (through
`zk_control.ZkControl`), gives it the follower fetchers (`fetcher.FetcherManager`), sends its
ISR changes to the controller as AlterPartition, and keeps this broker's ZooKeeper node, the
controller connection and the topic admin through ZooKeeper (the registration, the config
watches and the controlled shutdown are `ZkControl`'s lifecycle hooks). Everything runs on the
broker's event loop; ZooKeeper calls go to threads.

The same class runs in one process and in each worker of the pre-fork runtime: what depends
on the processes (its ZooKeeper session, which process holds a replica's log and who appends
to it, the start, the controlled shutdown, a new registration) is its placement's
(`cluster/placement.py`: `ClusterLocalPlacement`, or a worker's `ClusterWorkerPlacement`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafkafast.broker.broker import Broker
from kafkafast.broker.partition import Partition
from kafkafast.broker.replication_throttle import ReplicationQuota
from kafkafast.broker.share.coordinator import ShareCoordinator
from kafkafast.broker.topic_admin import TopicAdmin
from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.dynamic_configs import ZkDynamicConfigs
from kafkafast.cluster.transactions import ClusterTxnCoordinator
from kafkafast.cluster.zk_control import ZkControl
from kafkafast.cluster.zk_topic_store import ZkTopicStore
from kafkafast.cluster.fetcher import FetcherManager
from kafkafast.cluster.group_configs import ZkGroupConfigs
from kafkafast.cluster.metadata_cache import ClusterTopics, MetadataCache
from kafkafast.cluster.node import BrokerIdInUseError, ZkProducerIds
from kafkafast.cluster.placement import ClusterLocalPlacement, ReplicaPlacement
from kafkafast.client.connection import BrokerConnection
from kafkafast.metrics import recorder
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_partition import AlterPartitionRequest
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownRequest
from kafkafast.security.context import security_of
from kafkafast.storage.config import LogConfig

log = logging.getLogger("kafkafast.replica_manager")
ALTER_PARTITION_VERSION = 1
EC = E.ErrorCode


class ClusterBroker(Broker):
    dynamic: ZkDynamicConfigs  # made by _make_dynamic_configs
    placement: ReplicaPlacement  # one process (ClusterLocalPlacement) or a worker's (cluster/worker_placement.py)

    def __init__(self, config: Any, placement: ReplicaPlacement | None = None) -> None:
        super().__init__(config, placement or ClusterLocalPlacement())
        self.node = self.placement.make_node(config, self.log_dirs[0])
        self.cluster = self.node
        self.control = ZkControl(self)
        self.replicas.attach_control(self.control)
        self.metadata = MetadataCache(self.node.inter_broker_listener)
        self.topics = ClusterTopics(self.metadata, self.node.topic_configs)  # type: ignore[assignment]
        self.topic_admin = TopicAdmin(self, ZkTopicStore(self))
        self.controller_epoch = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._controller_conn: BrokerConnection | None = None
        self.follower_quota = ReplicationQuota(config.get_int("follower.replication.throttled.rate"))  # (the fetchers')
        self._stale_epoch_since: float | None = None  # when AlterPartition first met STALE_BROKER_EPOCH
        self._reregistered_at = float("-inf")

    def _make_dynamic_configs(self) -> ZkDynamicConfigs:
        return ZkDynamicConfigs(self.log_dirs[0])  # broker configs in /config/brokers, read in load()

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
        self.replicas.fetchers = FetcherManager(self)  # the followers' side of the data plane (network)
        self.txn_coordinator = ClusterTxnCoordinator(self)  # started by Broker.start
        group_configs = ZkGroupConfigs(self.config)  # read after load() took the notifications seen so far
        await asyncio.to_thread(group_configs.attach, self.node)
        self.share = ShareCoordinator(self, self.placement.make_share_store(), group_configs)  # started by Broker.start
        await super().start()
        self.placement.after_start()

    # -- controller requests -------------------------------------------------------------------
    def check_controller_epoch(self, controller_epoch: int, broker_epoch: int = -1) -> int:
        if controller_epoch < self.controller_epoch:
            return EC.STALE_CONTROLLER_EPOCH
        if 0 <= broker_epoch < self.node.broker_epoch:
            return EC.STALE_BROKER_EPOCH
        self.controller_epoch = controller_epoch
        return 0

    async def apply_leader_and_isr(self, req: Any) -> tuple[int, list[tuple[str, bytes, int, int]]]:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err, []
        for leader in req.live_leaders:
            self.replicas.leader_endpoints[leader.broker_id] = (leader.host_name, leader.port)
        results = []
        # the registration the controller addressed this to: its roles are confirmed for that one
        # (sent before this broker learnt its own new epoch: it counts once it has)
        epoch = req.broker_epoch if req.broker_epoch >= 0 else self.node.broker_epoch
        for ts in req.topic_states:
            for ps in ts.partition_states:
                code = await self.replicas.apply_partition_state(ts.topic_name, bytes(ts.topic_id), ps, epoch)
                results.append((ts.topic_name, bytes(ts.topic_id), ps.partition_index, code))
        return 0, results

    async def replica_log(self, topic: str, index: int) -> Any:
        """The log of a replica this process holds: the one loaded at start, else a new one."""
        lg = self.log_manager.get(topic, index)
        if lg is None:
            lg = self.log_manager.create(topic, index, await self.replica_config(topic))
        return lg

    async def replica_config(self, topic: str) -> LogConfig:
        """The topic's log config, its overrides read from ZooKeeper."""
        return await asyncio.to_thread(self._config_for_topic, topic)

    async def apply_update_metadata(self, req: Any) -> int:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err
        self.metadata.update(req)
        for b in self.metadata.brokers.values():
            self.replicas.leader_endpoints[b.broker_id] = (b.host, b.port)
        return 0

    async def apply_stop_replica(self, req: Any) -> tuple[int, list[tuple[str, int, int]]]:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err, []
        out = []
        for ts in req.topic_states:
            for ps in ts.partition_states:
                self.replicas.stop_replica((ts.topic_name, ps.partition_index), ps.delete_partition)
                out.append((ts.topic_name, ps.partition_index, 0))
        return 0, out

    async def _controller_connection(self) -> BrokerConnection | None:
        cid = self.metadata.controller_id
        b = self.metadata.brokers.get(cid)
        if b is None:
            return None
        conn = self._controller_conn
        if conn is None or conn.closed or conn.node_id != cid or (conn.host, conn.port) != (b.host, b.port):
            if conn is not None:
                conn.close()
            self._controller_conn = conn = await BrokerConnection(
                b.host, b.port, node_id=cid, client_id=f"broker-{self.node_id}-alter-partition",
                security=self.node.inter_broker).connect()
        return conn

    # -- ISR changes (the replica manager's, through ZkControl.alter_isr) ----------------------
    async def send_alter_partition(self, part: Partition, new_isr: list[int], epoch: int) -> None:
        """AlterPartition to the controller for a leader's ISR change; an accepted one is applied."""
        R = AlterPartitionRequest
        try:
            conn = await self._controller_connection()
            if conn is None:
                await asyncio.sleep(0.5)
                return
            req = R(broker_id=self.node_id, broker_epoch=self.node.broker_epoch, topics=[R.TopicData(
                topic_name=part.topic, partitions=[R.PartitionData(
                    partition_index=part.index, leader_epoch=epoch, new_isr=new_isr, leader_recovery_state=0,
                    partition_epoch=part.partition_epoch)])])
            resp = await conn.send(req, version=ALTER_PARTITION_VERSION, timeout=10.0)
            if resp.error_code:
                log.info("AlterPartition for %s-%d: error %d", part.topic, part.index, resp.error_code)
                if resp.error_code == EC.STALE_BROKER_EPOCH:
                    await self._on_stale_broker_epoch(req.broker_epoch)
                await asyncio.sleep(0.5)
                return
            self._stale_epoch_since = None
            pd = resp.topics[0].partitions[0]
            if pd.error_code:
                log.info("AlterPartition for %s-%d refused: error %d", part.topic, part.index, pd.error_code)
                if pd.error_code == EC.INVALID_UPDATE_VERSION:
                    await self._reread_partition_state(part)
                await asyncio.sleep(0.5)
                return
            if part.is_leader and part.leader_epoch == pd.leader_epoch:
                recorder.isr_changed(part.isr, list(pd.isr))
                part.isr = list(pd.isr)
                part.partition_epoch = pd.partition_epoch
                log.info("%s-%d: ISR now %s (partition epoch %d)", part.topic, part.index, part.isr,
                         part.partition_epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("AlterPartition for %s-%d failed: %r", part.topic, part.index, exc)
            if self._controller_conn is not None:
                self._controller_conn.close()
                self._controller_conn = None
            await asyncio.sleep(0.5)

    async def _on_stale_broker_epoch(self, epoch: int) -> None:
        """The controller refused this broker's epoch. When ZooKeeper's registration is not the
        one of that epoch (it was lost, or made by a session whose epoch the broker does not
        carry), or the refusals go on for longer than a session timeout, the broker registers
        again: retrying the same request would be refused forever. A registration the
        controller has not read yet, or one a new session is about to make, is waited for."""
        now = asyncio.get_running_loop().time()
        if epoch != self.node.broker_epoch or now - self._reregistered_at < self.node.session_timeout_s:
            return  # registered again since (or being registered): the next request carries the new epoch
        if self._stale_epoch_since is None:
            self._stale_epoch_since = now
        try:
            registered = await asyncio.to_thread(self.node.registration_epoch)
        except Exception as exc:
            log.info("broker %d: cannot read its registration: %r", self.node_id, exc)
            return
        if registered in (epoch, -1) and now - self._stale_epoch_since < self.node.session_timeout_s:
            return  # the controller has not read the registration yet, or a new session is making it
        log.warning("broker %d: AlterPartition refused with STALE_BROKER_EPOCH for epoch %d (registration's "
                    "epoch %d); registering again", self.node_id, epoch, registered)
        self._stale_epoch_since = None
        self._reregistered_at = now
        self.placement.request_reregistration()

    def register_again(self) -> None:
        """Registers this broker again (a new broker epoch), in the session that holds the
        registration (this process's: its placement's `request_reregistration`)."""
        assert self.loop is not None
        self.loop.create_task(self._reregister())

    async def _reregister(self) -> None:
        try:
            await asyncio.to_thread(self.node.reregister)
        except (Exception, BrokerIdInUseError) as exc:
            log.error("registering broker %d again failed: %r", self.node_id, exc)

    async def _reread_partition_state(self, part: Partition) -> None:
        """The state znode moved on without this leader hearing of it (an AlterPartition whose
        answer was lost was applied): take its ISR and partition epoch if it still names this
        leader at this leader epoch, so the next AlterPartition is not refused forever."""
        try:
            data, stat = await asyncio.to_thread(self.node.zk.get, Z.state_path(part.topic, part.index))
        except Exception as exc:
            log.info("%s-%d: cannot read the partition state: %r", part.topic, part.index, exc)
            return
        st = Z.LeaderIsr.from_json(data, stat.version)
        if part.is_leader and st.leader == self.node_id and st.leader_epoch == part.leader_epoch \
                and st.zk_version > part.partition_epoch:
            part.isr = list(st.isr)
            part.partition_epoch = st.zk_version
            log.info("%s-%d: ISR %s at partition epoch %d, as in ZooKeeper", part.topic, part.index, part.isr,
                     part.partition_epoch)

    async def handle_alter_partition(self, req: Any) -> Any:
        """AlterPartition arriving at this broker: the controller's thread answers it."""
        return await self.ask_controller("alter_partition", req)

    async def ask_controller(self, kind: str, *args: Any) -> Any:
        """Puts an event on this broker's controller queue; its last argument is the reply."""
        controller = self.node.controller
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def reply(resp: Any) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(resp))

        controller.put(kind, *args, reply)
        return await asyncio.wait_for(fut, 30.0)

    # -- controlled shutdown (before the listeners close: ZkControl.before_stop) ------------------
    async def controlled_shutdown(self) -> bool:
        """Kafka's `KafkaServer.controlledShutdown`: asks the controller (ControlledShutdown v3)
        to move this broker's leaderships away, up to controlled.shutdown.max.retries times
        controlled.shutdown.retry.backoff.ms apart, while this broker still serves; then waits
        for the LeaderAndIsr that makes it follower. True when no leadership is left."""
        if not self.config.get_bool("controlled.shutdown.enable") or self.node.zk is None:
            return False
        retries = max(self.config.get_int("controlled.shutdown.max.retries"), 1)
        backoff = self.config.get_int("controlled.shutdown.retry.backoff.ms") / 1000.0
        for attempt in range(1, retries + 1):
            remaining: list[tuple[str, int]] | None = None
            try:
                req = ControlledShutdownRequest(broker_id=self.node_id, broker_epoch=self.node.broker_epoch)
                if self.metadata.controller_id == self.node_id and self.node.controller.active:
                    resp = await self.ask_controller("controlled_shutdown", req.broker_id, req.broker_epoch)
                else:
                    conn = await self._controller_connection()
                    resp = None if conn is None else await conn.send(req, version=3, timeout=30.0)
                if resp is not None and resp.error_code == 0:
                    remaining = [(r.topic_name, r.partition_index) for r in resp.remaining_partitions]
                elif resp is not None:
                    log.info("controlled shutdown attempt %d: error %d", attempt, resp.error_code)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("controlled shutdown attempt %d failed: %r", attempt, exc)
                if self._controller_conn is not None:
                    self._controller_conn.close()
                    self._controller_conn = None
            if remaining == []:
                await self._wait_not_leading()
                log.info("controlled shutdown succeeded")
                return True
            if remaining:
                log.info("controlled shutdown attempt %d: still leading %s", attempt, remaining[:10])
            if attempt < retries:
                await asyncio.sleep(backoff)
        log.warning("controlled shutdown failed after %d attempts; stopping anyway", retries)
        return False

    async def _wait_not_leading(self, timeout: float = 10.0) -> None:
        """Until the controller's LeaderAndIsr arrived: no replicated partition led here."""
        deadline = asyncio.get_running_loop().time() + timeout
        while any(p.is_leader and len(p.replicas) > 1
                  for p in self.partitions.values()):
            if asyncio.get_running_loop().time() > deadline:
                return
            await asyncio.sleep(0.05)
