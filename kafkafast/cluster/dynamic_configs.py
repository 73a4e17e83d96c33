"""Dynamic broker configs in cluster mode, where Kafka's ZooKeeper mode keeps them:
`/config/brokers/<id>` (one broker's) and `/config/brokers/<default>` (the cluster-wide
defaults), each {"version":1,"config":{...}}, announced by a `/config/changes` notification
{"version":2,"entity_path":"brokers/<id>"} (or "brokers/<default>").

`ZkDynamicConfigs` is `broker.dynamic` in cluster mode (`ZkControl.make_dynamic_configs`):
`DynamicConfigs`' interface (the single node's store, a file in the log dir) over ZooKeeper, for the broker configs and
the client quotas (/config/users, /config/clients, /config/ips); what checks and applies them is
the same in both modes (the AlterConfigs/AlterClientQuotas handlers, `Broker.apply_dynamic_configs`,
`broker/quotas.py`). Any broker writes any live broker's entry (AlterConfigs / IncrementalAlterConfigs);
each broker (each worker of a multi-worker broker, on its own kazoo session) keeps its own
entry and the default in memory: read in `attach` when the broker loads, before its logs
open, and again in `reload` when a change notification names one of them
(`ZkControl._reload_configs`), after which the broker applies them as the single node
does (`Broker.refresh_dynamic`: topic defaults, connection quotas).

Reads of different entries run at once on different threads (one per change notification,
and the write path on the loop), so an entry is replaced under a lock and only by a read of a
newer ZooKeeper version of it (the znode's mzxid): a slow read of one entry never takes back
another entry's change, nor a later change of its own.
"""
from __future__ import annotations

import threading
from typing import Any

from kafkafast.broker.dynamic_configs import DynamicConfigs, with_quota_ops
from kafkafast.cluster import zk_data as Z


class ZkDynamicConfigs(DynamicConfigs):
    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self.node: Any = None  # the ClusterNode, from attach on
        self.node_id = -1
        self._brokers: dict[str, dict[str, str]] = {}  # scope ("" or this node id) -> configs
        self._zxids: dict[str, int] = {}  # scope -> mzxid of the entry in _brokers
        self._lock = threading.Lock()
        self._quotas: dict[tuple, dict[str, float]] = {}
        self._quota_version = 0

    def attach(self, node: Any, node_id: int) -> None:
        """Reads this broker's entry, the cluster-wide one and the client quotas (a thread:
        ZooKeeper calls)."""
        self.node, self.node_id = node, node_id
        for scope in self.scopes():
            self.reload(scope)
        self.reload_quotas()

    # -- client quotas: /config/users, /config/clients, /config/ips (Kafka's ZooKeeper layout) --

    @staticmethod
    def is_quota_entity(entity: str) -> bool:
        return entity.startswith(("users/", "clients/", "ips/"))

    def reload_quotas(self) -> None:
        """Re-reads every client quota (a thread); then `loaded` on the loop."""
        quotas = self.node.client_quotas()
        with self._lock:
            self._quotas = quotas
            self._quota_version += 1

    def quota_stamp(self) -> object:
        return self._quota_version

    def quotas(self) -> dict[tuple, dict[str, float]]:
        return dict(self._quotas)

    def alter_quotas(self, changes: list[tuple[tuple, dict[str, float | None]]]) -> None:
        """Each entity's values read back from ZooKeeper, changed and written whole (with a change
        notification every broker takes), then read again here (a thread)."""
        current = self.node.client_quotas()
        for entity, ops in changes:
            entity = tuple(sorted(entity))
            values = next((v for e, v in current.items() if tuple(sorted(e)) == entity), {})
            self.node.set_client_quota(entity, with_quota_ops(values, ops))
        self.reload_quotas()

    def scopes(self) -> tuple[str, str]:
        return "", str(self.node_id)

    def entity_scope(self, entity: str) -> str | None:
        """The scope a change notification's "brokers/<name>" names, if it is one this broker
        keeps (None: another broker's entry)."""
        name = entity[len("brokers/"):] if entity.startswith("brokers/") else None
        scope = "" if name == Z.DEFAULT_ENTITY else name
        return scope if scope in self.scopes() else None

    def reload(self, scope: str) -> None:
        """Re-reads one entry (a thread); the caller, on the event loop, then moves `version`
        (`loaded`) so that the broker applies it."""
        configs, zxid = self.node.broker_configs_at(scope)
        with self._lock:
            if zxid >= self._zxids.get(scope, -1):
                self._brokers = {**self._brokers, scope: configs}  # replaced whole: readers on other threads
                self._zxids[scope] = zxid

    def loaded(self) -> None:
        self.version += 1

    def broker_configs(self, scope: str) -> dict[str, str]:
        return dict(self._brokers.get(scope, {}))

    def stored_broker_configs(self, scope: str) -> dict[str, str]:
        return self.node.broker_configs(scope)

    def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        self.node.set_broker_configs(scope, configs)
        if scope in self.scopes():  # in force here at once (read back with its version)
            self.reload(scope)
            self.loaded()
