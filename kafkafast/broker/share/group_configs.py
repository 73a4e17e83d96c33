"""Group configs (resource type GROUP in IncrementalAlterConfigs / DescribeConfigs), the ones
Kafka 4.2 defines for the group types kafkafast serves: consumer.session.timeout.ms and
consumer.heartbeat.interval.ms (a KIP-848 consumer group's, over group.consumer.*), and
share.auto.offset.reset (latest, earliest, by_duration:<ISO-8601 duration>), share.isolation.level
(read_uncommitted, read_committed), share.record.lock.duration.ms, share.delivery.count.limit,
share.session.timeout.ms and share.heartbeat.interval.ms. A number must lie within the broker's
group.<type>.min.* and .max.* bounds, and a group's heartbeat interval (its own or the broker's)
must stay below its session timeout, as Kafka's GroupConfig checks them (INVALID_CONFIG).

`GroupConfigs` checks a change (INVALID_CONFIG, INVALID_REQUEST) and answers the values in
effect; where they are kept is the store's, chosen by the broker class:
- `FileGroupConfigs` (a single node, and each of its workers):
  `<first log dir>/__kafkafast_group_configs.json`, {group id: {name: value}}, replaced
  atomically (write to a temporary file, rename) under an flock of `.lock` beside it, and
  re-read by every process when its modification time changed, so every worker of a broker sees
  a change at its next request.
- `ZkGroupConfigs` (`cluster/group_configs.py`): ZooKeeper's `/config/groups/<group id>`, read
  by every broker of the cluster.
"""
from __future__ import annotations

import fcntl
import json
import os
from abc import ABC, abstractmethod
from typing import Any

from kafkafast.broker.share.manager import duration_ms
from kafkafast.protocol import errors as E

FILE = "__kafkafast_group_configs.json"
RESOURCE_GROUP = 32
NAMES = ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms",
         "share.auto.offset.reset", "share.isolation.level", "share.record.lock.duration.ms",
         "share.delivery.count.limit", "share.session.timeout.ms", "share.heartbeat.interval.ms")
# the broker config each group config overrides; the other two default to Kafka's values
BROKER_DEFAULTS = {"consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
                   "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
                   "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
                   "share.delivery.count.limit": "group.share.delivery.count.limit",
                   "share.session.timeout.ms": "group.share.session.timeout.ms",
                   "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms"}
DEFAULTS = {"share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted"}


def _validate(name: str, value: str, cfg: Any) -> None:
    if name == "share.auto.offset.reset":
        v = value.strip().lower()
        if v in ("latest", "earliest") or (v.startswith("by_duration:") and duration_ms(v.split(":", 1)[1]) is not None):
            return
        raise E.InvalidConfigError(f"Invalid value {value} for configuration share.auto.offset.reset")
    if name == "share.isolation.level":
        if value.strip().lower() in ("read_uncommitted", "read_committed"):
            return
        raise E.InvalidConfigError(f"Invalid value {value} for configuration share.isolation.level")
    if name not in BROKER_DEFAULTS:
        raise E.InvalidConfigError(f"Unknown group config name: {name}")
    try:
        n = int(value)
    except ValueError:
        raise E.InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    kind, setting = name.split(".", 1)  # consumer / share, and the setting bounded by the broker's
    lo, hi = cfg.get_int(f"group.{kind}.min.{setting}"), cfg.get_int(f"group.{kind}.max.{setting}")
    if not lo <= n <= hi:
        raise E.InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                   f"Value must be in the range [{lo}, {hi}]")


def changed(configs: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    """A group's configs after `ops` (already checked)."""
    out = dict(configs)
    for name, op, value in ops:
        if op == 0:
            out[name] = value or ""
        else:
            out.pop(name, None)
    return out


class GroupConfigs(ABC):
    """The checks and the values in effect; a store keeps them (`of`, `write`)."""

    def __init__(self, broker_config: Any) -> None:
        self.cfg = broker_config

    @abstractmethod
    def of(self, group_id: str) -> dict[str, str]:
        """The group's own configs (not the defaults)."""

    @abstractmethod
    async def write(self, group_id: str, ops: list[tuple[str, int, str | None]]) -> None:
        """Keeps checked `ops`, in force here when it returns."""

    def get(self, group_id: str, name: str) -> str | None:
        return self.of(group_id).get(name)

    async def refresh(self, group_id: str) -> None:
        """Brings the group's entry up to date with the store, before a decision that lasts (where
        a new share-partition starts). Nothing to do here: `of` reads the file when it changed."""

    def default(self, name: str) -> str:
        """A group config's value where the group has none of its own."""
        return str(self.cfg.get_int(BROKER_DEFAULTS[name])) if name in BROKER_DEFAULTS else DEFAULTS[name]

    def effective(self, group_id: str) -> list[tuple[str, str, bool]]:
        """(name, value, the group's own) of every group config: DescribeConfigs."""
        own = self.of(group_id)
        return [(name, own[name], True) if name in own else (name, self.default(name), False) for name in NAMES]

    async def alter(self, group_id: str, ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
        """IncrementalAlterConfigs operations (name, op: 0 set, 1 delete, value) on one group."""
        if not group_id:
            raise E.InvalidRequestError("Default group resources are not allowed.")
        for name, op, value in ops:
            if op == 0:
                _validate(name, value or "", self.cfg)
            elif op == 1:
                if name not in NAMES:
                    raise E.InvalidConfigError(f"Unknown group config name: {name}")
            else:
                raise E.InvalidRequestError(f"operation {op} is not valid for group configs")
        after = changed(self.of(group_id), ops)
        for kind in ("consumer", "share"):
            interval, timeout = (int(after.get(f"{kind}.{n}") or self.default(f"{kind}.{n}"))
                                 for n in ("heartbeat.interval.ms", "session.timeout.ms"))
            if interval >= timeout:
                raise E.InvalidConfigError(f"{kind}.heartbeat.interval.ms must be less than {kind}.session.timeout.ms")
        if not validate_only:
            await self.write(group_id, ops)


class FileGroupConfigs(GroupConfigs):
    def __init__(self, log_dir: str, broker_config: Any) -> None:
        super().__init__(broker_config)
        self.path = os.path.join(log_dir, FILE)
        self._mtime = -1.0
        self.configs: dict[str, dict[str, str]] = {}

    def _refresh(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            self.configs, self._mtime = {}, -1.0
            return
        if mtime != self._mtime:
            with open(self.path, encoding="utf-8") as fh:
                self.configs = json.load(fh)
            self._mtime = mtime

    def of(self, group_id: str) -> dict[str, str]:
        self._refresh()
        return dict(self.configs.get(group_id, {}))

    async def write(self, group_id: str, ops: list[tuple[str, int, str | None]]) -> None:
        lock = os.open(self.path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._mtime = -1.0
            self._refresh()
            entry = changed(self.configs.get(group_id, {}), ops)
            if entry:
                self.configs[group_id] = entry
            else:
                self.configs.pop(group_id, None)
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.configs, fh)
            os.replace(tmp, self.path)
            self._mtime = -1.0
        finally:
            os.close(lock)
