"""Group configs in cluster mode, where Kafka's ZooKeeper mode keeps an entity's configs:
`/config/groups/<group id>` (URL-encoded) {"version":1,"config":{...}}, announced by a
`/config/changes` notification {"version":2,"entity_path":"groups/<group id>"}.

`ZkGroupConfigs` is `broker.share.configs` in cluster mode (`ZkControl.make_share_coordinator`),
beside `broker/share/group_configs.py`'s file store of the single node, with the same checks. Any broker takes
IncrementalAlterConfigs for any group: it writes the group's entry at the znode's version (read
and changed again after another broker's write, so two brokers changing one group at once lose
neither change), announces it and reads it back, so the change is in force there when the
client hears of it. Every broker (every worker of a multi-worker broker, on its own kazoo
session) holds every group's entry in memory, for the group coordinator (session timeout,
heartbeat interval) and the share-partitions it leads (auto offset reset, isolation level,
lock duration, delivery count limit): all read in `attach` when the broker starts, one read
again when a change notification names it (`ZkControl._reload_configs`), and before a new
share-partition starts where share.auto.offset.reset says (`refresh`: a client that altered it
through another broker and subscribed at once may reach the partition leader before the
notification does; Kafka's group coordinator initialises a new share-partition's state before it
assigns the partition, which leaves a change time to arrive).

Reads of one entry may run at once on different threads (a notification's, the writer's), so
an entry is replaced under a lock and only by a read of a newer ZooKeeper version of it (the
znode's mzxid), as `dynamic_configs.py` does.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any

from kafkafast.broker.share.group_configs import GroupConfigs, changed


class ZkGroupConfigs(GroupConfigs):
    def __init__(self, broker_config: Any) -> None:
        super().__init__(broker_config)
        self.node: Any = None  # the ClusterNode, from attach on
        self._groups: dict[str, dict[str, str]] = {}  # group id -> its own configs
        self._zxids: dict[str, int] = {}  # group id -> mzxid of its entry in _groups
        self._lock = threading.Lock()

    def attach(self, node: Any) -> None:
        """Reads every group's entry (a thread: ZooKeeper calls)."""
        self.node = node
        for group_id in node.groups_with_configs():
            self.reload(group_id)

    def reload(self, group_id: str) -> None:
        """Re-reads one group's entry (a thread)."""
        configs, zxid = self.node.group_configs_at(group_id)
        with self._lock:
            if zxid >= self._zxids.get(group_id, -1):
                self._zxids[group_id] = zxid
                if configs:
                    self._groups[group_id] = configs
                else:
                    self._groups.pop(group_id, None)

    def of(self, group_id: str) -> dict[str, str]:
        return dict(self._groups.get(group_id, {}))

    async def refresh(self, group_id: str) -> None:
        """The entry read from ZooKeeper now: a change written through another broker, whose
        answer the client may already have, is announced here some milliseconds later."""
        await asyncio.to_thread(self.reload, group_id)

    async def write(self, group_id: str, ops: list[tuple[str, int, str | None]]) -> None:
        await asyncio.to_thread(self._write, group_id, ops)

    def _write(self, group_id: str, ops: list[tuple[str, int, str | None]]) -> None:
        self.node.change_group_configs(group_id, lambda configs: changed(configs, ops))
        self.reload(group_id)
