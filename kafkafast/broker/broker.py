"""The broker core: topics, partitions, request dispatch. No sockets here.

`Broker.handle_frame(frame, conn)` takes one request frame (without its size prefix, as a
writable bytearray so produce can assign offsets in place) and returns the response parts
(`None` for acks=0 produce), or raises `CloseConnection` when Kafka would close the
connection (malformed header, unknown API key, unsupported version of anything but
ApiVersions, bytes that do not parse).

Partitions (`partition.Partition`, one class in every mode) and their roles are the replica
manager's (`replica_manager.py`, `broker.replicas`), fed by the control plane (`broker.control`):
on a single node each leads alone, its ISR this broker, its high watermark the log end the
append publishes. Where they live is the broker's placement (`placement.py`): in one process
every partition is local; the multi-process runtime's says which worker appends to which
partition and forwards appends it does not own; reads are always local.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kafkafast import clock
from kafkafast.broker.control import LocalControl
from kafkafast.broker.extensions import frame_hook, load_extensions
from kafkafast.broker.fetch_sessions import FetchSessionCache
from kafkafast.broker.group_coordinator import GroupCoordinator
from kafkafast.broker.partition import Partition
from kafkafast.broker.placement import LocalPlacement, Placement
from kafkafast.broker.handlers.api_versions import (PROFILE_PROPERTY, enabled_group_protocols, served_handlers,
                                                    unsupported_version_response)
from kafkafast.broker.handlers.fetch import answer_follower_fetch, follower_fetch
from kafkafast.broker.producer_ids import ProducerIdAllocator
from kafkafast.broker.registry import load_handlers
from kafkafast.broker.replica_manager import ReplicaManager
from kafkafast.broker.topic_admin import TopicAdmin
from kafkafast.broker.topics import INTERNAL_TOPICS, TopicMeta
from kafkafast.config import TOPIC_SYNONYMS, BrokerConfig, parse_properties
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol import api
from kafkafast.protocol import errors as E
from kafkafast.protocol.errors import CloseConnection  # also kafkafast.broker.broker.CloseConnection, as before
from kafkafast.protocol.later import LaterAnswer
from kafkafast.protocol.primitives import DecodeError
from kafkafast.storage.cleaner import LogCleaner
from kafkafast.storage.config import LogConfig
from kafkafast.storage.log_manager import LogManager
from kafkafast.broker.dynamic_configs import CLEANER_CONFIGS, CONNECTION_CONFIGS, cleaner_io_rate
from kafkafast.broker.quotas import SHARE_FETCH, QuotaManager, measured_handler_time

log = logging.getLogger("kafkafast.broker")

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(slots=True)
class RequestContext:
    header: Any
    api_version: int
    client_id: str | None
    conn: Any = None  # the connection object (peer address, internal flag)
    internal: bool = False  # forwarded by another worker: handle locally, never forward again

    @property
    def listener_name(self) -> str | None:
        """The name of the listener the request came in on (None: an internal connection)."""
        listener = getattr(self.conn, "listener", None)
        return listener.name if listener is not None else None


def now_ms() -> int:
    return clock.now_ms()


class Broker:
    def __init__(self, config: BrokerConfig, placement: Placement | None = None,
                 control: Callable[[Broker], Any] = LocalControl) -> None:
        self.config = config
        self.placement: Placement = placement or LocalPlacement()  # where partitions live: one process or N
        self.node_id = config.node_id
        self.log_dirs = config.log_dirs
        # the control plane (cluster/zk_control.py: ZooKeeper's), first: it makes the stores below
        self.control: Any = control(self)
        os.makedirs(self.log_dirs[0], exist_ok=True)  # topics and cluster id live there; the others
        # may fail (the LogManager takes such a dir offline)
        self.cluster_id = self.control.initial_cluster_id()
        self.topics = self.control.make_topics()  # the metadata image's topics (topics file | ZooKeeper's cache)
        self.topic_admin = TopicAdmin(self, self.control.make_topic_store())  # one admin over either store
        self._topics_applied = -1  # the store's generation whose partitions are open (_apply_topics)
        self.dynamic = self.control.make_dynamic_configs()  # dynamic broker configs, client quotas
        self.dynamic.refresh(force=True)
        self.quotas = QuotaManager(self)
        self.default_log_config = LogConfig.from_props(self.effective_topic_defaults())
        self._dynamic_applied = self.dynamic.version  # the version apply_dynamic_configs last applied
        self.log_manager = LogManager(self.log_dirs, self.default_log_config, **self.log_manager_settings())
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        self.handlers = {k: spec for k, spec in enabled_group_protocols(
            served_handlers(load_handlers(), config.get(PROFILE_PROPERTY)),
            config.get("group.coordinator.rebalance.protocols")).items()}
        self.group_coordinator: Any = None  # set by the groups layer when present
        self.txn_coordinator: Any = None  # kafkafast.broker.txn_coordinator, made in start()
        self.share: Any = None  # kafkafast.broker.share.coordinator.ShareCoordinator, made in start()
        self.log_cleaner: Any = None  # kafkafast.storage.cleaner.LogCleaner, made in load()
        self.producer_ids: Any = None
        self._periodic_task: asyncio.Task | None = None
        self.started = False
        # Hooks installed from outside the core (broker/extensions.py), e.g. a test broker's faults.
        self.replicas = ReplicaManager(self)  # the data plane: every replica's role, the HW rule, the ISR
        self.replicas.attach_control(self.control)
        self.extensions = load_extensions(self, config)
        self.test_control: Any = frame_hook(self.extensions)  # takes client request frames, if any
        self.placement.attach(self)  # a worker's placement: its fetch-session shard, its owned logs

    def log_manager_settings(self) -> dict[str, Any]:
        """The LogManager's schedule, from the broker settings of the same names as Kafka's."""
        cfg = self.config
        return {"retention_check_interval_ms": cfg.get_int("log.retention.check.interval.ms"),
                "checkpoint_interval_ms": cfg.get_int("log.flush.offset.checkpoint.interval.ms"),
                "log_start_checkpoint_interval_ms": cfg.get_int("log.flush.start.offset.checkpoint.interval.ms"),
                "producer_id_expiration_ms": cfg.get_int("producer.id.expiration.ms")}

    # -- lifecycle ----------------------------------------------------------------------
    def _load_cluster_id(self) -> str:
        path = os.path.join(self.log_dirs[0], "meta.properties")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                props = parse_properties(fh.read())
            if props.get("cluster.id"):
                return props["cluster.id"]
        cid = self.config.get("cluster.id") or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"version=0\ncluster.id={cid}\nbroker.id={self.node_id}\nnode.id={self.node_id}\n")
        return cid

    def load(self) -> None:
        """Synchronous start-up: topics, logs (recovery), partitions."""
        self.placement.before_load()
        self.producer_ids = ProducerIdAllocator(self.log_dirs[0])
        self.topics.load()
        # A partition of these not found on disk while a log dir is offline is offline too
        # (its log may be in that dir), never re-created empty elsewhere.
        self.log_manager.expected_partitions = {(t.name, i) for t in self.topics.topics.values()
                                                for i in range(t.partitions)}
        self.log_manager.load_all(self._config_for_topic)
        scanned = {k: v for k, v in self.log_manager.last_load_recovered.items() if v}
        if not self.log_manager.last_load_clean:
            log.warning("unclean start (no clean shutdown): recovery scan of %d bytes in %d partitions, truncated "
                        "%d bytes", sum(scanned.values()), len(scanned),
                        sum(self.log_manager.last_load_truncated.values()))
        elif scanned:
            log.info("clean start: no recovery scan; %d bytes read in %d partitions to rebuild missing or damaged "
                     "indexes", sum(scanned.values()), len(scanned))
        else:
            log.info("clean start: no recovery scan")
        self._apply_topics()
        self.log_cleaner = self.new_log_cleaner()
        self.started = True
        self.placement.after_load()

    def new_log_cleaner(self) -> Any:
        """The log cleaner, with the dynamic cleaner configs in force (`apply_dynamic_configs`
        changes them later)."""
        cleaner = LogCleaner(self.log_dirs, enabled=self.config.get_bool("log.cleaner.enable"),
                             max_decompressed=self.config.get("message.max.decompressed.bytes"))
        self._reconfigure_cleaner(cleaner)
        return cleaner

    def _reconfigure_cleaner(self, cleaner: Any) -> None:
        settings = self.effective_broker_configs(CLEANER_CONFIGS)
        cleaner.reconfigure(backoff_ms=int(settings["log.cleaner.backoff.ms"] or 15000),
                            io_max_bytes_per_second=cleaner_io_rate(
                                settings["log.cleaner.io.max.bytes.per.second"] or "inf") or float("inf"),
                            dedupe_buffer_size=int(settings["log.cleaner.dedupe.buffer.size"] or 134217728))

    async def start(self) -> None:
        await self.control.load()  # (a single node's: load(); ZooKeeper's: the session first)
        self.replicas.fetchers = self.control.make_fetchers()  # the followers' side of the data plane
        if self.group_coordinator is None:
            self._attach_group_coordinator()
        if self.share is None and self.group_coordinator is not None:  # before loading: it holds the share groups
            self.share = await self.control.make_share_coordinator()
        if self.group_coordinator is not None:
            await self.group_coordinator.start()
        if self.txn_coordinator is None and self.group_coordinator is not None:
            self.txn_coordinator = self.control.make_txn_coordinator()
        if self.txn_coordinator is not None:
            await self.txn_coordinator.start()
        if self.share is not None:
            await self.share.start()
        self._periodic_task = asyncio.get_running_loop().create_task(self._periodic())
        for ext in self.extensions:
            if hasattr(ext, "start"):
                ext.start()
        self.control.started()

    async def on_listening(self) -> None:
        """Called by the runtime once the listeners accept connections (the control plane's
        turn first: a cluster broker registers)."""
        await self.control.on_listening()
        self.replicas.start_isr_maintenance()

    async def before_stop(self) -> None:
        """Called by the runtime on SIGTERM while every listener still serves (the control
        plane's: a cluster broker moves its leaderships away, the controlled shutdown)."""
        await self.control.before_stop()

    def _attach_group_coordinator(self) -> None:
        self.group_coordinator = GroupCoordinator(self)

    async def stop(self) -> None:
        await self.replicas.stop()
        await self.control.stop()  # (a cluster broker's controller connection, ZooKeeper session)
        self.placement.before_stop()
        for ext in self.extensions:
            if hasattr(ext, "stop"):
                await ext.stop()
        if self._periodic_task:
            self._periodic_task.cancel()
            try:
                await self._periodic_task
            except asyncio.CancelledError:
                pass
        if self.share is not None:
            await self.share.stop()
        if self.txn_coordinator is not None:
            await self.txn_coordinator.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.stop()
        for p in self.partitions.values():
            p.wake()
        if self.log_cleaner is not None:
            self.log_cleaner.shutdown()
        self.log_manager.shutdown()
        self.started = False
        self.placement.after_stop()

    async def _periodic(self) -> None:
        interval = self.log_manager.periodic_granularity_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.log_manager.periodic(now_ms())
            except Exception:  # keep serving; the error is in the log
                log.exception("periodic log maintenance failed")
            try:  # compaction runs in the cleaner's thread; the segment swap happens here
                self.log_cleaner.periodic(self.log_manager.all_logs(), now_ms())
            except Exception:
                log.exception("log cleaner failed")

    # -- topics -------------------------------------------------------------------------
    def _config_for_topic(self, topic: str) -> LogConfig:
        return self.control.config_for_topic(topic)

    def local_config_for_topic(self, topic: str) -> LogConfig:
        """`_config_for_topic` from the topic store in the log dir."""
        meta = self.topics.get(topic)
        return self.topic_log_config(meta) if meta is not None else self.default_log_config

    async def replica_log(self, topic: str, index: int) -> Any:
        """The log of a replica this process holds: the one loaded at start, else a new one."""
        lg = self.log_manager.get(topic, index)
        if lg is None:
            lg = self.log_manager.create(topic, index, await self.replica_config(topic))
        return lg

    async def replica_config(self, topic: str) -> LogConfig:
        """The topic's log config (its overrides read from ZooKeeper, in a thread)."""
        return await asyncio.to_thread(self._config_for_topic, topic)

    def topic_log_config(self, meta: TopicMeta) -> LogConfig:
        return LogConfig.from_props(meta.configs, self.default_log_config) if meta.configs else self.default_log_config

    def _open_topic(self, meta: TopicMeta) -> None:
        self.placement.open_topic(meta)

    def local_open_topic(self, meta: TopicMeta) -> None:
        """`_open_topic` in one process: every partition's log is here."""
        cfg = self.topic_log_config(meta)
        for i in range(meta.partitions):
            if (meta.name, i) in self.partitions:
                continue
            lg = self.log_manager.get(meta.name, i) or self.log_manager.create(meta.name, i, cfg)
            part = self.partitions[(meta.name, i)] = Partition(meta.name, i, lg, topic_id=meta.topic_id)
            self.control.partition_opened(part)

    def effective_topic_defaults(self) -> dict[str, str]:
        """Topic config defaults: the properties file's, overridden by the dynamic cluster-wide
        defaults, overridden by this broker's dynamic configs (`dynamic_configs.py`)."""
        out = self.config.topic_defaults()
        out.update((TOPIC_SYNONYMS[n], v) for n, v in self.dynamic_broker_configs().items() if n in TOPIC_SYNONYMS)
        return out

    def effective_connection_configs(self) -> dict[str, str | None]:
        """The connection quotas: the properties file's, overridden as the topic defaults are."""
        return self.effective_broker_configs(CONNECTION_CONFIGS)

    def effective_broker_configs(self, names: frozenset[str]) -> dict[str, str | None]:
        """Broker configs `names`: the properties file's, overridden as the topic defaults are."""
        out = {name: self.config.get(name) for name in names}
        out.update((n, v) for n, v in self.dynamic_broker_configs().items() if n in names)
        return out

    def dynamic_broker_configs(self) -> dict[str, str]:
        """The dynamic broker configs in force here: this broker's over the cluster-wide default's."""
        return {**self.dynamic.broker_configs(""), **self.dynamic.broker_configs(str(self.node_id))}

    def apply_dynamic_configs(self) -> None:
        """Recomputes the default log config from the dynamic configs and gives every open
        partition its topic's config again; hands the connection quotas and the TLS listeners'
        key and trust stores to the listeners."""
        self._dynamic_applied = self.dynamic.version
        self.default_log_config = LogConfig.from_props(self.effective_topic_defaults())
        limits = getattr(self, "limits", None)
        if limits is not None:
            limits.reconfigure(self.effective_connection_configs())
            limits.reload_tls(self.dynamic_broker_configs())
        if self.log_cleaner is not None:
            self._reconfigure_cleaner(self.log_cleaner)
        for (name, _), part in list(self.partitions.items()):
            meta = self.topics.get(name)
            if meta is not None and not part.state.offline:
                part.log.config = self.topic_log_config(meta)

    def refresh_dynamic(self) -> None:
        """Applies the dynamic configs if they changed since last applied (another reader, the
        quotas, may have reloaded the file first: versions are compared, not refresh's answer)."""
        self.dynamic.refresh()
        if self.dynamic.version != self._dynamic_applied:
            self.apply_dynamic_configs()

    def refresh_topics(self) -> None:
        """Brings the metadata image up to date (the control plane's: topic changes made by
        another process; in ZooKeeper mode nothing, the controller's UpdateMetadata keeps it)."""
        self.control.refresh()

    def local_refresh_topics(self) -> None:
        self.refresh_dynamic()
        self.topics.load()
        if self.topics.generation != self._topics_applied:
            self._apply_topics()

    def _apply_topics(self) -> None:
        """Opens and drops partitions to match the topic store's view; after every reload and
        every change made here (a change reloads the file first, so it can bring in another
        process's topics that nothing else here would open)."""
        self.placement.apply_topics()

    def local_apply_topics(self) -> None:
        self._topics_applied = self.topics.generation
        live = self.topics.topics
        for key in [k for k in self.partitions if k[0] not in live or k[1] >= live[k[0]].partitions]:
            self.partitions.pop(key).wake()
        for t in list(live.values()):
            self._open_topic(t)

    # Topic administration is `self.topic_admin` (topic_admin.py: one implementation over the
    # topics file or, in cluster mode, ZooKeeper); the coordinators create their topics here.
    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None, *,
                     validate_only: bool = False, replication_factor: int = -1,
                     assignment: dict[int, list[int]] | None = None) -> TopicMeta:
        return self.topic_admin.create(name, partitions, configs, validate_only=validate_only,
                                       replication_factor=replication_factor, assignment=assignment)

    def local_delete_topic(self, name: str) -> None:
        """The topics file's deletion in one process: every partition's log is here."""
        with self.topics.change() as topics:
            meta = topics.pop(name, None)
            if meta is None:
                raise E.UnknownTopicOrPartitionError()
        for i in range(meta.partitions):
            part = self.partitions.pop((name, i), None)
            if part is not None:
                part.wake()
            self.log_manager.delete(name, i)
            if self.log_cleaner is not None:
                self.log_cleaner.forget(name, i)
        self._apply_topics()
        self.notify_metadata_changed()

    def notify_metadata_changed(self) -> None:
        """Tells the other processes, if any, to reload the topics."""
        self.placement.metadata_changed()

    def notify_acls_changed(self) -> None:
        """Tells the other processes, if any, to re-read the ACLs."""
        self.placement.acls_changed()

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the partition exists in the cluster, not only here (the metadata image's)."""
        return self.control.has_partition(topic, index)

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The partition held here, the metadata image brought up to date first when it is
        unknown or has no role yet: at a start with workers, a partition whose owner has
        loaded since this worker looked takes its published role now, so a request answers
        what Metadata lists (offline: KAFKA_STORAGE_ERROR, not NOT_LEADER_OR_FOLLOWER)."""
        part = self.partitions.get((topic, index))
        if part is None or part.partition_epoch < 0:
            self.refresh_topics()
            part = self.partitions.get((topic, index))
        return part

    # -- data path ----------------------------------------------------------------------
    def append(self, part: Partition, records: bytearray | memoryview, *, allow_control: bool = False) -> Any:
        """Appends a validated-on-the-way record set; advances the high watermark and the last
        stable offset. Control batches only from the marker writer (`allow_control`).
        KafkaStorageError when the files refuse it (a full disk): nothing was appended."""
        return self.placement.append(part, records, allow_control=allow_control)

    def owns(self, part: Partition) -> bool:
        """Whether this process appends to the partition: it holds the replica's log (the
        placement's owner; always, in one process) and this broker leads it."""
        return self.placement.owns(part) and part.is_leader

    def min_insync_replicas(self, part: Partition) -> int:
        return part.log.config.min_insync_replicas

    def partition_loaded(self, part: Partition) -> bool:
        """Whether the partition's records can be read here (its owner has loaded it; always, in one process)."""
        return self.placement.partition_loaded(part)

    def appends_here(self, part: Partition, transactional_id: str | None) -> bool:
        """Whether a client's produce to `part` is appended by this process (else forwarded)."""
        return self.placement.appends_here(part, transactional_id)

    async def delete_records(self, part: Partition, offset: int, *, internal: bool = False) -> None:
        await self.placement.delete_records(part, offset, internal=internal)

    async def local_delete_records(self, part: Partition, offset: int) -> None:
        """`delete_records` by the process that holds the partition's log."""
        part.log.delete_records_before(offset)
        self.on_append(part)

    def on_append(self, part: Partition) -> None:
        """Wakes the fetches parked on `part` in other processes, if any."""
        self.placement.on_append(part)

    async def wait_for_data(self, parts: Iterable[Partition], timeout: float) -> None:
        await self.placement.wait_for_data(parts, timeout)

    # -- dispatch -----------------------------------------------------------------------
    async def handle_frame(self, frame: bytearray | memoryview, conn: Any = None, *, internal: bool = False) -> list | None:
        return await self.placement.handle_frame(frame, conn, internal=internal)

    async def dispatch(self, frame: bytearray | memoryview, conn: Any = None, *, internal: bool = False) -> list | None:
        """`handle_frame` in the process that answers the request."""
        if len(frame) < 8:
            raise CloseConnection("frame shorter than a request header")
        api_key, api_version, correlation_id = api.peek_api(frame)
        spec = self.handlers.get(api_key)
        if spec is None:
            raise CloseConnection(f"unknown API key {api_key}")
        if not spec.min_version <= api_version <= spec.max_version:
            if api_key == api.API_VERSIONS_KEY:
                return api.encode_response(api_key, 0, correlation_id, unsupported_version_response(self))
            raise CloseConnection(f"unsupported version {api_version} of API {api_key}")
        if api_key == 1 and (internal or not self.quotas.active()):
            lean = follower_fetch(self, frame, conn, internal)  # a follower's steady fetch: the lean path
            if lean is not None:
                return await answer_follower_fetch(self, lean, conn, internal)
        try:
            header, request = api.decode_request(frame)
        except (DecodeError, E.KafkaError) as exc:
            raise CloseConnection(f"malformed request (api {api_key} v{api_version}): {exc}; "
                                  f"first bytes {bytes(frame[:96]).hex()}") from exc
        ctx = RequestContext(header, api_version, header.client_id, conn, internal)
        if internal or not self.quotas.active():
            response = await spec.func(self, ctx, request, api_version)
            if isinstance(response, LaterAnswer):  # a parked acks=all produce: encoded when answered
                return response  # type: ignore[return-value]
            if request_metrics.active and not internal and api_key <= 1:  # Produce, Fetch
                request_metrics.answered(api_key, request, response)
            if response is None:
                return None
            return api.encode_response(api_key, api_version, correlation_id, response)
        return await self._handle_with_quotas(spec, ctx, request, frame, correlation_id)

    async def _handle_with_quotas(self, spec: Any, ctx: RequestContext, request: Any, frame: Any,
                                  correlation_id: int) -> list | None:
        """A request of a client that quotas may throttle (`broker/quotas.py`): its handler
        time, request bytes (Produce) or response bytes (consumer Fetch, ShareFetch) are
        recorded; over a quota the response carries throttle_time_ms and the connection is
        muted that long."""
        api_key, api_version = spec.api_key, ctx.api_version
        handler_ms = [0.0]
        with measured_handler_time(handler_ms):
            response = await spec.func(self, ctx, request, api_version)
        if request_metrics.active and api_key <= 1:  # Produce, Fetch
            request_metrics.answered(api_key, request, response)
        parts = None if response is None else api.encode_response(api_key, api_version, correlation_id, response)
        consumer_fetch = parts is not None and (api_key == SHARE_FETCH or (
            api_key == 1 and fetch_replica_id(request, api_version) < 0))
        throttle = self.quotas.throttle_request(api_key, ctx, len(frame),
                                                sum(len(p) for p in parts) if consumer_fetch else 0, handler_ms[0])
        return self.throttled(ctx, throttle, correlation_id, response, parts)

    def throttled(self, ctx: RequestContext, throttle: int, correlation_id: int, response: Any,
                  parts: list | None) -> list | None:
        """The answer of a request `throttle` ms over a quota: the connection muted that long
        and the response's throttle_time_ms raised to it."""
        if throttle > 0:
            if ctx.conn is not None:
                ctx.conn.throttled_until = time.monotonic() + throttle / 1000.0
            if parts is not None and getattr(response, "throttle_time_ms", None) is not None:
                response.throttle_time_ms = max(response.throttle_time_ms, throttle)
                parts = api.encode_response(ctx.header.request_api_key, ctx.api_version, correlation_id, response)
        return parts


def fetch_replica_id(request: Any, version: int) -> int:
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS
