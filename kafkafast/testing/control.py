"""The control channel between a test and its broker: files in one directory.

A test broker is started with the property `kafkafast.testing.control=<dir>`. In it:

    faults.json   {"next_id": n, "rules": [rule, ...]}, replaced atomically (os.replace)
    faults.lock   flock'd by whoever changes faults.json (the test, or a broker process
                  using up a rule), so counts are exact across worker processes
    clock         present only on a manual clock: 8 bytes, little-endian int64 ms since
                  the epoch (see kafkafast/clock.py)

A rule is a JSON object with an `id`, a `kind` and the fields of that kind:

    error   api_key, error_code, count, topic, partition   answer with error_code instead
    omit    api_key, count, topic, partition               leave the partitions it names out (not
                                                           handled, not answered)
    delay   api_key, delay_ms, count, before               answer delay_ms late (before: hold it that
                                                           long before it is handled)
    drop    api_key, count, topic                          handle, then close the connection
    pause   topic, partition                               hold produce requests for it
    disk    topic, partition, count                        fail segment writes with EIO
    die_writing  topic, partition, count                   the writing worker SIGKILLs itself in the
                                                           middle of a segment write (a torn batch)
    hold_load  topic, partition                            the process loading the partition at start-up
                                                           waits before opening its log while the rule is there
    rebalance  group                                       one-shot: the group rebalances
    expire  group, member                                  one-shot: the member's session expires
    kill_worker  worker                                    one-shot: that worker SIGKILLs itself

`count` is how many more requests the rule applies to (-1: until removed); a rule whose
count reaches 0 and a one-shot rule that has been carried out are removed from the file,
which is how the test knows that it happened. `topic`/`partition` null match any.

Why files: they work unchanged for one process or N pre-forked workers (each checks the
file's identity with one stat per request and re-reads it only when it was replaced),
need no port or protocol of their own, and the broker finds them through its properties.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Any, Iterator

PROPERTY = "kafkafast.testing.control"
FAULTS = "faults.json"
LOCK = "faults.lock"
CLOCK = "clock"



class ControlFiles:
    """Reads and changes the rule file of one control directory."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.path = os.path.join(directory, FAULTS)
        self.lock_path = os.path.join(directory, LOCK)
        self.clock_path = os.path.join(directory, CLOCK)

    def signature(self) -> tuple[int, int, int] | None:
        """Identity of the current rule file: changes whenever it is replaced."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def read(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {"next_id": 1, "rules": []}

    def _write(self, state: dict[str, Any]) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def change(self) -> Iterator[dict[str, Any]]:
        """Yields the current state under the lock and writes it back afterwards."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self.read()
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                self._write(state)
        finally:
            os.close(fd)

    def add(self, rule: dict[str, Any]) -> int:
        with self.change() as state:
            rule = dict(rule, id=state["next_id"])
            state["next_id"] += 1
            state["rules"].append(rule)
        return rule["id"]

    def remove(self, rule_id: int) -> bool:
        with self.change() as state:
            n = len(state["rules"])
            state["rules"] = [r for r in state["rules"] if r["id"] != rule_id]
            return len(state["rules"]) != n

    def use(self, rule_id: int) -> bool:
        """Uses up one application of a rule (the broker's side); False if it is gone."""
        with self.change() as state:
            for i, rule in enumerate(state["rules"]):
                if rule["id"] != rule_id:
                    continue
                count = rule.get("count", 1)
                if count > 0:
                    if count == 1:
                        del state["rules"][i]
                    else:
                        rule["count"] = count - 1
                return True
        return False

    def rules(self) -> list[dict[str, Any]]:
        return self.read()["rules"]

    def clear(self) -> None:
        with self.change() as state:
            state["rules"] = []
