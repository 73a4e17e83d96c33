"""The broker in cluster mode (`zookeeper.connect` set): Kafka's `ReplicaManager` over
the single-node `Broker`.

Topics live in ZooKeeper; this broker opens a partition only when the controller makes it a
replica (LeaderAndIsr) and knows the rest of the cluster from UpdateMetadata. Appends are
accepted only by the leader; followers replicate through `fetcher.FetcherManager`; the
leader tracks its followers' fetch positions, moves the high watermark (see
`broker/partition.py`, one partition class in every mode) and asks the controller to change
the ISR with AlterPartition (shrink: a follower not caught up for replica.lag.time.max.ms, checked every
half of it; expand: a follower that reached the high watermark and the current epoch).
Leading a `__consumer_offsets` or `__transaction_state` partition makes this broker the
coordinator of its groups or transactional ids (`cluster/transactions.py`).
Everything runs on the broker's event loop; ZooKeeper calls go to threads.

The same class runs in one process and in each worker of the pre-fork runtime: what depends
on the processes (its ZooKeeper session, which process holds a replica's log and who appends
to it, the start, the controlled shutdown, a new registration) is its placement's
(`cluster/placement.py`: `ClusterLocalPlacement`, or a worker's `ClusterWorkerPlacement`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafkafast.broker.broker import OFFSETS_TOPIC, Broker, now_ms
from kafkafast.broker.follower_state import FollowerState
from kafkafast.broker.partition import Partition
from kafkafast.broker.share.coordinator import ShareCoordinator
from kafkafast.broker.share.state_store import STATE_TOPIC
from kafkafast.broker.topic_admin import TopicAdmin
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.controller import Controller
from kafkafast.cluster.dynamic_configs import ZkDynamicConfigs
from kafkafast.cluster.transactions import ClusterTxnCoordinator
from kafkafast.cluster.zk_control import ZkControl
from kafkafast.cluster.zk_topic_store import ZkTopicStore
from kafkafast.cluster.fetcher import FetcherManager
from kafkafast.cluster.group_configs import ZkGroupConfigs
from kafkafast.cluster.metadata_cache import ClusterTopics, MetadataCache
from kafkafast.cluster.node import (SESSION_CONNECTED, SESSION_REGISTERED, BrokerIdInUseError, ZkProducerIds,
                                    monotonic_ms)
from kafkafast.cluster.placement import ClusterLocalPlacement, ReplicaPlacement
from kafkafast.cluster.throttle import ReplicationQuota, throttled
from kafkafast.client.connection import BrokerConnection
from kafkafast.config_def import RACK_AWARE_REPLICA_SELECTOR
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
        self.metadata = MetadataCache(self.node.inter_broker_listener)
        self.topics = ClusterTopics(self.metadata, self.node.topic_configs)  # type: ignore[assignment]
        self.topic_admin = TopicAdmin(self, ZkTopicStore(self))
        self.controller_epoch = 0
        self.leader_endpoints: dict[int, tuple[str, int]] = {}
        self.fetchers: FetcherManager | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._isr_task: asyncio.Task | None = None
        self._controller_conn: BrokerConnection | None = None
        self.lag_ms = config.get_int("replica.lag.time.max.ms")
        self.follower_quota = ReplicationQuota(config.get_int("follower.replication.throttled.rate"))
        self.leader_quota = ReplicationQuota(config.get_int("leader.replication.throttled.rate"))
        self._stale_epoch_since: float | None = None  # when AlterPartition first met STALE_BROKER_EPOCH
        self.rack_aware_reads = config.get("replica.selector.class") == RACK_AWARE_REPLICA_SELECTOR
        self._reregistered_at = float("-inf")

    def _make_dynamic_configs(self) -> ZkDynamicConfigs:
        return ZkDynamicConfigs(self.log_dirs[0])  # broker configs in /config/brokers, read in load()

    def _new_follower(self, part: Partition, replica_id: int, now: int, replicas: set[int]) -> Any:
        """The leader's record of a follower's fetch position: in the partition's slot with
        workers (every worker serves the follower's fetches), else, or when the slot has no
        room left, a FollowerState here."""
        f = self.placement.claim_slot_follower(part, replica_id, replicas)
        if f is None:
            return FollowerState(now)
        f.reset(now)
        return f

    def _runs_controller(self) -> bool:
        """Whether this process holds the broker's registration and runs its controller (worker 0)."""
        return self.placement.index == 0

    # -- lifecycle ----------------------------------------------------------------------------
    def _load_cluster_id(self) -> str:
        return ""  # read from ZooKeeper in load()

    def load(self) -> None:
        self.node.connect()
        self.cluster_id, self.node_id = self.node.establish_identity(self.config.get("cluster.id"))
        # the change notifications seen before the dynamic broker configs are read: the watch
        # (on_listening) takes every later one
        self._seen_config_changes: set[str] = set(self.node.zk.get_children(Z.CONFIG_CHANGES))
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
        self.fetchers = FetcherManager(self)
        self.txn_coordinator = ClusterTxnCoordinator(self)  # started by Broker.start
        group_configs = ZkGroupConfigs(self.config)  # read after load() took the notifications seen so far
        await asyncio.to_thread(group_configs.attach, self.node)
        self.share = ShareCoordinator(self, self.placement.make_share_store(), group_configs)  # started by Broker.start
        await super().start()
        self.placement.after_start()

    async def on_listening(self) -> None:
        """Once the listeners accept connections (runtime/server.py, runtime/worker.py): register
        (the process that runs the controller), so that the controller's LeaderAndIsr for this
        broker finds it reachable, as Kafka registers only after its socket server is up."""
        if self._runs_controller():
            await asyncio.to_thread(self.node.register)
            self.node.controller = Controller(self.node)
            self.node.on_session_reset = lambda: self.loop.call_soon_threadsafe(self._session_reset)  # type: ignore
            self.node.controller.start()
        self._isr_task = self.loop.create_task(self._isr_maintenance())
        self._config_changes_lock = asyncio.Lock()
        self.node.zk.ChildrenWatch(Z.CONFIG_CHANGES, self._on_config_changes)

    def _on_config_changes(self, children: list[str]) -> None:
        """Kazoo's thread: a topic's configs, dynamic broker configs, client quotas or a group's
        configs changed somewhere; reload them on the loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._reload_configs(children)))

    async def _reload_configs(self, children: list[str]) -> None:
        """One watch callback's new notifications, in sequence order; callbacks are taken one
        after the other, so that a slower read of an older change never lands after a newer one."""
        async with self._config_changes_lock:
            await self._reload_configs_in_order(children)

    async def _reload_configs_in_order(self, children: list[str]) -> None:
        for child in sorted(set(children) - self._seen_config_changes):
            self._seen_config_changes.add(child)
            try:
                data, _ = await asyncio.to_thread(self.node.zk.get, f"{Z.CONFIG_CHANGES}/{child}")
            except Exception:
                continue
            entity = Z.loads(data).get("entity_path", "")
            if self.dynamic.is_quota_entity(entity):  # a client quota changed somewhere
                try:
                    await asyncio.to_thread(self.dynamic.reload_quotas)
                except Exception as exc:
                    log.warning("client quotas not reloaded (%s): %r", child, exc)
                else:
                    log.info("client quotas reloaded (%s: %s)", child, entity)
                continue
            if entity.startswith("groups/"):  # a group's configs changed somewhere
                group_id = Z.group_of_config_entity(entity[len("groups/"):])
                try:
                    await asyncio.to_thread(self.share.configs.reload, group_id)
                except Exception as exc:
                    log.warning("group %s: configs not reloaded (%s): %r", group_id, child, exc)
                else:
                    log.info("group %s: configs reloaded (%s)", group_id, child)
                continue
            scope = self.dynamic.entity_scope(entity)
            if scope is not None:  # this broker's dynamic configs or the cluster-wide ones
                try:
                    await asyncio.to_thread(self.dynamic.reload, scope)
                except Exception as exc:
                    log.warning("dynamic broker configs %s not reloaded (%s): %r", entity, child, exc)
                    continue
                self.dynamic.loaded()
                self.refresh_dynamic()
                log.info("dynamic broker configs %s reloaded (%s)", entity, child)
                continue
            if not entity.startswith("topics/"):
                continue
            topic = entity[len("topics/"):]
            configs = await asyncio.to_thread(self.node.topic_configs, topic)
            self.topics.configs[topic] = configs  # type: ignore[attr-defined]
            cfg = LogConfig.from_props(configs, self.default_log_config) if configs else self.default_log_config
            for (t, _), part in self.partitions.items():
                if t == topic:
                    part.log.config = cfg
            log.info("topic %s: configs reloaded (%s)", topic, child)

    def _session_reset(self) -> None:
        log.info("new ZooKeeper session (broker epoch %d)", self.node.broker_epoch)

    async def stop(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
        if self.fetchers is not None:
            await self.fetchers.close()
        if self._controller_conn is not None:
            self._controller_conn.close()
        for p in self.partitions.values():
            p.fail_waiters(EC.NOT_LEADER_OR_FOLLOWER)
        await asyncio.to_thread(self.node.close)
        await super().stop()

    # -- topics (in ZooKeeper) -----------------------------------------------------------------
    def refresh_topics(self) -> None:
        """Topics come from the controller's UpdateMetadata; nothing to reload."""

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))  # type: ignore[return-value]

    def owns(self, part: Any) -> bool:
        """The process holding the replica (the placement's owner) appends to it while this broker leads it."""
        return super().owns(part) and bool(getattr(part, "is_leader", False))

    # -- data path (leader) --------------------------------------------------------------------
    def leader_append(self, part: Any, records: bytearray | memoryview, *, allow_control: bool = False) -> Any:
        """`append` by the process that holds the replica's log (its placement's `append`)."""
        if not getattr(part, "is_leader", False):
            raise E.NotLeaderOrFollowerError(f"broker {self.node_id} does not lead {part.topic}-{part.index}")
        self.check_fence(part)
        result = part.log.append(records, part.leader_epoch, now_ms=now_ms(), allow_control=allow_control)
        part.wake_everywhere()  # (followers parked in other workers wait for the log end)
        part.maybe_increment_hw(self.node_id)
        self.check_fence(part)  # stopped between the check and the write: written, never acknowledged
        return result

    # -- self-fencing (docs/ARCHITECTURE.md, "Self-fencing of a cut-off leader") -----------------
    def leadership_fence(self, part: Any) -> str | None:
        """Why this broker cannot confirm now that it still leads `part`, or None."""
        word = self.node.session_word
        if not word & SESSION_CONNECTED:
            reason = "its ZooKeeper session is suspended or lost"
        elif not word & SESSION_REGISTERED or part.confirmed_epoch != self.node.broker_epoch:
            reason = "its ZooKeeper session expired since the controller last named it leader"
        elif monotonic_ms() >= self.node.lease_end_ms:
            reason = "ZooKeeper has not answered within the leadership lease"
        else:
            reason = None
        if reason != part.fenced:
            if reason is not None:
                log.warning("%s-%d: not appending as leader at epoch %d: %s", part.topic, part.index,
                            part.leader_epoch, reason)
            else:
                log.info("%s-%d: leadership at epoch %d confirmed; appending again", part.topic, part.index,
                         part.leader_epoch)
            part.fenced = reason
        return reason

    def check_fence(self, part: Any) -> None:
        reason = self.leadership_fence(part)
        if reason is not None:
            raise E.NotLeaderOrFollowerError(f"broker {self.node_id} cannot confirm that it leads "
                                             f"{part.topic}-{part.index}: {reason}")

    def min_insync_replicas(self, part: Any) -> int:
        return part.log.config.min_insync_replicas

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the partition exists anywhere in the cluster, not only here."""
        return index in self.metadata.partitions.get(topic, {})

    def isr_error(self, part: Any) -> int:
        """As a lone broker's, over the ISR its keeper has (a worker that does not own the
        replica: the owner's, in the slot)."""
        return EC.NOT_ENOUGH_REPLICAS if part.in_sync_count < part.log.config.min_insync_replicas else 0

    def fetch_upper_bound(self, part: Any, replica_id: int) -> int:
        """Followers read up to the log end; consumers up to the high watermark. A follower of a
        leader-throttled replica gets nothing while leader.replication.throttled.rate is used up
        (Kafka's `shouldLeaderThrottle`): up to where it already is."""
        if replica_id < 0:
            return part.high_watermark
        leo = part.seen_leo = part.log_end_offset  # what a follower's fetch about to park saw (workers compare)
        if self._leader_throttled(part) and self.leader_quota.exceeded():
            f = part.followers.get(replica_id)
            if f is not None and f.leo >= 0:
                return min(f.leo, leo)
        return leo

    def preferred_read_replica(self, part: Any, client_rack: str, fetch_offset: int) -> int:
        """Kafka's RackAwareReplicaSelector as its ReplicaManager.findPreferredReadReplica applies
        it, on the leader only and recomputed at every fetch: a consumer without a rack, or in
        the leader's rack, stays here; otherwise the most caught-up (then most recently caught
        up) follower in its rack among those in the ISR, live, and holding `fetch_offset` (its
        log end, as its last fetch reported it, at or past it); -1 when none is."""
        if not self.rack_aware_reads or not client_rack or not part.is_leader \
                or client_rack == self.config.get("broker.rack"):
            return -1
        best, chosen = (-1, 0), -1
        for r in part.in_sync_replicas:  # (a worker's replica another keeps: the owner's ISR)
            b = self.metadata.brokers.get(r)
            f = self.follower_state(part, r) if r != self.node_id else None
            if b is None or b.rack != client_rack or f is None or f.leo < fetch_offset:
                continue
            if (f.leo, f.last_caught_up_ms) > best:
                best, chosen = (f.leo, f.last_caught_up_ms), r
        return chosen

    def follower_state(self, part: Any, replica_id: int) -> Any:
        """The leader's record of a follower's fetch position (None: not a follower): the
        owner's, or in another worker the owner's record in the partition's slot."""
        if self.placement.owns(part):
            return part.followers.get(replica_id)
        return self.placement.slot_follower(part, replica_id)

    def _leader_throttled(self, part: Any) -> bool:
        return (not self.leader_quota.unlimited
                and throttled(part.log.config.leader_replication_throttled_replicas, part.index, self.node_id))

    def on_replica_read(self, part: Any, replica_id: int, nbytes: int) -> None:
        """Bytes a follower fetch of this partition returned: counted against the throttle."""
        if self._leader_throttled(part):
            self.leader_quota.record(nbytes)

    def high_watermark_news(self, part: Any, replica_id: int, hw: int) -> bool:
        """Records `hw` as what the follower is answered now; True when it differs from what this
        process answered it last (docs/ARCHITECTURE.md, "acks=all in one round trip")."""
        if part.answered_hw.get(replica_id) == hw:
            return False
        part.answered_hw[replica_id] = hw
        return True

    def on_replica_fetch(self, part: Any, replica_id: int, fetch_offset: int) -> None:
        if not getattr(part, "is_leader", False):
            return
        f = self.follower_state(part, replica_id)
        if f is None:
            return
        f.on_fetch(fetch_offset, part.log.state.log_end_offset, now_ms())
        if not self.placement.owns(part):
            self.placement.wake_owner(part)  # the owner recomputes the high watermark and the ISR
            return
        part.maybe_increment_hw(self.node_id)
        self._maybe_expand_isr(part, replica_id, fetch_offset)

    def _maybe_expand_isr(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower that reached the high watermark and the current epoch's start rejoins the ISR."""
        if (replica_id not in part.isr and part.alter_in_flight is None
                and fetch_offset >= part.high_watermark and fetch_offset >= part.epoch_start_offset):
            self._alter_isr(part, sorted(set(part.isr) | {replica_id}))

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
            self.leader_endpoints[leader.broker_id] = (leader.host_name, leader.port)
        results = []
        # the registration the controller addressed this to: its roles are confirmed for that one
        # (sent before this broker learnt its own new epoch: it counts once it has)
        epoch = req.broker_epoch if req.broker_epoch >= 0 else self.node.broker_epoch
        for ts in req.topic_states:
            for ps in ts.partition_states:
                code = await self._apply_partition_state(ts.topic_name, bytes(ts.topic_id), ps, epoch)
                results.append((ts.topic_name, bytes(ts.topic_id), ps.partition_index, code))
        return 0, results

    async def _apply_partition_state(self, topic: str, topic_id: bytes, ps: Any, broker_epoch: int) -> int:
        tp = (topic, ps.partition_index)
        part = self.partitions.get(tp)
        if part is not None and part.partition_epoch >= 0:
            if ps.leader_epoch < part.leader_epoch or (ps.leader_epoch == part.leader_epoch
                                                       and ps.partition_epoch <= part.partition_epoch):
                if ps.leader_epoch == part.leader_epoch and ps.leader == part.leader_id:
                    # nothing new to apply (Kafka answers it so), but the controller of this
                    # registration names the same role: the role is confirmed (a new controller, or
                    # a re-registration after which no leader changed, sends only such states)
                    part.confirmed_epoch = broker_epoch
                return EC.STALE_CONTROLLER_EPOCH
        if self.node_id not in ps.replicas:
            return EC.UNKNOWN_TOPIC_OR_PARTITION
        if part is None:
            part = await self.placement.new_replica(topic, topic_id, ps.partition_index)
            part.topic_id = topic_id
            self.partitions[tp] = part
        if ps.leader == self.node_id:
            self.placement.become_leader(part, ps)
        else:
            self.placement.become_follower(part, ps)
        self.partitions[tp].confirmed_epoch = broker_epoch  # type: ignore[attr-defined]
        return 0

    async def replica_log(self, topic: str, index: int) -> Any:
        """The log of a replica this process holds: the one loaded at start, else a new one."""
        lg = self.log_manager.get(topic, index)
        if lg is None:
            lg = self.log_manager.create(topic, index, await self.replica_config(topic))
        return lg

    async def replica_config(self, topic: str) -> LogConfig:
        """The topic's log config, its overrides read from ZooKeeper."""
        return await asyncio.to_thread(self._config_for_topic, topic)

    def make_leader(self, part: Partition, ps: Any) -> None:
        """The process holding the replica's log leads it (its placement's `become_leader`)."""
        assert self.fetchers is not None
        tp = (part.topic, part.index)
        self.fetchers.remove(tp)
        was_leader = part.is_leader
        now = now_ms()
        lg = part.log
        if not was_leader or ps.leader_epoch != part.leader_epoch:
            replicas = set(ps.replicas)
            part.followers = {r: part.followers.get(r) or self._new_follower(part, r, now, replicas)
                              for r in ps.replicas if r != self.node_id}
            for f in part.followers.values():
                f.last_caught_up_ms = max(f.last_caught_up_ms, now)
            part.epoch_start_offset = lg.log_end_offset
        part.apply_state(ps, is_leader=True)
        lg.leader_epochs.assign(ps.leader_epoch, lg.log_end_offset)
        st = lg.state
        st.high_watermark = min(st.high_watermark, lg.log_end_offset)
        st.last_stable_offset = lg.last_stable_offset(st.high_watermark)
        log.info("%s-%d: leader at epoch %d, ISR %s, log end %d, HW %d", part.topic, part.index,
                 ps.leader_epoch, part.isr, lg.log_end_offset, st.high_watermark)
        part.maybe_increment_hw(self.node_id)
        part.wake_everywhere()
        if not was_leader:
            self._coordinator_partition(part, load=True)

    def _coordinator_partition(self, part: Partition, *, load: bool) -> None:
        """Leadership of a `__consumer_offsets`, `__transaction_state` or `__share_group_state`
        partition came or went: its coordinator loads (COORDINATOR_LOAD_IN_PROGRESS meanwhile) or
        drops its state."""
        coordinator = {OFFSETS_TOPIC: self.group_coordinator, TXN_TOPIC: self.txn_coordinator,
                       STATE_TOPIC: self.share.store}.get(part.topic)
        if coordinator is not None:
            (coordinator.load_partition if load else coordinator.unload_partition)(part.index)

    def make_follower(self, part: Partition, ps: Any) -> None:
        """The process holding the replica's log follows (its placement's `become_follower`)."""
        assert self.fetchers is not None
        tp = (part.topic, part.index)
        was_leader = part.is_leader
        part.apply_state(ps, is_leader=False)
        part.followers = {}
        part.fail_waiters(EC.NOT_LEADER_OR_FOLLOWER)
        if was_leader:
            self._coordinator_partition(part, load=False)
        self.fetchers.remove(tp)
        endpoint = self.leader_endpoints.get(ps.leader)
        if ps.leader >= 0 and endpoint is None and ps.leader in self.metadata.brokers:
            b = self.metadata.brokers[ps.leader]
            endpoint = (b.host, b.port)
        if ps.leader >= 0 and endpoint is not None:
            self.fetchers.add(tp, part, ps.leader, endpoint[0], endpoint[1], ps.leader_epoch)
        log.info("%s-%d: follower of %d at epoch %d", part.topic, part.index, ps.leader, ps.leader_epoch)
        part.wake_everywhere()

    async def apply_update_metadata(self, req: Any) -> int:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err
        self.metadata.update(req)
        for b in self.metadata.brokers.values():
            self.leader_endpoints[b.broker_id] = (b.host, b.port)
        return 0

    async def apply_stop_replica(self, req: Any) -> tuple[int, list[tuple[str, int, int]]]:
        err = self.check_controller_epoch(req.controller_epoch, req.broker_epoch)
        if err:
            return err, []
        out = []
        for ts in req.topic_states:
            for ps in ts.partition_states:
                tp = (ts.topic_name, ps.partition_index)
                if self.fetchers is not None:
                    self.fetchers.remove(tp)
                part = self.partitions.get(tp)
                if part is not None:
                    part.fail_waiters(EC.NOT_LEADER_OR_FOLLOWER)
                    if part.is_leader:
                        self._coordinator_partition(part, load=False)
                    part.is_leader = False
                if ps.delete_partition:
                    removed = self.partitions.pop(tp, None)
                    if removed is not None:
                        removed.wake()
                    self.log_manager.delete(*tp)
                    if self.log_cleaner is not None:
                        self.log_cleaner.forget(*tp)
                    if removed is not None:
                        self.placement.replica_removed(removed)
                out.append((ts.topic_name, ps.partition_index, 0))
        return 0, out

    # -- ISR changes (leader -> controller) ----------------------------------------------------
    async def _isr_maintenance(self) -> None:
        interval = max(self.lag_ms / 2, 100) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self._shrink_lagging_isrs()
            except Exception:  # keep checking; the error is in the log
                log.exception("ISR maintenance failed")

    def _shrink_lagging_isrs(self) -> None:
        """Followers in the ISR that have not caught up for replica.lag.time.max.ms leave it."""
        now = now_ms()
        for part in list(self.partitions.values()):
            if not self.owns(part) or part.alter_in_flight is not None:
                continue
            leo = part.log.state.log_end_offset
            lagging = [r for r in part.isr if r != self.node_id and (f := part.followers.get(r)) is not None
                       and f.leo < leo and now - f.last_caught_up_ms > self.lag_ms]
            if lagging:
                log.info("%s-%d: shrinking ISR %s: %s not caught up for %d ms", part.topic, part.index,
                         part.isr, lagging, self.lag_ms)
                self._alter_isr(part, [r for r in part.isr if r not in lagging])

    def _alter_isr(self, part: Partition, new_isr: list[int]) -> None:
        part.alter_in_flight = new_isr
        assert self.loop is not None
        self.loop.create_task(self._alter_partition(part, new_isr, part.leader_epoch))

    async def _alter_partition(self, part: Partition, new_isr: list[int], epoch: int) -> None:
        await self._send_alter_partition(part, new_isr, epoch)
        self.placement.on_isr_changed(part)

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

    async def _send_alter_partition(self, part: Partition, new_isr: list[int], epoch: int) -> None:
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
        finally:
            if part.alter_in_flight is new_isr:
                part.alter_in_flight = None
            part.maybe_increment_hw(self.node_id)

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

    # -- controlled shutdown (before the listeners close) ----------------------------------------
    async def before_stop(self) -> None:
        await self.placement.controlled_shutdown()  # the process holding the registration runs it

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
