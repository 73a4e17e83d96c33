"""What a test calls to script its broker: `Faults` and `ManualClock`.

Both only write files in the broker's control directory (see `control.py`); the broker
applies them itself, so every client sees real protocol behaviour.
"""
from __future__ import annotations

import time
from typing import Any

from kafkafast import clock
from kafkafast.testing.control import ControlFiles


def api_key(api: int | str) -> int:
    """An API key from its number or its name ("Produce", "produce", "FindCoordinator")."""
    if isinstance(api, int):
        return api
    from kafkafast.protocol import _generated as gen  # deferred: 0.3 s to import

    wanted = api.replace("_", "").lower()
    for key, cls in gen.REQUESTS.items():
        if cls.__name__[: -len("Request")].lower() == wanted:
            return key
    raise ValueError(f"unknown API {api!r}")


def error_code(code: int | str) -> int:
    """An error code from its number or its Kafka name ("NOT_LEADER_OR_FOLLOWER")."""
    if isinstance(code, int):
        return code
    from kafkafast.protocol.errors import ErrorCode  # deferred: kafkafast.testing starts light

    try:
        return int(getattr(ErrorCode, code.upper()))
    except AttributeError:
        raise ValueError(f"unknown error code {code!r}") from None


class Faults:
    """Faults the broker applies to the requests it receives from now on.

    Every method returns the rule's id (for `remove`); `count` is how many requests the
    fault applies to (-1: until removed or `clear()`)."""

    def __init__(self, control_dir: str, *, workers: int = 0) -> None:
        self.files = ControlFiles(control_dir)
        self.workers = workers

    def error(self, api: int | str, code: int | str, *, count: int = 1, topic: str | None = None,
              partition: int | None = None) -> int:
        """Answer the next `count` requests of `api` with error `code` (for Produce, Fetch,
        ListOffsets, OffsetCommit and Metadata: only the matching topic/partition)."""
        from kafkafast.testing.faults import error_injectable, partitioned  # deferred: imports the protocol (0.3 s)

        key = api_key(api)
        if not error_injectable(key):
            raise ValueError(f"API {api!r} has no error code the broker could answer with")
        if (topic is not None or partition is not None) and not partitioned(key):
            raise ValueError(f"API {api!r} is not addressed by topic; leave topic/partition unset")
        return self.files.add({"kind": "error", "api_key": key, "error_code": error_code(code), "count": count,
                               "topic": topic, "partition": partition})

    def omit(self, api: int | str, *, topic: str, partition: int | None = None, count: int = 1) -> int:
        """Leave the partition (every partition of `topic`: None) out of the next `count`
        requests of `api` naming it, as a broker not keeping to the protocol would: it is neither
        handled (a produce to it is not appended) nor in the answer; the others are handled and
        answered normally (Produce, Fetch, ListOffsets, OffsetCommit, OffsetForLeaderEpoch)."""
        from kafkafast.testing.faults import PARTITIONED  # deferred: imports the protocol (0.3 s)

        key = api_key(api)
        if key not in PARTITIONED:
            raise ValueError(f"API {api!r} is not answered partition by partition")
        return self.files.add({"kind": "omit", "api_key": key, "count": count, "topic": topic,
                               "partition": partition})

    def delay(self, api: int | str, delay_ms: int, *, count: int = 1, before: bool = False) -> int:
        """Answer the next `count` requests of `api` `delay_ms` late (real time): handled, then
        answered late, or with `before` held that long before the broker handles them (a
        request that arrived late: a controller's LeaderAndIsr that one broker applies after
        the others)."""
        return self.files.add({"kind": "delay", "api_key": api_key(api), "delay_ms": delay_ms, "count": count,
                               "before": before})

    def drop_response(self, api: int | str = "Produce", *, count: int = 1, topic: str | None = None) -> int:
        """Handle the next `count` requests of `api` (a produce is appended), then close
        the connection instead of answering."""
        return self.files.add({"kind": "drop", "api_key": api_key(api), "count": count, "topic": topic})

    def pause(self, topic: str, partition: int | None = None) -> int:
        """Hold produce requests for the partition (all of the topic's: partition None)
        until `resume`; nothing is appended meanwhile."""
        return self.files.add({"kind": "pause", "topic": topic, "partition": partition})

    def resume(self, topic: str, partition: int | None = None) -> None:
        with self.files.change() as state:
            state["rules"] = [r for r in state["rules"] if not (
                r["kind"] == "pause" and r["topic"] == topic and r.get("partition") == partition)]

    def disk_error(self, topic: str | None = None, partition: int | None = None, *, count: int = 1) -> int:
        """Make the next `count` segment writes (of the partition) fail with EIO: the
        produce gets KAFKA_STORAGE_ERROR and nothing of it stays in the log."""
        return self.files.add({"kind": "disk", "topic": topic, "partition": partition, "count": count})

    def die_writing(self, topic: str | None = None, partition: int | None = None, *, count: int = 1) -> int:
        """The process making the next `count` segment writes (of the partition) SIGKILLs
        itself in the middle of the write, leaving a torn batch at the end of the segment
        (with worker processes: the supervisor forks a replacement)."""
        return self.files.add({"kind": "die_writing", "topic": topic, "partition": partition, "count": count})

    def hold_load(self, topic: str, partition: int | None = None) -> int:
        """At the broker's next start, the process that loads the partition (with worker
        processes: its owner) stops before opening its log and waits until this rule is
        removed (`remove(id)`; at most 60 s): the partition stays loading while the other
        workers serve. A broker with one process does not answer at all meanwhile."""
        return self.files.add({"kind": "hold_load", "topic": topic, "partition": partition})

    def force_rebalance(self, group: str, *, timeout: float = 10.0) -> None:
        """The group's coordinator starts a rebalance now (members see REBALANCE_IN_PROGRESS
        and rejoin); returns once the broker has done it."""
        self._one_shot({"kind": "rebalance", "group": group}, timeout)

    def expire_member(self, group: str, member_id: str | None = None, *, timeout: float = 10.0) -> None:
        """The member's session expires now (any member when member_id is None): it is
        removed and the group rebalances; returns once the broker has done it."""
        self._one_shot({"kind": "expire", "group": group, "member": member_id}, timeout)

    def kill_worker(self, worker: int = 0, *, timeout: float = 10.0) -> None:
        """Worker process `worker` of a multi-process broker SIGKILLs itself (the supervisor
        forks a replacement, which recovers its partitions)."""
        if not self.workers:
            raise ValueError("kill_worker needs a broker with workers >= 1")
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker {worker} out of range 0..{self.workers - 1}")
        self._one_shot({"kind": "kill_worker", "worker": worker}, timeout)

    def _one_shot(self, rule: dict[str, Any], timeout: float) -> None:
        rule_id = self.files.add(rule)
        deadline = time.monotonic() + timeout
        while any(r["id"] == rule_id for r in self.files.rules()):
            if time.monotonic() > deadline:
                self.files.remove(rule_id)
                raise TimeoutError(f"the broker did not carry out {rule} within {timeout}s "
                                   "(does the group exist and have members?)")
            time.sleep(0.005)

    def remove(self, rule_id: int) -> bool:
        return self.files.remove(rule_id)

    def clear(self) -> None:
        self.files.clear()

    def active(self) -> list[dict[str, Any]]:
        """The rules still in force (with their remaining counts)."""
        return self.files.rules()


class ManualClock:
    """The broker's clock when started with manual_clock=True: it stands still until
    `advance`d. It starts at the real time of the broker's start."""

    def __init__(self, path: str) -> None:
        self.path = path

    def now_ms(self) -> int:
        with open(self.path, "rb") as fh:
            return int.from_bytes(fh.read(8), "little", signed=True)

    def set_ms(self, ms: int) -> None:
        clock.write_manual_clock(self.path, ms)

    def advance(self, ms: int = 0, *, seconds: float = 0, minutes: float = 0, hours: float = 0,
                days: float = 0) -> int:
        """Moves the clock forward; returns the new time (ms since the epoch). Timers due
        by then fire within milliseconds; periodic log maintenance (retention, roll,
        flush) runs within its 200 ms tick."""
        step = ms + int((seconds + 60 * minutes + 3600 * hours + 86400 * days) * 1000)
        if step < 0:
            raise ValueError("the clock only moves forward")
        now = self.now_ms() + step
        self.set_ms(now)
        return now
