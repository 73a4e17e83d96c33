"""This broker's ZooKeeper session: chroot, cluster id, broker id, registration, the
controller, producer-id blocks and the topic znodes the admin APIs write.

The kazoo session is started in `start()`, which the serving process calls after any fork
(STYLE.md item 11). Watches and session events run on kazoo's threads and only hand work on:
to the controller's queue or to the broker's event loop (`call_soon_threadsafe`).
"""
from __future__ import annotations

import base64
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from kafkafast.broker.placement import (BROKER_EPOCH_WORD, BROKER_ID_WORD, LEASE_END_WORD, SESSION_WORD,
                                        Placement)
from kafkafast.cluster import zk_data as Z
from kafkafast.config import ConfigError, parse_properties
from kafkafast.metrics import recorder as request_metrics
from kafkafast.security.client import InterBrokerSecurity
from kafkafast.security.listeners import listener_specs

log = logging.getLogger("kafkafast.cluster")


class InconsistentClusterIdError(SystemExit):
    pass


class BrokerIdInUseError(SystemExit):
    """Another session holds `/brokers/ids/<id>` past the wait for an old registration."""


REREGISTER_BACKOFF_S = 1.0
IDENTITY_WAIT_S = 120.0  # a process other than the holder waits this long for the broker id
# The session word (`ClusterNode.session_word`): generation << 2 | REGISTERED | CONNECTED.
# The generation counts the broker's lost registrations (its session expired, or it deleted
# the registration to register again); REGISTERED: the broker's registration was made in the
# current generation; CONNECTED: the session is not suspended.
SESSION_CONNECTED, SESSION_REGISTERED = 1, 2


def monotonic_ms() -> int:
    """CLOCK_MONOTONIC in ms: one clock for every process of the machine (the lease end in
    shared memory is compared by every worker)."""
    return int(time.monotonic() * 1000)


def split_connect(connect: str) -> tuple[str, str]:
    """`host:port,host:port/chroot` -> (hosts, chroot or "")."""
    i = connect.find("/")
    if i < 0:
        return connect, ""
    return connect[:i], connect[i:].rstrip("/")


class TimedKazooClient(KazooClient):
    """A kazoo client whose requests go into the metrics, from queued to answered (Kafka's
    ZooKeeperRequestLatencyMs; the answer is seen on kazoo's completion thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.negotiated_timeout_ms = int(self._session_timeout)
        connect = self._connection._connect

        def _connect(*a: Any) -> Any:  # kazoo keeps the server's timeout only as its read timeout
            read_timeout, connect_timeout = connect(*a)
            self.negotiated_timeout_ms = int(read_timeout * 3 / 2)  # read timeout = 2/3 of the session's
            return read_timeout, connect_timeout

        self._connection._connect = _connect

    def _call(self, request: Any, async_object: Any) -> Any:
        if request_metrics.active:
            started = request_metrics.clock()
            async_object.rawlink(lambda _: request_metrics.zookeeper_request((request_metrics.clock() - started) * 1000.0))
        return super()._call(request, async_object)


class BrokerWord:
    """A broker-shared word of the node's placement as an attribute: every process reads it,
    only the process holding the registration writes it (another's writes are dropped)."""

    def __init__(self, word: int) -> None:
        self.word = word

    def __get__(self, node: Any, owner: Any = None) -> int:
        return node.placement.broker_word(self.word)

    def __set__(self, node: Any, value: int) -> None:
        if node.holder:
            node.placement.set_broker_word(self.word, value)


class ClusterNode:
    """The ZooKeeper session of one process of the broker (with workers each has its own). The
    process holding the registration (the placement's index 0) establishes the broker id and
    registers; the broker id, the broker epoch and the session state the fence follows are
    kept in the placement's broker-shared words (broker/placement.py: with workers, the
    shared-memory header), written by that process and read by every one."""

    session_word = BrokerWord(SESSION_WORD)  # the session the fence follows: see SESSION_CONNECTED
    lease_end_ms = BrokerWord(LEASE_END_WORD)
    broker_epoch = BrokerWord(BROKER_EPOCH_WORD)

    def __init__(self, config: Any, log_dir: str, placement: Placement) -> None:
        self.placement = placement
        self.holder = placement.index == 0  # the process that registers the broker
        previous = placement.broker_word(SESSION_WORD)
        self.config = config
        self.log_dir = log_dir
        hosts, self.chroot = split_connect(config.get("zookeeper.connect") or "")
        self.hosts = hosts
        self.session_timeout_s = config.get_int("zookeeper.session.timeout.ms") / 1000.0
        conn_timeout = config.get("zookeeper.connection.timeout.ms")
        self.connection_timeout_s = int(conn_timeout) / 1000.0 if conn_timeout else self.session_timeout_s
        # the broker's own connections (controller requests, fetchers, AlterPartition) go to the
        # other brokers' inter-broker listener, with its TLS and SASL (security/client.py)
        self.inter_broker = InterBrokerSecurity(config.props)
        self.inter_broker_listener = self.inter_broker.listener.name
        self.zk: KazooClient | None = None
        self.broker_id = -1
        self.broker_epoch = -1  # (these three: the broker-shared words, written by the holder alone)
        self.cluster_id = ""
        self.controller: Any = None
        self.on_session_reset: Callable[[], None] | None = None
        self._lost = False
        self.holds_registration = False  # this session registered the broker: it registers again after expiry
        self._register_lock = threading.RLock()  # one registration at a time: re-registration, reregister()
        self._sessions = 0  # sessions made after an expiry: a re-registration retries only for the newest
        self._closed = False
        self._pid_lock = threading.Lock()
        self._pid_next = 0
        self._pid_end = 0
        self.session_word = 0
        self.lease_end_ms = 0  # appends of led partitions stop here (see "Self-fencing" in ARCHITECTURE.md)
        self._lease_thread: threading.Thread | None = None
        self._lease_kick = threading.Event()  # a read at once: the session is back
        if self.holder:  # a new holder (a respawned worker 0 too): what a predecessor confirmed is void
            self.session_word = ((previous >> 2) + 1) << 2

    # -- the leadership lease --------------------------------------------------------------------
    def lease_ms(self) -> int:
        """Half the negotiated session timeout: see docs/ARCHITECTURE.md, "Self-fencing"."""
        negotiated = getattr(self.zk, "negotiated_timeout_ms", 0) or int(self.session_timeout_s * 1000)
        return min(negotiated, int(self.session_timeout_s * 1000)) // 2

    def _start_lease(self) -> None:
        if self._lease_thread is None:
            self._lease_thread = threading.Thread(target=self._renew_lease, name="zk-lease", daemon=True)
            self._lease_thread.start()

    def _renew_lease(self) -> None:
        """Every third of the lease, a read of the broker's registration: once ZooKeeper
        answers it, the session was alive after the read was sent, so it cannot expire before
        that send time + the session timeout, and the lease runs to send time + lease."""
        while not self._closed:
            sent, lease = monotonic_ms(), self.lease_ms()
            try:
                self.zk.exists_async(Z.broker_path(self.broker_id)).rawlink(  # type: ignore[union-attr]
                    lambda res, sent=sent, lease=lease: res.successful() and self._extend_lease(sent + lease))
            except Exception as exc:  # the client is stopping
                log.debug("lease read not sent: %r", exc)
            self._lease_kick.wait(lease / 3000.0)
            self._lease_kick.clear()

    def _extend_lease(self, end_ms: int) -> None:
        if end_ms > self.lease_end_ms:
            self.lease_end_ms = end_ms

    def _set_session(self, *, connected: bool | None = None, registered: bool | None = None,
                     expired: bool = False) -> None:
        word = self.session_word
        if expired:
            word = ((word >> 2) + 1) << 2  # a new generation: not registered, not connected
        if connected is not None:
            word = word | SESSION_CONNECTED if connected else word & ~SESSION_CONNECTED
        if registered is not None:
            word = word | SESSION_REGISTERED if registered else word & ~SESSION_REGISTERED
        self.session_word = word

    # -- session -------------------------------------------------------------------------------
    def connect(self) -> None:
        if self.chroot:
            root = KazooClient(hosts=self.hosts, timeout=self.session_timeout_s)
            self._start(root)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
        self.zk = TimedKazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout_s)
        self._start(self.zk)
        self.zk.add_listener(self._state_listener)
        for path in Z.PERSISTENT_PATHS:
            self.zk.ensure_path(path)

    def _start(self, client: KazooClient) -> None:
        """A session within zookeeper.connection.timeout.ms, or ConfigError: the broker cannot start."""
        try:
            client.start(timeout=self.connection_timeout_s)
        except client.handler.timeout_exception:
            raise ConfigError(f"Invalid value {self.hosts + self.chroot} for configuration zookeeper.connect: "
                              f"no ZooKeeper session within {self.connection_timeout_s * 1000:.0f} ms "
                              "(zookeeper.connection.timeout.ms)") from None

    def _state_listener(self, state: str) -> None:
        if self.holds_registration:  # the session the fence follows (with workers: worker 0's)
            self._set_session(connected=state == KazooState.CONNECTED, expired=state == KazooState.LOST)
            if state == KazooState.CONNECTED:
                self._lease_kick.set()
        if state == KazooState.SUSPENDED and self.holds_registration:
            log.warning("ZooKeeper session suspended: appends to the partitions led here stop until it is back")
        if state == KazooState.LOST:
            self._lost = True
            log.warning("ZooKeeper session lost")
            if self.controller is not None:
                self.controller.session_expired()
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            self._sessions += 1
            threading.Thread(target=self._reestablish, args=(self._sessions,), name="zk-reregister",
                             daemon=True).start()

    def _reestablish(self, session: int) -> None:
        """A new session after expiry. The session that held the broker's registration
        registers again (retried until it succeeds, the session is lost again or the broker
        stops) and runs for controller again; any other session of the broker (the other
        workers') registers nothing, so the registration and its epoch stay worker 0's."""
        assert self.zk is not None
        log.info("new ZooKeeper session 0x%x%s", self.zk.client_id[0],
                 "" if self.holds_registration else " (the broker's registration is another session's)")
        if not self.holds_registration or not self._register_until_done(session):
            return
        if self.controller is not None:
            self.controller.put("session_reset")
        if self.on_session_reset is not None:
            self.on_session_reset()

    def _register_until_done(self, session: int) -> bool:
        """True once registered; False when the broker stops or a newer session took over."""
        while not self._closed and session == self._sessions:
            try:
                self.register()
                return True
            except (Exception, BrokerIdInUseError) as exc:
                log.error("registering broker %d again failed (%s); retrying in %.0f s", self.broker_id, exc,
                          REREGISTER_BACKOFF_S)
                time.sleep(REREGISTER_BACKOFF_S)
        return False

    def close(self) -> None:
        self._closed = True
        if self.controller is not None:
            self.controller.stop()
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:
                pass

    # -- identity ------------------------------------------------------------------------------
    def read_meta(self) -> dict[str, str]:
        path = os.path.join(self.log_dir, "meta.properties")
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as fh:
            return parse_properties(fh.read())

    def establish_identity(self, configured_cluster_id: str | None) -> tuple[str, int]:
        """Cluster id from /cluster/id (created if absent), checked against meta.properties;
        broker id from config, meta.properties or /brokers/seqid. Writes meta.properties. The
        holder establishes them and publishes the broker id; another process waits for it."""
        assert self.zk is not None
        if not self.holder:
            return self._await_identity()
        meta = self.read_meta()
        try:
            data, _ = self.zk.get(Z.CLUSTER_ID)
            cluster_id = Z.loads(data)["id"]
        except NoNodeError:
            proposed = configured_cluster_id or meta.get("cluster.id") or \
                base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            try:
                self.zk.create(Z.CLUSTER_ID, Z.cluster_id_json(proposed), makepath=True)
            except NodeExistsError:
                pass
            data, _ = self.zk.get(Z.CLUSTER_ID)
            cluster_id = Z.loads(data)["id"]
        stored = meta.get("cluster.id")
        if stored and stored != cluster_id:
            raise InconsistentClusterIdError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored} in meta.properties "
                f"({self.log_dir}). The broker is trying to join the wrong cluster. Configured zookeeper.connect "
                f"may be wrong.")
        broker_id = int(self.config.get("broker.id") or -1)
        if self.config.get("node.id") is not None:
            broker_id = int(self.config.get("node.id"))
        if broker_id < 0 and meta.get("broker.id"):
            broker_id = int(meta["broker.id"])
        if broker_id < 0:
            if not self.config.get_bool("broker.id.generation.enable"):
                raise SystemExit("broker.id is not set and broker.id.generation.enable is false")
            stat = self.zk.set(Z.BROKER_SEQID, b"", version=-1)
            broker_id = stat.version + int(self.config.get("reserved.broker.max.id") or Z.RESERVED_BROKER_MAX_ID)
        if meta.get("broker.id") and int(meta["broker.id"]) != broker_id:
            raise SystemExit(f"Configured broker.id {broker_id} doesn't match stored broker.id "
                             f"{meta['broker.id']} in meta.properties ({self.log_dir}).")
        if not stored or not meta.get("broker.id"):
            with open(os.path.join(self.log_dir, "meta.properties"), "w", encoding="utf-8") as fh:
                fh.write(f"version=0\ncluster.id={cluster_id}\nbroker.id={broker_id}\n")
        self.cluster_id, self.broker_id = cluster_id, broker_id
        self.placement.set_broker_word(BROKER_ID_WORD, broker_id + 1)
        return cluster_id, broker_id

    def _await_identity(self) -> tuple[str, int]:
        """The broker id the holder published, the cluster id from ZooKeeper."""
        assert self.zk is not None
        deadline = time.monotonic() + IDENTITY_WAIT_S
        while self.placement.broker_word(BROKER_ID_WORD) == 0:
            if time.monotonic() > deadline:
                raise SystemExit("worker 0 did not establish the broker id")
            time.sleep(0.05)
        data, _ = self.zk.get(Z.CLUSTER_ID)
        self.cluster_id = Z.loads(data)["id"]
        self.broker_id = self.placement.broker_word(BROKER_ID_WORD) - 1
        return self.cluster_id, self.broker_id

    def broker_info(self) -> Z.BrokerInfo:
        """Every listener's advertised endpoint and its security protocol (Kafka's v5 JSON)."""
        specs = listener_specs(self.config.props)
        eps = tuple((s.name, *s.endpoint()) for s in specs)
        protocols = tuple((s.name, s.protocol) for s in specs)
        return Z.BrokerInfo(self.broker_id, eps, self.config.get("broker.rack"), protocols)

    def register(self) -> None:
        """Creates `/brokers/ids/<id>` (ephemeral). A registration left by this broker's
        previous, killed process is waited out (it disappears when that session expires)."""
        assert self.zk is not None
        path = Z.broker_path(self.broker_id)
        with self._register_lock:
            deadline = time.monotonic() + self.session_timeout_s * 2 + 5
            while True:
                sent = monotonic_ms()
                try:
                    self.zk.create(path, self.broker_info().to_json(), ephemeral=True, makepath=True)
                    break
                except NodeExistsError:
                    stat = self.zk.exists(path)
                    if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
                        break
                    if time.monotonic() > deadline:
                        raise BrokerIdInUseError(f"broker id {self.broker_id} is registered by another live broker")
                    log.info("waiting for the old registration of broker %d to expire", self.broker_id)
                    time.sleep(0.5)
            stat = self.zk.exists(path)
            self.broker_epoch = stat.czxid if stat else -1
            self.holds_registration = True
            self._extend_lease(sent + self.lease_ms())  # ZooKeeper answered: as a lease read
            self._set_session(connected=True, registered=True)
        self._start_lease()
        log.info("registered broker %d in ZooKeeper (epoch %d)", self.broker_id, self.broker_epoch)

    def reregister(self) -> None:
        """Deletes this broker's registration and makes it again in this session (a new broker
        epoch: the controller treats the broker as restarted and sends it every replica's state)."""
        assert self.zk is not None
        with self._register_lock:
            self._set_session(expired=True)  # the controller deposes the broker: leaderships need confirming again
            try:
                self.zk.delete(Z.broker_path(self.broker_id))
            except NoNodeError:
                pass
            self.register()

    def registration_epoch(self) -> int:
        """The broker epoch (czxid) of `/brokers/ids/<id>` as ZooKeeper has it, -1 when absent."""
        assert self.zk is not None
        stat = self.zk.exists(Z.broker_path(self.broker_id))
        return stat.czxid if stat is not None else -1

    # -- reads used by the admin paths ---------------------------------------------------------
    def live_brokers(self) -> dict[int, str | None]:
        assert self.zk is not None
        out: dict[int, str | None] = {}
        for child in self.zk.get_children(Z.BROKER_IDS):
            try:
                data, _ = self.zk.get(Z.broker_path(int(child)))
            except NoNodeError:
                continue
            out[int(child)] = Z.BrokerInfo.from_json(int(child), data).rack
        return out

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self._read_config(Z.topic_config_path(topic))

    def _read_config(self, path: str) -> dict[str, str]:
        """The "config" of an entity's config znode ({} when there is none)."""
        return self._read_config_at(path)[0]

    def _read_config_at(self, path: str) -> tuple[dict[str, str], int]:
        """The "config" of an entity's config znode and the zxid of its last change (({}, 0)
        when there is none): readers on several threads keep the newest by that zxid."""
        assert self.zk is not None
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return {}, 0
        return Z.parse_entity_config(data), stat.mzxid

    def topic_assignment(self, topic: str) -> tuple[bytes | None, dict[int, list[int]], int] | None:
        assert self.zk is not None
        try:
            data, stat = self.zk.get(Z.topic_path(topic))
        except NoNodeError:
            return None
        tid, assignment = Z.parse_topic_assignment(data)
        return tid, assignment, stat.version

    def broker_configs(self, scope: str) -> dict[str, str]:
        """The dynamic broker configs of `scope` ("" cluster-wide, else a broker id) in ZooKeeper."""
        return self._read_config(Z.broker_config_path(scope))

    def broker_configs_at(self, scope: str) -> tuple[dict[str, str], int]:
        """`broker_configs` with the zxid of the entry's last change."""
        return self._read_config_at(Z.broker_config_path(scope))

    def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        self.write_config(Z.broker_config_path(scope), configs, "brokers", Z.broker_config_entity(scope))

    def client_quotas(self) -> dict[tuple, dict[str, float]]:
        """Every client-quota entity with its values, from /config/users (and each user's
        /clients), /config/clients and /config/ips; entities without values left out."""
        assert self.zk is not None
        paths = []
        for root in ("users", "clients", "ips"):
            try:
                names = self.zk.get_children(f"/config/{root}")
            except NoNodeError:
                continue
            for name in names:
                paths.append(f"{root}/{name}")
                if root == "users":
                    try:
                        paths += [f"users/{name}/clients/{c}" for c in self.zk.get_children(f"/config/users/{name}/clients")]
                    except NoNodeError:
                        pass
        out = {}
        for path in paths:
            values, _ = self._read_config_at(f"/config/{path}")
            if values:
                try:
                    out[Z.quota_entity_of(path)] = {k: float(v) for k, v in values.items()}
                except (KeyError, ValueError):
                    log.warning("client quota %s not understood: %r", path, values)
        return out

    def set_client_quota(self, entity: tuple, values: dict[str, float]) -> None:
        """One entity's quota values (all of them: an empty dict clears it), with a change notification."""
        path = Z.quota_entity_path(entity)
        root, _, name = path.partition("/")
        self.write_config(f"/config/{path}", {k: repr(float(v)) for k, v in values.items()}, root, name)

    def group_configs_at(self, group_id: str) -> tuple[dict[str, str], int]:
        """A group's configs in /config/groups with the zxid of the entry's last change."""
        return self._read_config_at(Z.group_config_path(group_id))

    def groups_with_configs(self) -> list[str]:
        """The ids of the groups with an entry in /config/groups."""
        assert self.zk is not None
        try:
            return [Z.group_of_config_entity(n) for n in self.zk.get_children(Z.CONFIG_GROUPS)]
        except NoNodeError:
            return []

    def change_group_configs(self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """A group's configs replaced by `change` of them, written at the znode's version (read and
        changed again after another broker's write), then announced."""
        assert self.zk is not None
        path = Z.group_config_path(group_id)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, Z.entity_config_json(change({})), makepath=True)
                    break
                except NodeExistsError:
                    continue
            try:
                self.zk.set(path, Z.entity_config_json(change(Z.parse_entity_config(data))), version=stat.version)
                break
            except (BadVersionError, NoNodeError):
                continue
        self._announce_config_change("groups", Z.group_config_entity(group_id))

    def write_config(self, path: str, configs: dict[str, str], entity_type: str, name: str) -> None:
        """Kafka's `AdminZkClient.changeEntityConfig`: the entity's whole config, then a
        sequential change notification naming it, which every broker's watch picks up."""
        assert self.zk is not None
        try:
            self.zk.set(path, Z.entity_config_json(configs))
        except NoNodeError:
            try:
                self.zk.create(path, Z.entity_config_json(configs), makepath=True)
            except NodeExistsError:
                self.zk.set(path, Z.entity_config_json(configs))
        self._announce_config_change(entity_type, name)

    def _announce_config_change(self, entity_type: str, name: str) -> None:
        assert self.zk is not None
        self.zk.create(f"{Z.CONFIG_CHANGES}/config_change_", Z.config_change_json(name, entity_type), sequence=True,
                       makepath=True)

    # -- producer ids (unique across the cluster) ----------------------------------------------
    def next_producer_id(self) -> int:
        with self._pid_lock:
            if self._pid_next >= self._pid_end:
                self._reserve_producer_ids()
            pid = self._pid_next
            self._pid_next += 1
            return pid

    def _reserve_producer_ids(self) -> None:
        assert self.zk is not None
        while True:
            try:
                data, stat = self.zk.get(Z.PRODUCER_ID_BLOCK)
                doc = Z.loads(data)
                start = int(doc["block_end"]) + 1 if doc else 0
                version = stat.version
            except NoNodeError:
                try:
                    self.zk.create(Z.PRODUCER_ID_BLOCK, b"")
                except NodeExistsError:
                    pass
                continue
            end = start + Z.PRODUCER_ID_BLOCK_SIZE - 1
            try:
                self.zk.set(Z.PRODUCER_ID_BLOCK, Z.producer_id_block_json(self.broker_id, start, end), version=version)
            except BadVersionError:
                continue
            self._pid_next, self._pid_end = start, end + 1
            return


class ZkProducerIds:
    """The broker's `producer_ids` in cluster mode (same interface as ProducerIdAllocator)."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node

    def next_id(self) -> int:
        return self.node.next_producer_id()
