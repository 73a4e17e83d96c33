"""The share group side of a broker: share groups (`groups.py`), the share-partitions of the
partitions this process leads (`manager.py`), their state store and the group configs
(`group_configs.py`).

Where the state lives: share group membership beside the group coordinator's groups (same
placement: the group's `__consumer_offsets` partition), share-partition state in the process
that appends to the partition (its owner worker; in one process, here), persisted in
`__share_group_state` by the state store (`state_store.py`).
"""
from __future__ import annotations

import asyncio
from typing import Any

from kafkafast.broker.share.group_configs import FileGroupConfigs, GroupConfigs
from kafkafast.broker.share.groups import ShareGroups
from kafkafast.broker.share.manager import SharePartitionManager
from kafkafast.broker.share.state_store import ShareStateStore
from kafkafast.protocol import errors as E


class ShareCoordinator:
    def __init__(self, broker: Any, store: ShareStateStore | None = None, configs: GroupConfigs | None = None) -> None:
        self.broker = broker
        # cluster mode brings its own state store and group configs
        self.configs = configs if configs is not None else FileGroupConfigs(broker.log_dirs[0], broker.config)
        self.store = store if store is not None else ShareStateStore(broker)
        self.partitions = SharePartitionManager(broker, self.store, self.configs.get, self.configs.refresh)
        self.groups = ShareGroups(broker, self.partitions.member_gone, self.configs.get)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.groups.start(loop)
        self.partitions.start(loop)
        await self.store.start()

    async def stop(self) -> None:
        self.groups.stop()
        self.partitions.stop()
        await self.store.stop()

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group, as Kafka's group coordinator does it: an empty group's
        share-partition state is deleted at every share coordinator first, then the group goes
        (kept when the state could not be deleted: that error is the answer)."""
        err = self.groups.deletable(group_id)
        if err:
            return err
        try:
            await self.store.delete_group(group_id)
        except E.KafkaError as exc:
            return exc.code
        err = self.groups.delete(group_id)  # (a member may have joined meanwhile: NON_EMPTY_GROUP)
        if not err:
            self.partitions.forget_group(group_id)
        return err

    def forget_share_partition(self, group_id: str, topic_id: bytes, partition: int) -> None:
        """The stored state changed under the share-partition (the share coordinator APIs): it is loaded again."""
        meta = self.broker.topics.by_id.get(topic_id)
        if meta is not None:
            self.partitions.partitions.pop((group_id, meta.name, partition), None)
