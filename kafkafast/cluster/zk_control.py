"""The control plane of a ZooKeeper-mode broker: the same calls as the single node's
(`kafkafast/broker/control.py`), answered by this broker's controller thread when it is the
active controller, by the cluster member this broker is, and from its metadata cache. It is
all that makes the one `Broker` class a ZooKeeper cluster member: the broker's ZooKeeper node
and metadata cache (`node`, `metadata`: the cluster's modules read them here, through
`broker.control`) and topics through them, its session, identity, dynamic configs,
ACLs and SCRAM credentials read at start (`load`, after the fork, in the serving process).

It feeds the data plane (`broker.replicas`, broker/replica_manager.py) the controller's
LeaderAndIsr and StopReplica, takes its ISR changes to the controller (AlterPartition), and
tells it when a leadership cannot be confirmed (the ZooKeeper session and lease: self-fencing
of a cut-off leader). It owns what this broker knows of the controller: the controller epoch
its requests are checked against, the connection to it (AlterPartition, ControlledShutdown),
a new registration when the controller refuses this broker's epoch, and the controlled
shutdown. The stores and coordinators that differ by control plane are made here (`make_*`):
the dynamic configs, the share groups' state and configs, the transaction coordinator and the
follower fetchers, all through ZooKeeper or the other brokers."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafkafast.broker.broker import OFFSETS_TOPIC
from kafkafast.broker.control import PartitionView, election_everywhere
from kafkafast.broker.placement import REREGISTER_WORD
from kafkafast.broker.share.coordinator import ShareCoordinator
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.controller import Controller
from kafkafast.cluster.dynamic_configs import ZkDynamicConfigs
from kafkafast.cluster.fetcher import FetcherManager
from kafkafast.cluster.group_configs import ZkGroupConfigs
from kafkafast.cluster.metadata_cache import ClusterTopics, MetadataCache
from kafkafast.cluster.share_state import ClusterShareStateStore
from kafkafast.cluster.zk_topic_store import ZkTopicStore
from kafkafast.cluster.transactions import ClusterTxnCoordinator
from kafkafast.cluster.node import (SESSION_CONNECTED, SESSION_REGISTERED, BrokerIdInUseError, ClusterNode,
                                    ZkProducerIds, monotonic_ms)
from kafkafast.client.connection import BrokerConnection
from kafkafast.metrics import recorder
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kafkafast.protocol._generated.alter_partition_reassignments import AlterPartitionReassignmentsResponse
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from kafkafast.runtime.worker import controlled_shutdown_budget
from kafkafast.security.context import security_of
from kafkafast.storage.config import LogConfig

log = logging.getLogger("kafkafast.replica_manager")
ALTER_PARTITION_VERSION = 1
EC = E.ErrorCode


def _ensure_offsets_topic(broker: Any) -> int:
    """0 once `__consumer_offsets` exists (created here if not), else COORDINATOR_NOT_AVAILABLE."""
    if OFFSETS_TOPIC in broker.control.metadata.partitions or broker.topics.get(OFFSETS_TOPIC) is not None:
        return 0
    try:
        broker.create_topic(OFFSETS_TOPIC, broker.config.get_int("offsets.topic.num.partitions"))
    except E.TopicAlreadyExistsError:
        pass
    except E.KafkaError:
        return E.ErrorCode.COORDINATOR_NOT_AVAILABLE
    return 0


def _ensure_txn_topic(broker: Any) -> int:
    """0 once `__transaction_state` is known (created on first use), else COORDINATOR_NOT_AVAILABLE."""
    coordinator = broker.txn_coordinator
    coordinator.ensure_topic()
    return 0 if coordinator.topic_known else E.ErrorCode.COORDINATOR_NOT_AVAILABLE


class ZkControl:
    """Control plane of a broker in a ZooKeeper cluster (in one process or in any worker)."""

    # A replicated partition's high watermark is the leader's bookkeeping (with workers, the
    # owner's: other workers' appends wake it), and a transactional produce goes to the owner
    # (runtime/placement.py: WorkerPlacement.appends_here).
    lone_replicas = False
    cluster_id_in_log_dir = False  # ZooKeeper's (/cluster/id)

    @staticmethod
    def shutdown_budget_s(config: Any) -> float:
        """How long the workers wait for the controlled shutdown (leaderships moved) first."""
        return controlled_shutdown_budget(config)

    @staticmethod
    def shared_append_enabled(config: Any) -> bool:
        """Shared append with workers only with cluster mode's own setting too (true by default)."""
        return config.get_bool("kafkafast.produce.shared.append") and config.get_bool(
            "kafkafast.produce.shared.append.cluster")

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.seen_config_changes: set[str] = set()  # the config change notifications taken (load's, the watch's)
        self._config_changes_lock = asyncio.Lock()
        self.controller_epoch = 0  # the highest a controller's request carried
        self._controller_conn: BrokerConnection | None = None
        self._stale_epoch_since: float | None = None  # when AlterPartition first met STALE_BROKER_EPOCH
        self._reregistered_at = float("-inf")
        self._stored_topic_ids: dict[str, bytes] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop, known once started
        # this broker's ZooKeeper session (not connected yet: load()'s) and metadata cache (the
        # controller's UpdateMetadata): the broker's topics are read through them
        self.node = ClusterNode(broker.config, broker.log_dirs[0], broker.placement)
        self.metadata = MetadataCache(self.node.inter_broker_listener)

    @property
    def zk(self) -> Any:
        """This broker's ZooKeeper session: ACLs and SCRAM credentials live there (security/)."""
        return self.node.zk

    def _controller_active(self) -> bool:
        controller = self.node.controller
        return controller is not None and controller.active

    # -- the broker's identity and start (Broker.__init__, Broker.start) ----------------

    def initial_cluster_id(self) -> str:
        return ""  # read from ZooKeeper in load()

    def make_topics(self) -> ClusterTopics:
        """The topics of the metadata image: the metadata cache's, their configs from ZooKeeper."""
        return ClusterTopics(self.metadata, self.node.topic_configs)

    def make_topic_store(self) -> ZkTopicStore:
        """Topic administration's store: the assignment, config and deletion znodes."""
        return ZkTopicStore(self.broker, self.node)

    async def load(self) -> None:
        """The first thing of Broker.start: the ZooKeeper session and what is read through it
        (in a thread)."""
        broker = self.broker
        if broker.placement.index == 0:  # registering now gives every process every replica state
            broker.placement.set_broker_word(REREGISTER_WORD, 0)
        self.loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        broker, node = self.broker, self.node
        node.connect()
        broker.cluster_id, broker.node_id = node.establish_identity(broker.config.get("cluster.id"))
        # the change notifications seen before the dynamic broker configs are read: the watch
        # (on_listening) takes every later one
        self.seen_config_changes = set(node.zk.get_children(Z.CONFIG_CHANGES))
        broker.dynamic.attach(node, broker.node_id)
        broker.dynamic.loaded()
        broker.apply_dynamic_configs()  # before the logs open with the topic defaults
        # ACLs and SCRAM credentials live in ZooKeeper: loaded before this broker registers
        # (security/zk_stores.py)
        security_of(broker)
        broker.producer_ids = ZkProducerIds(node)
        broker.log_manager.load_all(broker._config_for_topic)
        broker.log_cleaner = broker.new_log_cleaner()
        broker.started = True

    def started(self) -> None:
        """Before the broker listens and registers: a replaced worker (its predecessor died)
        knows no replica state, so the broker registers again to receive them all."""
        placement = self.broker.placement
        if placement.incarnation > 1 and placement.index != 0:
            log.warning("worker %d replaced: registering broker %d again to receive its replica states",
                        placement.index, self.broker.node_id)
            self.request_reregistration()

    def config_for_topic(self, topic: str) -> LogConfig:
        """The topic's overrides read from ZooKeeper over the broker's defaults."""
        broker = self.broker
        configs = self.node.topic_configs(topic)
        return LogConfig.from_props(configs, broker.default_log_config) if configs else broker.default_log_config

    # -- the broker's lifecycle (Broker.on_listening, before_stop, stop) ----------------

    async def on_listening(self) -> None:
        """Once the listeners accept connections (runtime/server.py, runtime/worker.py): register
        (the process that holds the registration and runs the controller, worker 0), so that the
        controller's LeaderAndIsr for this broker finds it reachable, as Kafka registers only
        after its socket server is up; then watch the config change notifications."""
        broker, node = self.broker, self.node
        if broker.placement.index == 0:
            await asyncio.to_thread(node.register)
            node.controller = Controller(node)
            node.on_session_reset = lambda: self.loop.call_soon_threadsafe(self._session_reset)
            node.controller.start()
            broker.placement.add_wake_check(self._reregistration_asked)
        node.zk.ChildrenWatch(Z.CONFIG_CHANGES, self._on_config_changes)

    async def before_stop(self) -> None:
        """SIGTERM, while every listener still serves, before any process stops serving: the
        controlled shutdown. The process holding the registration (worker 0) runs it: one
        ControlledShutdown names the broker, and the controller moves every partition the
        broker leads, whichever worker owns it; worker 0 returns once its own view (the
        fanned-out LeaderAndIsr) shows no replicated partition led here, and then stops
        serving. The other workers keep serving clients, forwarded requests and the
        LeaderAndIsr fan-out until then (or until the controlled shutdown's time is up), so
        no worker closes the log of a partition the broker still leads."""
        broker, placement = self.broker, self.broker.placement
        if placement.index == 0:
            await self.run_controlled_shutdown()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + controlled_shutdown_budget(broker.config)
        while placement.process_serving(0) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        led = sorted(tp for tp, p in broker.partitions.items()
                     if placement.owns(p) and p.is_leader and len(p.replicas) > 1)
        log.info("worker %d: stopping after the controlled shutdown (still leading %d replicated partitions%s)",
                 placement.index, len(led), f": {led[:5]}" if led else "")

    async def stop(self) -> None:
        """The replicas stopped: the controller connection and the ZooKeeper session close."""
        broker = self.broker
        if self._controller_conn is not None:
            self._controller_conn.close()
        for p in broker.partitions.values():
            p.fail_waiters(E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
        await asyncio.to_thread(self.node.close)

    # -- what the broker builds: ZooKeeper's stores and coordinators ---------------------

    def make_dynamic_configs(self) -> ZkDynamicConfigs:
        return ZkDynamicConfigs(self.broker.log_dirs[0])  # broker configs in /config/brokers, read in load()

    def make_fetchers(self) -> FetcherManager:
        return FetcherManager(self.broker)  # the followers' side of the data plane (network)

    async def make_share_coordinator(self) -> ShareCoordinator:
        """Group configs in /config/groups (read after load() took the change notifications seen
        so far), the state in `__share_group_state` (its partitions' leaders, among the brokers
        and the workers)."""
        broker = self.broker
        group_configs = ZkGroupConfigs(broker.config)
        await asyncio.to_thread(group_configs.attach, self.node)
        return ShareCoordinator(broker, ClusterShareStateStore(broker), group_configs)

    def make_txn_coordinator(self) -> ClusterTxnCoordinator:
        return ClusterTxnCoordinator(self.broker)  # markers to the partitions' leaders

    def _session_reset(self) -> None:
        log.info("new ZooKeeper session (broker epoch %d)", self.node.broker_epoch)

    def _on_config_changes(self, children: list[str]) -> None:
        """Kazoo's thread: a topic's configs, dynamic broker configs, client quotas or a group's
        configs changed somewhere; reload them on the loop."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: loop.create_task(self._reload_configs(children)))

    async def _reload_configs(self, children: list[str]) -> None:
        """One watch callback's new notifications, in sequence order; callbacks are taken one
        after the other, so that a slower read of an older change never lands after a newer one."""
        async with self._config_changes_lock:
            await self._reload_configs_in_order(children)

    async def _reload_configs_in_order(self, children: list[str]) -> None:
        broker = self.broker
        for child in sorted(set(children) - self.seen_config_changes):
            self.seen_config_changes.add(child)
            try:
                data, _ = await asyncio.to_thread(self.node.zk.get, f"{Z.CONFIG_CHANGES}/{child}")
            except Exception:
                continue
            entity = Z.loads(data).get("entity_path", "")
            if broker.dynamic.is_quota_entity(entity):  # a client quota changed somewhere
                try:
                    await asyncio.to_thread(broker.dynamic.reload_quotas)
                except Exception as exc:
                    log.warning("client quotas not reloaded (%s): %r", child, exc)
                else:
                    log.info("client quotas reloaded (%s: %s)", child, entity)
                continue
            if entity.startswith("groups/"):  # a group's configs changed somewhere
                group_id = Z.group_of_config_entity(entity[len("groups/"):])
                try:
                    await asyncio.to_thread(broker.share.configs.reload, group_id)
                except Exception as exc:
                    log.warning("group %s: configs not reloaded (%s): %r", group_id, child, exc)
                else:
                    log.info("group %s: configs reloaded (%s)", group_id, child)
                continue
            scope = broker.dynamic.entity_scope(entity)
            if scope is not None:  # this broker's dynamic configs or the cluster-wide ones
                try:
                    await asyncio.to_thread(broker.dynamic.reload, scope)
                except Exception as exc:
                    log.warning("dynamic broker configs %s not reloaded (%s): %r", entity, child, exc)
                    continue
                broker.dynamic.loaded()
                broker.refresh_dynamic()
                log.info("dynamic broker configs %s reloaded (%s)", entity, child)
                continue
            if not entity.startswith("topics/"):
                continue
            topic = entity[len("topics/"):]
            configs = await asyncio.to_thread(self.node.topic_configs, topic)
            broker.topics.configs[topic] = configs
            cfg = LogConfig.from_props(configs, broker.default_log_config) if configs else broker.default_log_config
            for (t, _), part in broker.partitions.items():
                if t == topic:
                    part.log.config = cfg
            log.info("topic %s: configs reloaded (%s)", topic, child)

    # -- requests a cluster's brokers send to the controller ---------------------------

    async def alter_partition(self, req: Any) -> AlterPartitionResponse:
        if not self._controller_active():
            return AlterPartitionResponse(throttle_time_ms=0, error_code=E.ErrorCode.NOT_CONTROLLER, topics=[])
        return await self.ask_controller("alter_partition", req)  # the controller's thread answers

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ControlledShutdownResponse:
        if not self._controller_active():
            return ControlledShutdownResponse(error_code=E.ErrorCode.NOT_CONTROLLER)
        return await self.ask_controller("controlled_shutdown", broker_id, broker_epoch)

    async def elect_leaders(self, req: Any) -> Any:
        if not self._controller_active():
            return election_everywhere(req, E.ErrorCode.NOT_CONTROLLER)
        tps = None
        if req.topic_partitions is not None:
            tps = [(t.topic, p) for t in req.topic_partitions for p in t.partitions]
        return await self.ask_controller("elect_leaders", req.election_type == 1, tps)

    async def alter_reassignments(self, req: Any) -> AlterPartitionReassignmentsResponse:
        if not self._controller_active():
            return AlterPartitionReassignmentsResponse(error_code=E.ErrorCode.NOT_CONTROLLER, error_message=None)
        return await self.ask_controller("alter_reassignments", req)

    async def list_reassignments(self, partitions: list[tuple[str, int]] | None) -> tuple[int, dict]:
        if not self._controller_active():
            return E.ErrorCode.NOT_CONTROLLER, {}
        return await self.ask_controller("list_reassignments", partitions)

    # -- coordinators: the leader of the key's partition of the coordinator topic ------

    async def find_coordinator(self, key: str, key_type: int, ctx: Any) -> tuple[int, str, int, int, str | None]:
        """The leader of the group's `__consumer_offsets` partition (key type 0) or of the
        transactional id's `__transaction_state` partition (1); the topic is created on first use
        (COORDINATOR_NOT_AVAILABLE while it has no leader, or when it cannot be created)."""
        broker = self.broker
        if not key:
            return -1, "", -1, E.ErrorCode.INVALID_REQUEST, None
        topic = OFFSETS_TOPIC if key_type == 0 else TXN_TOPIC
        err = await asyncio.to_thread(_ensure_offsets_topic if key_type == 0 else _ensure_txn_topic, broker)
        if err:
            return -1, "", -1, err, None
        p = (broker.group_coordinator if key_type == 0 else broker.txn_coordinator).partition_for(key)
        b = self.metadata.brokers.get(self.metadata.leader_of(topic, p))
        ep = b.endpoint(ctx.listener_name) if b is not None else None
        if b is None or ep is None:
            return -1, "", -1, E.ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return b.broker_id, ep[0], ep[1], 0, None

    # -- the data plane's calls --------------------------------------------------------

    def fence_reason(self, part: Any) -> str | None:
        """Why this broker cannot confirm now that it still leads `part`, or None
        (docs/ARCHITECTURE.md, "Self-fencing of a cut-off leader")."""
        node = self.node
        word = node.session_word
        if not word & SESSION_CONNECTED:
            return "its ZooKeeper session is suspended or lost"
        if not word & SESSION_REGISTERED or part.confirmed_epoch != node.broker_epoch:
            return "its ZooKeeper session expired since the controller last named it leader"
        if monotonic_ms() >= node.lease_end_ms:
            return "ZooKeeper has not answered within the leadership lease"
        return None

    # -- the controller: its requests to this broker, this broker's to it -------------

    def check_controller_epoch(self, controller_epoch: int, broker_epoch: int = -1) -> int:
        if controller_epoch < self.controller_epoch:
            return EC.STALE_CONTROLLER_EPOCH
        if 0 <= broker_epoch < self.node.broker_epoch:
            return EC.STALE_BROKER_EPOCH
        self.controller_epoch = controller_epoch
        return 0

    async def leader_and_isr(self, req: Any) -> tuple[int, list[tuple[str, bytes, int, int]]]:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err, []
        for leader in req.live_leaders:
            self.broker.replicas.leader_endpoints[leader.broker_id] = (leader.host_name, leader.port)
        results = []
        # the registration the controller addressed this to: its roles are confirmed for that one
        # (sent before this broker learnt its own new epoch: it counts once it has)
        epoch = req.broker_epoch if req.broker_epoch >= 0 else self.node.broker_epoch
        for ts in req.topic_states:
            for ps in ts.partition_states:
                code = await self.broker.replicas.apply_partition_state(ts.topic_name, bytes(ts.topic_id), ps, epoch)
                results.append((ts.topic_name, bytes(ts.topic_id), ps.partition_index, code))
        return 0, results

    async def update_metadata(self, req: Any) -> int:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err
        self.metadata.update(req)
        for b in self.metadata.brokers.values():
            self.broker.replicas.leader_endpoints[b.broker_id] = (b.host, b.port)
        return 0

    async def stop_replica(self, req: Any) -> tuple[int, list[tuple[str, int, int]]]:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err, []
        out = []
        for ts in req.topic_states:
            for ps in ts.partition_states:
                self.broker.replicas.stop_replica((ts.topic_name, ps.partition_index), ps.delete_partition)
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
                b.host, b.port, node_id=cid, client_id=f"broker-{self.broker.node_id}-alter-partition",
                security=self.node.inter_broker).connect()
        return conn

    async def alter_isr(self, part: Any, new_isr: list[int], epoch: int) -> None:
        """A leader's ISR change: AlterPartition to the controller; an accepted one is applied."""
        broker, node = self.broker, self.node
        R = AlterPartitionRequest
        asked_from = list(part.isr)  # what the change was made from: the controller's own
        # LeaderAndIsr may apply the accepted ISR here before this answer is read
        try:
            conn = await self._controller_connection()
            if conn is None:
                await asyncio.sleep(0.5)
                return
            req = R(broker_id=broker.node_id, broker_epoch=node.broker_epoch, topics=[R.TopicData(
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
                recorder.isr_changed(asked_from, list(pd.isr))
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
        broker, node = self.broker, self.node
        now = asyncio.get_running_loop().time()
        if epoch != node.broker_epoch or now - self._reregistered_at < node.session_timeout_s:
            return  # registered again since (or being registered): the next request carries the new epoch
        if self._stale_epoch_since is None:
            self._stale_epoch_since = now
        try:
            registered = await asyncio.to_thread(node.registration_epoch)
        except Exception as exc:
            log.info("broker %d: cannot read its registration: %r", broker.node_id, exc)
            return
        if registered in (epoch, -1) and now - self._stale_epoch_since < node.session_timeout_s:
            return  # the controller has not read the registration yet, or a new session is making it
        log.warning("broker %d: AlterPartition refused with STALE_BROKER_EPOCH for epoch %d (registration's "
                    "epoch %d); registering again", broker.node_id, epoch, registered)
        self._stale_epoch_since = None
        self._reregistered_at = now
        self.request_reregistration()

    def request_reregistration(self) -> None:
        """Registers the broker again (a new broker epoch): here if this process holds the
        registration, else asked of worker 0 through the broker-shared word and a poke."""
        placement = self.broker.placement
        if placement.index == 0:
            self.register_again()
            return
        placement.set_broker_word(REREGISTER_WORD, 1)
        placement.poke(0)

    def _reregistration_asked(self) -> None:
        """A wake-up of the registration's holder: another process may have asked for a new registration."""
        placement = self.broker.placement
        if placement.broker_word(REREGISTER_WORD):
            placement.set_broker_word(REREGISTER_WORD, 0)
            self.register_again()

    def register_again(self) -> None:
        """Registers this broker again (a new broker epoch), in the session that holds the
        registration (this process's)."""
        assert self.loop is not None
        self.loop.create_task(self._reregister())

    async def _reregister(self) -> None:
        try:
            await asyncio.to_thread(self.node.reregister)
        except (Exception, BrokerIdInUseError) as exc:
            log.error("registering broker %d again failed: %r", self.broker.node_id, exc)

    async def _reread_partition_state(self, part: Any) -> None:
        """The state znode moved on without this leader hearing of it (an AlterPartition whose
        answer was lost was applied): take its ISR and partition epoch if it still names this
        leader at this leader epoch, so the next AlterPartition is not refused forever."""
        try:
            data, stat = await asyncio.to_thread(self.node.zk.get, Z.state_path(part.topic, part.index))
        except Exception as exc:
            log.info("%s-%d: cannot read the partition state: %r", part.topic, part.index, exc)
            return
        st = Z.LeaderIsr.from_json(data, stat.version)
        if part.is_leader and st.leader == self.broker.node_id and st.leader_epoch == part.leader_epoch \
                and st.zk_version > part.partition_epoch:
            part.isr = list(st.isr)
            part.partition_epoch = st.zk_version
            log.info("%s-%d: ISR %s at partition epoch %d, as in ZooKeeper", part.topic, part.index, part.isr,
                     part.partition_epoch)

    async def ask_controller(self, kind: str, *args: Any) -> Any:
        """Puts an event on this broker's controller queue; its last argument is the reply."""
        controller = self.node.controller
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def reply(resp: Any) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(resp))

        controller.put(kind, *args, reply)
        return await asyncio.wait_for(fut, 30.0)

    # -- this broker's controlled shutdown (before the listeners close: before_stop) -----------
    async def run_controlled_shutdown(self) -> bool:
        """Kafka's `KafkaServer.controlledShutdown`: asks the controller (ControlledShutdown v3)
        to move this broker's leaderships away, up to controlled.shutdown.max.retries times
        controlled.shutdown.retry.backoff.ms apart, while this broker still serves; then waits
        for the LeaderAndIsr that makes it follower. True when no leadership is left."""
        broker, node = self.broker, self.node
        if not broker.config.get_bool("controlled.shutdown.enable") or node.zk is None:
            return False
        retries = max(broker.config.get_int("controlled.shutdown.max.retries"), 1)
        backoff = broker.config.get_int("controlled.shutdown.retry.backoff.ms") / 1000.0
        for attempt in range(1, retries + 1):
            remaining: list[tuple[str, int]] | None = None
            try:
                req = ControlledShutdownRequest(broker_id=broker.node_id, broker_epoch=node.broker_epoch)
                if self.metadata.controller_id == broker.node_id and node.controller.active:
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
                  for p in self.broker.partitions.values()):
            if asyncio.get_running_loop().time() > deadline:
                return
            await asyncio.sleep(0.05)

    # -- the cluster as clients see it (the controller's UpdateMetadata) ---------------

    def refresh(self) -> None:
        """The image is the metadata cache, kept by the controller's UpdateMetadata."""

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the partition exists anywhere in the cluster, not only here."""
        return index in self.metadata.partitions.get(topic, {})

    def topic_names(self) -> list[str]:
        return sorted(self.metadata.partitions)

    def topic_id(self, name: str) -> bytes | None:
        cache = self.metadata
        return cache.topic_ids.get(name, bytes(16)) if name in cache.partitions else None

    def stored_topic_id(self, name: str) -> bytes | None:
        """The id of a topic whose partition gets a slot: from UpdateMetadata or the topic's znode
        (read once: at load, before any UpdateMetadata, the logs found on disk ask)."""
        topic_id = self._stored_topic_ids.get(name) or self.metadata.topic_ids.get(name)
        if topic_id is None:
            try:
                data, _ = self.node.zk.get(Z.topic_path(name))
            except Exception:
                return None
            topic_id, _ = Z.parse_topic_assignment(data)
        if topic_id is not None:
            self._stored_topic_ids[name] = topic_id
        return topic_id

    def topic_named_by(self, topic_id: bytes) -> str | None:
        return next((n for n, tid in self.metadata.topic_ids.items() if tid == topic_id), None)

    def partitions_of(self, name: str) -> list[PartitionView]:
        return [PartitionView(index, info.leader, info.leader_epoch, list(info.replicas), list(info.isr),
                              list(info.offline))
                for index, info in sorted(self.metadata.partitions.get(name, {}).items())]

    def controller_id(self) -> int:
        return self.metadata.controller_id

    def leader_of(self, topic: str, partition: int) -> tuple[int, int] | None:
        info = self.metadata.partitions.get(topic, {}).get(partition)
        return (info.leader, info.leader_epoch) if info is not None and info.leader >= 0 else None

    def endpoint_of(self, broker_id: int) -> tuple[str, int, str | None] | None:
        b = self.metadata.brokers.get(broker_id)
        return (b.host, b.port, b.rack) if b is not None else None

    def brokers_for(self, ctx: Any) -> list[tuple[int, str, int, str | None]]:
        return list(self.metadata.brokers_on(ctx.listener_name))
