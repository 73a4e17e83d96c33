"""Dynamic configs of a single-node broker: broker configs Kafka lets AlterConfigs /
IncrementalAlterConfigs change at run time, and client quotas (AlterClientQuotas).

They live in `<first log dir>/__kafkafast_dynamic_configs.json`:

    {"brokers": {"": {cluster-wide defaults}, "<node id>": {this broker's}},
     "quotas": [{"entity": [["user", "alice"], ["client-id", null]], "values": {"producer_byte_rate": 1048576.0}}]}

(a null entity name is the entity type's default). Writes replace the file atomically under
a flock of `<file>.lock` (several workers write). With several workers the writer then adds
1 to the configs generation in the shared counters area (`runtime/shared_counters.py`),
which every worker compares on each `refresh`: a change (a quota set by AlterClientQuotas on
one worker) applies on every worker from its next request on, not up to RELOAD_INTERVAL
later, during which a new quota's client would run unmeasured. Besides that, every process
re-reads the file when its mtime, size or inode changed, checked at most every
RELOAD_INTERVAL seconds (an edit by hand).

Dynamic broker configs are the log-level defaults (`kafkafast.config.TOPIC_SYNONYMS`: the
configs Kafka's DynamicLogConfig reconfigures), the connection quotas (CONNECTION_CONFIGS,
Kafka's DynamicConnectionQuota) and the log cleaner's backoff, I/O rate and offset map bound
(CLEANER_CONFIGS); and, per broker and listener, the TLS key and trust stores
(`security/tls.py`: STORE_CONFIGS with the `listener.name.<listener>.` prefix).
They override the properties file, the broker's own over the cluster-wide default. The log
defaults apply to every topic without an override of its own, the connection quotas and the
stores to connections accepted from then on, the cleaner's to its next look for a log and its
next read or write, as soon as a process sees them (`Broker.apply_dynamic_configs`, which runs
whenever `version` moved).
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any, Callable

from kafkafast.config import TOPIC_SYNONYMS
from kafkafast.protocol import errors as E
from kafkafast.security.tls import STORE_CONFIGS, listener_store_config, reconfigured_context, with_dynamic_stores
from kafkafast.storage.cleaner import MAP_ENTRY_BYTES
from kafkafast.storage.config import LogConfig

STORE_FILE = "__kafkafast_dynamic_configs.json"
RELOAD_INTERVAL = 0.5
# Connection quotas Kafka's DynamicConnectionQuota reconfigures (`runtime/limits.py` takes them).
CONNECTION_CONFIGS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})
# The log cleaner's settings Kafka's LogCleaner reconfigures that ours applies (`storage/cleaner.py`;
# it runs one cleaner thread and reads whole batches, so not log.cleaner.threads nor the I/O buffers).
CLEANER_CONFIGS = frozenset({"log.cleaner.backoff.ms", "log.cleaner.io.max.bytes.per.second",
                             "log.cleaner.dedupe.buffer.size"})
DYNAMIC_BROKER_CONFIGS = frozenset(TOPIC_SYNONYMS) | CONNECTION_CONFIGS | CLEANER_CONFIGS  # + ACCEPTED_WITHOUT_USE
# Configs Kafka reconfigures at run time whose subject kafkafast's process model does not have
# (a config that changed nothing would be worse than a refusal): the refusal says why.
_POOLS = ("kafkafast has no request-handler, network or background thread pools to resize: each worker "
          "process serves its connections on one event loop, and the number of workers is fixed at start")
NO_COUNTERPART = {
    "num.io.threads": _POOLS, "num.network.threads": _POOLS, "background.threads": _POOLS,
    "num.replica.fetchers": "the replica fetchers of a broker are set up at start",
    "num.recovery.threads.per.data.dir": "logs are recovered by the starting process, not a thread pool",
    "log.cleaner.threads": "the log cleaner is one thread per broker",
    "log.cleaner.io.buffer.size": "the cleaner's buffers are sized by the batches it reads",
    "log.cleaner.io.buffer.load.factor": "the cleaner's offset map is bounded by log.cleaner.dedupe.buffer.size",
    "listeners": "listeners are bound at start (the workers share their sockets)",
    "advertised.listeners": "listeners are bound at start (the workers share their sockets)",
    "listener.security.protocol.map": "listeners are bound at start (the workers share their sockets)",
    "metric.reporters": "metrics are exported by the Prometheus endpoint, not reporter classes",
}

LONG_MAX = 2**63 - 1
_NUMBER_TYPES: dict[str, tuple[type, float, float]] = {
    "SHORT": (int, -2**15, 2**15 - 1), "INT": (int, -2**31, 2**31 - 1), "LONG": (int, -LONG_MAX - 1, LONG_MAX),
    "DOUBLE": (float, float("-inf"), float("inf")),
}
# Dynamic broker configs Kafka accepts whose subject kafkafast does not have: Kerberos (no GSSAPI),
# the broker's own SASL login refresh (it logs in nowhere: SASL is served, not used), tiered storage
# (no remote log). Kafka accepts them (DynamicListenerConfig, DynamicRemoteLogConfig), so clients and
# tools that alter them (librdkafka's 0081_admin alters sasl.kerberos.min.time.before.relogin) must
# not fail; accepted, checked as Kafka's ConfigDef checks them, stored and described, and nothing
# reads them: none of them would change a behaviour that runs here.
# name -> (Kafka's default, Kafka's type, the least and most value of a number or None).
ACCEPTED_WITHOUT_USE: dict[str, tuple[str | None, str, float | None, float | None]] = {
    "sasl.kerberos.service.name": (None, "STRING", None, None),
    "sasl.kerberos.kinit.cmd": ("/usr/bin/kinit", "STRING", None, None),
    "sasl.kerberos.ticket.renew.window.factor": ("0.8", "DOUBLE", None, None),
    "sasl.kerberos.ticket.renew.jitter": ("0.05", "DOUBLE", None, None),
    "sasl.kerberos.min.time.before.relogin": ("60000", "LONG", None, None),
    "sasl.kerberos.principal.to.local.rules": ("DEFAULT", "LIST", None, None),
    "sasl.login.refresh.window.factor": ("0.8", "DOUBLE", 0.5, 1.0),
    "sasl.login.refresh.window.jitter": ("0.05", "DOUBLE", 0.0, 0.25),
    "sasl.login.refresh.min.period.seconds": ("60", "SHORT", 0, 900),
    "sasl.login.refresh.buffer.seconds": ("300", "SHORT", 0, 3600),
    "remote.log.index.file.cache.total.size.bytes": ("1073741824", "LONG", 1, None),
    "remote.fetch.max.wait.ms": ("500", "INT", 1, None),
    "remote.log.manager.copy.max.bytes.per.second": (str(LONG_MAX), "LONG", 1, None),
    "remote.log.manager.fetch.max.bytes.per.second": (str(LONG_MAX), "LONG", 1, None),
}


def _check_accepted_without_use(name: str, value: str) -> None:
    """InvalidConfigError with Kafka's ConfigDef words for a value of the wrong type or range."""
    _, kind, least, most = ACCEPTED_WITHOUT_USE[name]
    if kind not in _NUMBER_TYPES:
        return
    parse, low, high = _NUMBER_TYPES[kind]
    try:
        number = parse(value.strip())
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        why = f"Not a number of type {kind}"
    elif least is not None and number < least:
        why = f"Value must be at least {least}"
    elif most is not None and number > most:
        why = f"Value must be no more than {most}"
    else:
        return
    raise E.InvalidConfigError(f"Invalid value {value} for configuration {name}: {why}")


# As Kafka's listener configs (DynamicBrokerConfig.PerBrokerConfigs): set per broker, not cluster-wide.
PER_BROKER_ONLY = frozenset(n for n in ACCEPTED_WITHOUT_USE if n.startswith("sasl."))

USER, CLIENT_ID, IP = "user", "client-id", "ip"
# Quota keys Kafka accepts for each entity kind (ip: connection rate only).
CLIENT_QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage",
                               "controller_mutation_rate"})
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})

Entity = tuple[tuple[str, "str | None"], ...]


class DynamicConfigs:
    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, STORE_FILE)
        self._data: dict[str, Any] = {"brokers": {}, "quotas": []}
        self._stamp: tuple | None = None
        self._checked = 0.0
        self._shared: Any = None  # SharedCounters of a multi-worker broker (share_generation)
        self._generation = 0
        self.version = 0  # +1 on every reload: a reader compares it with the version it applied

    def share_generation(self, counters: Any) -> None:
        """Re-read the file whenever another worker rewrote it (`counters.configs_generation`)."""
        self._shared = counters
        self._generation = counters.configs_generation()
        self.refresh(force=True)  # after reading the generation: a write in between is not missed

    # -- the file ------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> bool:
        """Re-reads the file if it changed; True when it did."""
        now = time.monotonic()
        if self._shared is not None:
            generation = self._shared.configs_generation()  # read before the file: never misses a change
            if generation != self._generation:
                self._generation, force = generation, True
        if not force and now - self._checked < RELOAD_INTERVAL:
            return False
        self._checked = now
        try:
            st = os.stat(self.path)
            stamp: tuple | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return False
        data: dict[str, Any] = {"brokers": {}, "quotas": []}
        if stamp is not None:
            with open(self.path, encoding="utf-8") as fh:
                data.update(json.load(fh))
        self._data, self._stamp = data, stamp
        self.version += 1
        return True

    def _rewrite(self, change: Callable[[dict[str, Any]], None]) -> None:
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.refresh(force=True)
            data = json.loads(json.dumps(self._data))
            change(data)
            tmp = f"{self.path}.tmp{os.getpid()}"
            # owner-only: it may hold a key store's password (security/tls.py: STORE_CONFIGS)
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
                json.dump(data, fh, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            if self._shared is not None:
                self._shared.configs_changed()
            self.refresh(force=True)

    # -- broker configs ------------------------------------------------------------------
    def broker_configs(self, scope: str) -> dict[str, str]:
        """The dynamic configs of `scope`: "" (cluster-wide default) or a node id."""
        self.refresh()
        return dict(self._data["brokers"].get(scope, {}))

    def stored_broker_configs(self, scope: str) -> dict[str, str]:
        """The configs of `scope` as stored now (what a read-modify-write starts from)."""
        self.refresh(force=True)
        return self.broker_configs(scope)

    def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        def change(data: dict[str, Any]) -> None:
            if configs:
                data["brokers"][scope] = dict(configs)
            else:
                data["brokers"].pop(scope, None)

        self._rewrite(change)

    # -- client quotas -------------------------------------------------------------------
    def quota_stamp(self) -> object:
        """Changes whenever the quotas may have (QuotaManager re-reads them then)."""
        self.refresh()
        return self._stamp

    def quotas(self) -> dict[Entity, dict[str, float]]:
        self.refresh()
        return {tuple((t, n) for t, n in q["entity"]): dict(q["values"]) for q in self._data["quotas"]}

    def alter_quotas(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        """Sets (a float) or removes (None) quota values per entity."""
        def change(data: dict[str, Any]) -> None:
            current = {tuple((t, n) for t, n in q["entity"]): dict(q["values"]) for q in data["quotas"]}
            for entity, ops in changes:
                values = with_quota_ops(current.pop(entity, {}), ops)
                if values:
                    current[entity] = values
            data["quotas"] = [{"entity": [list(c) for c in e], "values": v} for e, v in sorted(
                current.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])]

        self._rewrite(change)


def with_quota_ops(values: dict[str, float], ops: dict[str, float | None]) -> dict[str, float]:
    """An entity's quota values after AlterClientQuotas' ops (a float sets, None removes), in
    either store (this file, or ZooKeeper: cluster/dynamic_configs.py)."""
    out = dict(values)
    for key, value in ops.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def parse_overrides(text: str | None) -> dict[str, int]:
    """max.connections.per.ip.overrides (`host:count,...`) as {host: count}; ValueError when malformed."""
    out = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: bad entry {item!r} (expected host:count)")
        out[host.strip()] = int(count)
    return out


def check_quota_entity(entity: Entity, ops: dict[str, float | None]) -> None:
    """InvalidRequestError for entity combinations and keys Kafka refuses."""
    types = [t for t, _ in entity]
    if len(set(types)) != len(types) or not types:
        raise E.InvalidRequestError(f"invalid quota entity {entity}")
    if set(types) not in ({USER}, {CLIENT_ID}, {USER, CLIENT_ID}, {IP}):
        raise E.InvalidRequestError(f"invalid quota entity combination {sorted(types)}")
    allowed = IP_QUOTA_KEYS if types == [IP] else CLIENT_QUOTA_KEYS
    for key, value in ops.items():
        if key not in allowed:
            raise E.InvalidRequestError(f"invalid configuration key {key} for entity {sorted(types)}")
        if value is not None and value <= 0:
            raise E.InvalidRequestError(f"quota {key} must be positive, not {value}")


def is_dynamic_broker_config(name: str) -> bool:
    return (name in DYNAMIC_BROKER_CONFIGS or name in ACCEPTED_WITHOUT_USE
            or listener_store_config(name) is not None)


def check_listener_stores(broker: Any, scope: str, configs: dict[str, str]) -> None:
    """The TLS key and trust stores of `configs`, the new dynamic configs of `scope`, checked
    as Kafka checks them: per listener (`listener.name.<l>.`), per broker, for a TLS listener
    of this broker, and loadable as a replacement of what the listener serves now
    (`security/tls.py: reconfigured_context`)."""
    bare = sorted(n for n in configs if n in STORE_CONFIGS)
    if bare:
        raise E.InvalidRequestError("These security configs can be dynamically updated only per-listener using the "
                                    f"listener prefix: {set(bare)}")
    named = {n: listener_store_config(n) for n in configs}
    named = {n: p for n, p in named.items() if p is not None}
    if named and scope == "":
        raise E.InvalidRequestError("Cannot update these configs at default cluster level, broker id must be "
                                    f"specified: {set(sorted(named))}")
    if scope != str(broker.node_id):  # cluster mode: another broker's resource
        stored = broker.dynamic.broker_configs(scope)
        changed = sorted(n for n in set(named) | {n for n in stored if listener_store_config(n)}
                         if configs.get(n) != stored.get(n))
        if changed:  # as Kafka: only the broker whose listeners serve them can check them
            raise E.InvalidRequestError(f"The key and trust stores of broker {scope} are altered on broker {scope}: "
                                        f"{set(changed)}")
        return
    specs = {s.name: s for s in getattr(broker, "listener_specs", []) if s.tls}
    for name, (listener, _) in sorted(named.items()):
        if listener not in specs:
            raise E.InvalidRequestError(f"{name}: {listener} is not an SSL or SASL_SSL listener of this broker")
    current = broker.dynamic_broker_configs()
    proposed = {**broker.dynamic.broker_configs(""), **configs}
    for spec in specs.values():
        old, new = with_dynamic_stores(spec, current), with_dynamic_stores(spec, proposed)
        if old.props != new.props or any(p[0] == spec.name for p in named.values()):
            try:
                reconfigured_context(old, new)
            except ValueError as exc:
                raise E.InvalidConfigError(str(exc)) from None


def check_dynamic_broker_configs(configs: dict[str, str], scope: str) -> None:
    """InvalidRequestError naming what cannot be changed at run time (or not cluster-wide: scope
    ""), InvalidConfigError for a bad value (a log default checked as the topic config it is the
    default of)."""
    static = sorted(n for n in configs if not is_dynamic_broker_config(n) and n not in STORE_CONFIGS)
    if static:
        why = sorted({NO_COUNTERPART[n] for n in static if n in NO_COUNTERPART})
        raise E.InvalidRequestError(f"Cannot update these configs dynamically: {set(static)}"
                                    + "".join(f"; {w}" for w in why))
    per_broker = sorted(n for n in configs if n in PER_BROKER_ONLY)
    if per_broker and scope == "":
        raise E.InvalidRequestError("Cannot update these configs at default cluster level, broker id must be "
                                    f"specified: {set(per_broker)}")
    for name in sorted(configs.keys() & ACCEPTED_WITHOUT_USE.keys()):
        _check_accepted_without_use(name, configs[name])
    for name in ("max.connections", "max.connections.per.ip"):
        if name in configs:
            value = configs[name].strip()
            if not value.isdigit() or int(value) > 2**31 - 1:
                raise E.InvalidConfigError(f"Invalid value {configs[name]} for configuration {name}: "
                                           "an int of at least 0")
    for name, least in (("log.cleaner.backoff.ms", 0), ("log.cleaner.dedupe.buffer.size", MAP_ENTRY_BYTES)):
        if name in configs:
            value = configs[name].strip()
            if not value.isdigit() or not least <= int(value) <= 2**63 - 1:
                raise E.InvalidConfigError(f"Invalid value {configs[name]} for configuration {name}: "
                                           f"a long of at least {least}")
    if "log.cleaner.io.max.bytes.per.second" in configs:
        value = configs["log.cleaner.io.max.bytes.per.second"]
        if cleaner_io_rate(value) is None:
            raise E.InvalidConfigError(f"Invalid value {value} for configuration "
                                       "log.cleaner.io.max.bytes.per.second: a positive double")
    if "max.connections.per.ip.overrides" in configs:
        try:
            parse_overrides(configs["max.connections.per.ip.overrides"])
        except ValueError as exc:
            raise E.InvalidConfigError(str(exc)) from None
    LogConfig.from_props({TOPIC_SYNONYMS[n]: v for n, v in configs.items() if n in TOPIC_SYNONYMS})


def cleaner_io_rate(value: str) -> float | None:
    """log.cleaner.io.max.bytes.per.second as bytes per second (inf: Kafka's Double.MaxValue
    default, unthrottled); None when it is not a positive number."""
    try:
        rate = float(value)
    except ValueError:
        return None
    if not rate > 0:
        return None
    return float("inf") if rate >= 1.7976931348623157e308 else rate
