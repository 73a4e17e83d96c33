"""The broker's side of test control: faults applied by the broker itself.

`TestControl` is attached to a Broker when its properties name a control directory
(`kafkafast.testing.control`, see `control.py` for the files and the rule kinds). It hooks
the broker in these places and nowhere else:

* request dispatch: every client connection hands its frames to `handle_frame` instead
  of `Broker.handle_frame` (`runtime/connection.py`); with no rule for the request's API
  this is one stat of the rule file and a dict lookup. Faults are applied at the edge, in
  the worker that the client is connected to, before any forwarding between workers.
* segment writes: `kafkafast.storage.segment.write_fault` raises EIO for a `disk` rule,
  so the produce path meets a real failed write (the segment is truncated back and the
  partition answers KAFKA_STORAGE_ERROR); `kafkafast.storage.log_manager.load_fault` holds
  the load of a partition at start-up while a `hold_load` rule names it.
* a task on the broker's loop (every TICK_S): fires manual-clock timers, carries out the
  one-shot rules that belong to this process (rebalance and expire for groups this
  process coordinates, kill_worker for this worker).

Error answers are built the way Kafka builds them: for Produce, Fetch, ListOffsets and
OffsetCommit every matching partition gets the error and the other partitions of the
same request are handled normally (a produce to several partitions appends the others);
Metadata is answered normally with the error on the matching topics (or partitions);
FindCoordinator answers the error for every key; other APIs answer with their top-level
error code and nothing done.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from typing import Any

from kafkafast import clock
from kafkafast.protocol import _generated as gen
from kafkafast.protocol import api
from kafkafast.protocol.errors import CloseConnection
from kafkafast.protocol.primitives import FileRegion
from kafkafast.storage import log_manager, segment
from kafkafast.testing.control import ControlFiles

log = logging.getLogger("kafkafast.testing")

TICK_S = 0.005
HOLD_LOAD_MAX_S = 60.0  # a held load goes on after this, so a test that never releases it cannot hang a broker
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 0, 1, 2, 3, 8, 9, 10
OFFSET_FOR_LEADER_EPOCH = 23
REQUEST_KINDS = ("error", "omit", "delay", "drop", "pause")
# api key -> (request topics, topic name, request partitions, partition index,
#             response topics, response partitions, response topic class, response partition class)
PARTITIONED = {
    PRODUCE: ("topic_data", "name", "partition_data", "index", "responses", "partition_responses",
              "TopicProduceResponse", "PartitionProduceResponse"),
    FETCH: ("topics", "topic", "partitions", "partition", "responses", "partitions",
            "FetchableTopicResponse", "PartitionData"),
    LIST_OFFSETS: ("topics", "name", "partitions", "partition_index", "topics", "partitions",
                   "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse"),
    OFFSET_COMMIT: ("topics", "name", "partitions", "partition_index", "topics", "partitions",
                    "OffsetCommitResponseTopic", "OffsetCommitResponsePartition"),
    OFFSET_FOR_LEADER_EPOCH: ("topics", "topic", "partitions", "partition", "topics", "partitions",
                              "OffsetForLeaderTopicResult", "EpochEndOffset"),
}
# The partition index's field in a response's partition, where it is not "partition_index".
RESPONSE_INDEX = {PRODUCE: "index", OFFSET_FOR_LEADER_EPOCH: "partition"}
# Fields an error answer sets besides the error code (Kafka's "unknown" values).
_UNKNOWN = {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1, "high_watermark": -1,
            "last_stable_offset": -1, "records": None, "timestamp": -1, "offset": -1, "leader_epoch": -1,
            "generation_id": -1, "producer_id": -1, "producer_epoch": -1, "node_id": -1, "host": "",
            "port": -1}


def error_injectable(api_key: int) -> bool:
    """Whether `error` rules can answer this API (it has an error code somewhere to set)."""
    resp = gen.RESPONSES.get(api_key)
    return resp is not None and (api_key in PARTITIONED or api_key in (METADATA, FIND_COORDINATOR)
                                 or "error_code" in _fields(resp))


def partitioned(api_key: int) -> bool:
    return api_key in PARTITIONED or api_key == METADATA


def _matches(rule: dict, topic: str | None, partition: int | None) -> bool:
    return (rule.get("topic") is None or rule["topic"] == topic) and \
        (rule.get("partition") is None or partition is None or rule["partition"] == partition)


class TestControl:
    """Faults and the manual clock of one broker process (see the module docstring)."""

    def __init__(self, broker: Any, directory: str) -> None:
        self.broker = broker
        self.files = ControlFiles(directory)
        self._signature: tuple[int, int, int] | None = None
        self.rules: list[dict] = []
        self._by_api: dict[int, list[dict]] = {}
        self._task: asyncio.Task | None = None
        if os.path.exists(self.files.clock_path):
            clock.use_manual_clock(self.files.clock_path)
        segment.write_fault = self._disk_fault
        log_manager.load_fault = self._hold_load

    # -- rule file --------------------------------------------------------------------------
    def refresh(self) -> None:
        sig = self.files.signature()
        if sig == self._signature:
            return
        self._signature = sig
        self.rules = self.files.rules() if sig is not None else []
        by_api: dict[int, list[dict]] = {}
        for rule in self.rules:
            if rule["kind"] in REQUEST_KINDS:
                by_api.setdefault(rule.get("api_key", PRODUCE), []).append(rule)
        self._by_api = by_api

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                if clock.is_manual():
                    clock.fire_due_timers()
                self.refresh()
                for rule in self.rules:
                    if rule["kind"] in ("rebalance", "expire", "kill_worker"):
                        self._carry_out(rule)
            except Exception:  # a broken rule must not stop the broker
                log.exception("test control failed")

    def _carry_out(self, rule: dict) -> None:
        kind = rule["kind"]
        if kind == "kill_worker":
            if self.broker.placement.index == rule["worker"] and self.files.use(rule["id"]):
                log.warning("test control: worker %d kills itself", rule["worker"])
                os.kill(os.getpid(), signal.SIGKILL)
            return
        coordinator = self.broker.group_coordinator
        if coordinator is None:
            return
        group_id = rule["group"]
        group = coordinator.groups.get(group_id)
        if group is None or coordinator.status(group_id, "describe_groups"):
            return  # not coordinated here (or not yet loaded)
        if kind == "rebalance":
            if not self.files.use(rule["id"]):
                return
            coordinator._maybe_prepare_rebalance(group, "forced by a test")
        else:
            member = group.members.get(rule["member"]) if rule.get("member") else \
                next(iter(group.members.values()), None)
            if member is None or not self.files.use(rule["id"]):
                return
            log.info("test control: expiring member %s of group %s", member.member_id, group_id)
            coordinator._remove_member_and_update_group(group, member)

    # -- storage hook -----------------------------------------------------------------------
    def _disk_fault(self, segment_dir: str) -> None:
        self.refresh()
        if not self.rules:
            return
        topic, _, partition = os.path.basename(segment_dir).rpartition("-")
        for rule in self.rules:
            if rule["kind"] == "disk" and _matches(rule, topic, int(partition)) and self.files.use(rule["id"]):
                raise OSError(errno.EIO, f"write to {segment_dir} failed (injected by the test)")
            if rule["kind"] == "die_writing" and _matches(rule, topic, int(partition)) \
                    and self.files.use(rule["id"]):
                _torn_write_and_die(segment_dir)

    def _hold_load(self, topic: str, partition: int) -> None:
        """Waits (in the loading process, before it opens the partition's log) while a
        `hold_load` rule names the partition, at most HOLD_LOAD_MAX_S."""
        deadline = time.monotonic() + HOLD_LOAD_MAX_S
        held = False
        while True:
            self.refresh()
            if not any(r["kind"] == "hold_load" and _matches(r, topic, partition) for r in self.rules):
                return
            if not held:
                held = True
                log.warning("test control: holding the load of %s-%d", topic, partition)
            if time.monotonic() > deadline:
                log.warning("test control: the load of %s-%d was held for %.0fs; loading it now", topic, partition,
                            HOLD_LOAD_MAX_S)
                return
            time.sleep(TICK_S)

    # -- dispatch hook ----------------------------------------------------------------------
    async def handle_frame(self, frame: Any, conn: Any) -> list | None:
        broker = self.broker
        self.refresh()
        if not self._by_api or len(frame) < 8:
            return await broker.handle_frame(frame, conn)
        api_key, version, correlation_id = api.peek_api(frame)
        rules = self._by_api.get(api_key)
        if not rules or api_key not in broker.handlers or \
                not broker.handlers[api_key].min_version <= version <= broker.handlers[api_key].max_version:
            return await broker.handle_frame(frame, conn)
        try:
            header, request = api.decode_request(frame)
        except Exception:  # malformed: the broker's own dispatch answers it as it always does
            return await broker.handle_frame(frame, conn)
        targets = list(self._partitions(api_key, request))
        if api_key == PRODUCE:
            await self._wait_while_paused(targets)
        for rule in self.rules:  # held before it is handled
            if rule["kind"] == "delay" and rule.get("before") and rule.get("api_key") == api_key \
                    and self.files.use(rule["id"]):
                await asyncio.sleep(rule["delay_ms"] / 1000.0)
        for rule in self.rules:
            if rule["kind"] in ("error", "omit") and rule.get("api_key") == api_key:
                if self._applies(rule, api_key, request, targets) and self.files.use(rule["id"]):
                    if api_key == PRODUCE and request.acks == 0 and rule["kind"] == "error":
                        # Kafka closes an acks=0 producer's connection on an error: its only signal.
                        raise CloseConnection("injected produce error with acks=0")
                    response = await self._error_answer(api_key, header, request, rule, conn)
                    return None if response is None else api.encode_response(api_key, version, correlation_id,
                                                                             response)
        parts = await broker.handle_frame(frame, conn)
        for rule in self.rules:
            if rule.get("api_key") != api_key or rule["kind"] not in ("delay", "drop") or rule.get("before"):
                continue
            if rule.get("topic") is not None and not any(_matches(rule, *t) for t in targets):
                continue
            if not self.files.use(rule["id"]):
                continue
            if rule["kind"] == "delay":
                await asyncio.sleep(rule["delay_ms"] / 1000.0)
            else:
                raise CloseConnection(f"dropped the answer to api {api_key} (injected by the test)")
        return parts

    @staticmethod
    def _applies(rule: dict, api_key: int, request: Any, targets: list) -> bool:
        """Whether an error rule concerns this request: any request of an API not addressed
        by partition; else one naming a matching partition (Metadata: or asking for all
        topics, or the rule names no topic)."""
        if not partitioned(api_key) or any(_matches(rule, *t) for t in targets):
            return True
        return api_key == METADATA and (rule.get("topic") is None or request.topics is None)

    @staticmethod
    def _partitions(api_key: int, request: Any) -> Any:
        if api_key == METADATA:
            for t in request.topics or []:
                yield t.name, None
            return
        spec = PARTITIONED.get(api_key)
        if spec is None:
            return
        topics_attr, name_attr, parts_attr, index_attr = spec[:4]
        for t in getattr(request, topics_attr) or []:
            for p in getattr(t, parts_attr) or []:
                yield getattr(t, name_attr), getattr(p, index_attr)

    async def _wait_while_paused(self, targets: list) -> None:
        while True:
            self.refresh()
            if not any(r["kind"] == "pause" and _matches(r, *t) for r in self.rules for t in targets):
                return
            await asyncio.sleep(TICK_S)

    async def _error_answer(self, api_key: int, header: Any, request: Any, rule: dict, conn: Any) -> Any:
        """The answer with the rule's error on the partitions it matches (an `omit` rule: the
        answer leaves them out, as a broker not keeping to the protocol would)."""
        broker = self.broker
        code = rule.get("error_code")
        version = header.request_api_version
        resp_cls = gen.RESPONSES[api_key]

        async def handle(req: Any) -> Any:
            """Serves `req` through the broker's whole dispatch (forwarding between workers
            included) and returns the response as an object, to add the errors to."""
            frame = bytearray(api.encode_request(req, version, header.correlation_id, header.client_id)[4:])
            parts = await broker.handle_frame(frame, conn)
            if parts is None:
                return None
            data = b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)
            return api.decode_response(api_key, version, data[4:])[1]

        if api_key in PARTITIONED:
            topics_attr, name_attr, parts_attr, index_attr, rtopics, rparts, rtopic_cls, rpart_cls = \
                PARTITIONED[api_key]
            failed: dict[str, list[int]] = {}
            ids = {getattr(t, name_attr): {"topic_id": t.topic_id} for t in getattr(request, topics_attr)
                   if getattr(t, "topic_id", None) is not None}
            for t in getattr(request, topics_attr):
                keep = []
                for p in getattr(t, parts_attr):
                    if _matches(rule, getattr(t, name_attr), getattr(p, index_attr)):
                        failed.setdefault(getattr(t, name_attr), []).append(getattr(p, index_attr))
                    else:
                        keep.append(p)
                setattr(t, parts_attr, keep)
            setattr(request, topics_attr, [t for t in getattr(request, topics_attr) if getattr(t, parts_attr)])
            if api_key == FETCH and rule["kind"] == "error":  # an error completes a fetch at once (Kafka's DelayedFetch)
                request.max_wait_ms = 0
            if getattr(request, topics_attr):
                response = await handle(request)
                if response is None:  # acks=0
                    return None
            elif api_key == PRODUCE and request.acks == 0:  # (omit: nothing to append, no answer)
                return None
            else:
                response = resp_cls(**{rtopics: []})
            topic_cls, part_cls = getattr(resp_cls, rtopic_cls), getattr(resp_cls, rpart_cls)
            by_name = {getattr(t, name_attr): t for t in getattr(response, rtopics)}
            if rule["kind"] == "omit":
                return response
            for name, indexes in failed.items():
                entry = by_name.get(name)
                if entry is None:
                    entry = topic_cls(**{name_attr: name, rparts: []}, **ids.get(name, {}))
                    getattr(response, rtopics).append(entry)
                index_field = RESPONSE_INDEX.get(api_key, "partition_index")
                for i in indexes:
                    getattr(entry, rparts).append(part_cls(**{index_field: i, "error_code": code},
                                                           **_unknowns(part_cls)))
            return response
        if api_key == METADATA:
            response = await handle(request)
            for t in response.topics:
                if rule.get("topic") in (None, t.name):
                    if rule.get("partition") is None:
                        t.error_code = code
                    for p in t.partitions:
                        if rule.get("partition") == p.partition_index:
                            p.error_code = code
            return response
        if api_key == FIND_COORDINATOR and version >= 4:
            coordinator = getattr(resp_cls, "Coordinator")
            return resp_cls(coordinators=[coordinator(key=k, error_code=code, **_unknowns(coordinator))
                                          for k in request.coordinator_keys])
        fields = {"error_code": code, **_unknowns(resp_cls)}
        if "member_id" in _fields(resp_cls) and hasattr(request, "member_id"):
            fields["member_id"] = request.member_id
        return resp_cls(**fields)


def _fields(cls: Any) -> tuple[str, ...]:
    """The fields of a generated message class (its __slots__)."""
    return cls.__slots__


def _unknowns(cls: Any) -> dict[str, Any]:
    return {k: v for k, v in _UNKNOWN.items() if k in _fields(cls)}


def _torn_write_and_die(segment_dir: str) -> None:
    """The start of a batch (a header claiming 4 KiB, 200 bytes of it) at the end of the
    partition's last segment, then SIGKILL: a process dying in the middle of its write."""
    last = max(n for n in os.listdir(segment_dir) if n.endswith(".log") and n[:-4].isdigit())
    fd = os.open(os.path.join(segment_dir, last), os.O_WRONLY | os.O_APPEND)
    os.write(fd, (1 << 40).to_bytes(8, "big") + (4096).to_bytes(4, "big") + b"\xab" * 188)
    log.warning("test control: dying in the middle of a write to %s", segment_dir)
    os.kill(os.getpid(), signal.SIGKILL)
