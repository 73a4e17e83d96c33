"""Group configs (resource type GROUP in IncrementalAlterConfigs / DescribeConfigs), the share
group ones Kafka 4.2 defines: share.auto.offset.reset (latest, earliest, by_duration:<ISO-8601
duration>), share.isolation.level (read_uncommitted, read_committed), share.record.lock.duration.ms,
share.delivery.count.limit, share.session.timeout.ms and share.heartbeat.interval.ms.

File: `<first log dir>/__kafkafast_group_configs.json`, {group id: {name: value}}, replaced
atomically (write to a temporary file, rename) under an flock of `.lock` beside it, and
re-read by every process when its modification time changed, so every worker of a broker sees
a change at its next request.
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from kafkafast.broker.share.manager import duration_ms
from kafkafast.protocol import errors as E

FILE = "__kafkafast_group_configs.json"
RESOURCE_GROUP = 32


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
    bounds = {"share.record.lock.duration.ms": "group.share.{}.record.lock.duration.ms",
              "share.delivery.count.limit": "group.share.{}.delivery.count.limit",
              "share.session.timeout.ms": "group.share.{}.session.timeout.ms",
              "share.heartbeat.interval.ms": "group.share.{}.heartbeat.interval.ms"}
    if name not in bounds:
        raise E.InvalidConfigError(f"Unknown group config name: {name}")
    try:
        n = int(value)
    except ValueError:
        raise E.InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    lo, hi = cfg.get_int(bounds[name].format("min")), cfg.get_int(bounds[name].format("max"))
    if not lo <= n <= hi:
        raise E.InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                          f"Value must be in the range [{lo}, {hi}]")


NAMES = ("share.auto.offset.reset", "share.isolation.level", "share.record.lock.duration.ms",
         "share.delivery.count.limit", "share.session.timeout.ms", "share.heartbeat.interval.ms")


class GroupConfigs:
    def __init__(self, log_dir: str, broker_config: Any) -> None:
        self.path = os.path.join(log_dir, FILE)
        self.cfg = broker_config
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

    def get(self, group_id: str, name: str) -> str | None:
        self._refresh()
        return self.configs.get(group_id, {}).get(name)

    def of(self, group_id: str) -> dict[str, str]:
        self._refresh()
        return dict(self.configs.get(group_id, {}))

    def alter(self, group_id: str, ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
        """IncrementalAlterConfigs operations (name, op: 0 set, 1 delete, value) on one group."""
        for name, op, value in ops:
            if op == 0:
                _validate(name, value or "", self.cfg)
            elif op == 1:
                if name not in NAMES:
                    raise E.InvalidConfigError(f"Unknown group config name: {name}")
            else:
                raise E.InvalidRequestError(f"operation {op} is not valid for group configs")
        if validate_only:
            return
        lock = os.open(self.path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._mtime = -1.0
            self._refresh()
            entry = self.configs.setdefault(group_id, {})
            for name, op, value in ops:
                if op == 0:
                    entry[name] = value or ""
                else:
                    entry.pop(name, None)
            if not entry:
                del self.configs[group_id]
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.configs, fh)
            os.replace(tmp, self.path)
            self._mtime = -1.0
        finally:
            os.close(lock)
