"""The control plane of a ZooKeeper-mode broker: the same calls as the single node's
(`kafkafast/broker/control.py`), answered by this broker's controller thread when it is the
active controller, by the cluster member this broker is, and from its metadata cache.

It feeds the data plane (`broker.replicas`, broker/replica_manager.py) the controller's
LeaderAndIsr and StopReplica, takes its ISR changes to the controller (AlterPartition), and
tells it when a leadership cannot be confirmed (the ZooKeeper session and lease: self-fencing
of a cut-off leader)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafkafast.broker.broker import OFFSETS_TOPIC
from kafkafast.broker.control import PartitionView, election_everywhere
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.controller import Controller
from kafkafast.cluster.node import SESSION_CONNECTED, SESSION_REGISTERED, monotonic_ms
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_partition import AlterPartitionResponse
from kafkafast.protocol._generated.alter_partition_reassignments import AlterPartitionReassignmentsResponse
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownResponse
from kafkafast.storage.config import LogConfig

log = logging.getLogger("kafkafast.replica_manager")


def _ensure_offsets_topic(broker: Any) -> int:
    """0 once `__consumer_offsets` exists (created here if not), else COORDINATOR_NOT_AVAILABLE."""
    if OFFSETS_TOPIC in broker.metadata.partitions or broker.topics.get(OFFSETS_TOPIC) is not None:
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
    """Control plane of a cluster broker (`ClusterBroker`, any worker of it)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.seen_config_changes: set[str] = set()  # the config change notifications taken (load's, the watch's)
        self._config_changes_lock = asyncio.Lock()

    @property
    def zk(self) -> Any:
        """This broker's ZooKeeper session: ACLs and SCRAM credentials live there (security/)."""
        return self.broker.node.zk

    def _controller_active(self) -> bool:
        controller = self.broker.node.controller
        return controller is not None and controller.active

    # -- the broker's lifecycle (Broker.on_listening, before_stop, stop) ----------------

    async def on_listening(self) -> None:
        """Once the listeners accept connections (runtime/server.py, runtime/worker.py): register
        (the process that holds the registration and runs the controller, worker 0), so that the
        controller's LeaderAndIsr for this broker finds it reachable, as Kafka registers only
        after its socket server is up; then watch the config change notifications."""
        broker, node = self.broker, self.broker.node
        if broker.placement.index == 0:
            await asyncio.to_thread(node.register)
            node.controller = Controller(node)
            node.on_session_reset = lambda: broker.loop.call_soon_threadsafe(self._session_reset)
            node.controller.start()
        node.zk.ChildrenWatch(Z.CONFIG_CHANGES, self._on_config_changes)

    async def before_stop(self) -> None:
        """SIGTERM, while every listener still serves: the controlled shutdown (run by the
        process holding the registration)."""
        await self.broker.placement.controlled_shutdown()

    async def stop(self) -> None:
        """The replicas stopped: the controller connection and the ZooKeeper session close."""
        broker = self.broker
        if broker._controller_conn is not None:
            broker._controller_conn.close()
        for p in broker.partitions.values():
            p.fail_waiters(E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
        await asyncio.to_thread(broker.node.close)

    def _session_reset(self) -> None:
        log.info("new ZooKeeper session (broker epoch %d)", self.broker.node.broker_epoch)

    def _on_config_changes(self, children: list[str]) -> None:
        """Kazoo's thread: a topic's configs, dynamic broker configs, client quotas or a group's
        configs changed somewhere; reload them on the loop."""
        loop = self.broker.loop
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
                data, _ = await asyncio.to_thread(broker.node.zk.get, f"{Z.CONFIG_CHANGES}/{child}")
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
            configs = await asyncio.to_thread(broker.node.topic_configs, topic)
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
        return await self.broker.handle_alter_partition(req)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ControlledShutdownResponse:
        if not self._controller_active():
            return ControlledShutdownResponse(error_code=E.ErrorCode.NOT_CONTROLLER)
        return await self.broker.ask_controller("controlled_shutdown", broker_id, broker_epoch)

    async def elect_leaders(self, req: Any) -> Any:
        if not self._controller_active():
            return election_everywhere(req, E.ErrorCode.NOT_CONTROLLER)
        tps = None
        if req.topic_partitions is not None:
            tps = [(t.topic, p) for t in req.topic_partitions for p in t.partitions]
        return await self.broker.ask_controller("elect_leaders", req.election_type == 1, tps)

    async def alter_reassignments(self, req: Any) -> AlterPartitionReassignmentsResponse:
        if not self._controller_active():
            return AlterPartitionReassignmentsResponse(error_code=E.ErrorCode.NOT_CONTROLLER, error_message=None)
        return await self.broker.ask_controller("alter_reassignments", req)

    async def list_reassignments(self, partitions: list[tuple[str, int]] | None) -> tuple[int, dict]:
        if not self._controller_active():
            return E.ErrorCode.NOT_CONTROLLER, {}
        return await self.broker.ask_controller("list_reassignments", partitions)

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
        b = broker.metadata.brokers.get(broker.metadata.leader_of(topic, p))
        ep = b.endpoint(ctx.listener_name) if b is not None else None
        if b is None or ep is None:
            return -1, "", -1, E.ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return b.broker_id, ep[0], ep[1], 0, None

    # -- the data plane's calls --------------------------------------------------------

    def fence_reason(self, part: Any) -> str | None:
        """Why this broker cannot confirm now that it still leads `part`, or None
        (docs/ARCHITECTURE.md, "Self-fencing of a cut-off leader")."""
        node = self.broker.node
        word = node.session_word
        if not word & SESSION_CONNECTED:
            return "its ZooKeeper session is suspended or lost"
        if not word & SESSION_REGISTERED or part.confirmed_epoch != node.broker_epoch:
            return "its ZooKeeper session expired since the controller last named it leader"
        if monotonic_ms() >= node.lease_end_ms:
            return "ZooKeeper has not answered within the leadership lease"
        return None

    async def alter_isr(self, part: Any, new_isr: list[int], epoch: int) -> None:
        """A leader's ISR change: AlterPartition to the controller (applied if accepted)."""
        await self.broker.send_alter_partition(part, new_isr, epoch)

    # -- requests a controller sends to the members of its cluster ---------------------

    async def leader_and_isr(self, req: Any) -> tuple[int, list[tuple[str, bytes, int, int]]]:
        return await self.broker.apply_leader_and_isr(req)

    async def update_metadata(self, req: Any) -> int:
        return await self.broker.apply_update_metadata(req)

    async def stop_replica(self, req: Any) -> tuple[int, list[tuple[str, int, int]]]:
        return await self.broker.apply_stop_replica(req)

    # -- the cluster as clients see it (the controller's UpdateMetadata) ---------------

    def refresh(self) -> None:
        """The image is the metadata cache, kept by the controller's UpdateMetadata."""

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the partition exists anywhere in the cluster, not only here."""
        return index in self.broker.metadata.partitions.get(topic, {})

    def topic_names(self) -> list[str]:
        return sorted(self.broker.metadata.partitions)

    def topic_id(self, name: str) -> bytes | None:
        cache = self.broker.metadata
        return cache.topic_ids.get(name, bytes(16)) if name in cache.partitions else None

    def topic_named_by(self, topic_id: bytes) -> str | None:
        return next((n for n, tid in self.broker.metadata.topic_ids.items() if tid == topic_id), None)

    def partitions_of(self, name: str) -> list[PartitionView]:
        return [PartitionView(index, info.leader, info.leader_epoch, list(info.replicas), list(info.isr),
                              list(info.offline))
                for index, info in sorted(self.broker.metadata.partitions.get(name, {}).items())]

    def controller_id(self) -> int:
        return self.broker.metadata.controller_id

    def leader_of(self, topic: str, partition: int) -> tuple[int, int] | None:
        info = self.broker.metadata.partitions.get(topic, {}).get(partition)
        return (info.leader, info.leader_epoch) if info is not None and info.leader >= 0 else None

    def endpoint_of(self, broker_id: int) -> tuple[str, int, str | None] | None:
        b = self.broker.metadata.brokers.get(broker_id)
        return (b.host, b.port, b.rack) if b is not None else None

    def brokers_for(self, ctx: Any) -> list[tuple[int, str, int, str | None]]:
        return list(self.broker.metadata.brokers_on(ctx.listener_name))
