"""kafkafast's share consumer (KIP-932): `AIOShareConsumer` (asyncio) and `ShareConsumer` (blocking).

    with ShareConsumer("jobs", bootstrap_servers="127.0.0.1:9092", group_id="workers") as c:
        for record in c.poll(timeout_ms=1000):   # ShareRecord: topic, partition, offset, ..., delivery_count
            handle(record)                       # implicit mode: accepted by the next poll / commit

Membership: ShareGroupHeartbeat v1 to the group's coordinator (a member id made up here, epoch 0
to join, the answer's epoch after; on UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH it joins again),
every heartbeat interval the broker names. The assignment (topic ids -> partitions) says which
partitions to fetch.

Fetching: `poll` sends one ShareFetch v1 to each leader of assigned partitions, in that broker's
share session (epoch 0 opens it with its partitions; then +1 each request, with partitions added
and ForgottenTopicsData for those no longer assigned), carrying the acknowledgements of that
broker's partitions; the answer's records are decoded and only the acquired offsets handed out,
each with its delivery count.

Acknowledgement modes (`acknowledgement_mode`, as the Java and librdkafka clients'
share.acknowledgement.mode): "implicit" (default): the records a poll returned are accepted by
the next poll, commit_sync, commit_async or close; "explicit": each record must be given a type
with `acknowledge(record, ACCEPT | RELEASE | REJECT)` before the next poll (else
IllegalStateError), and the types go to the broker with the next poll or commit. `commit_sync`
sends the pending acknowledgements in ShareAcknowledge requests and returns each partition's
error (None when accepted). `close` acknowledges, closes the share sessions (epoch -1, which
releases anything still held) and leaves the group (epoch -1).

For a caller that reads the records elsewhere (the Spark source's driver acquires, its tasks
read the offsets from the partition leaders): explicit mode's `acquire` answers the acquired
offset ranges (`AcquiredRange`) without decoding any record, and `acknowledge_range` gives a
whole range one type; they too go with the next poll, acquire or commit.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from kafkafast.client.cluster import Cluster, TopicPartition
from kafkafast.client.records import decode_fetched
from kafkafast.client.sync import LoopThread
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.share_acknowledge import ShareAcknowledgeRequest
from kafkafast.protocol._generated.share_fetch import ShareFetchRequest
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest

log = logging.getLogger("kafkafast.client.share")
ACCEPT, RELEASE, REJECT = 1, 2, 3
SHARE_VERSION = 1
# Error codes (plain ints: the type checker cannot see the members of the functional ErrorCode enum)
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 25, 110, 122, 123
REJOIN = {UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH}


class IllegalStateError(Exception):
    """The call does not fit the consumer's state (explicit mode: records not acknowledged)."""


@dataclass(slots=True)
class ShareRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets first..last (inclusive) of one partition, acquired for this member."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    delivery_count: int


class _Session:
    """One broker's share session: its epoch and the partitions it holds."""

    __slots__ = ("epoch", "partitions")

    def __init__(self) -> None:
        self.epoch = 0
        self.partitions: set[TopicPartition] = set()


class AIOShareConsumer:
    def __init__(self, *topics: str, bootstrap_servers: str | list[str], group_id: str,
                 acknowledgement_mode: str = "implicit", client_id: str = "kafkafast", max_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800, request_timeout_ms: int = 30000,
                 security: Any = None) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(f"acknowledgement_mode must be implicit or explicit, not {acknowledgement_mode!r}")
        self.topics = list(topics)
        self.group_id = group_id
        self.explicit = acknowledgement_mode == "explicit"
        self.max_records = max_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                               security=security)
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.assignment: set[TopicPartition] = set()
        self.heartbeat_interval = 1.0
        self._ids: dict[bytes, str] = {}  # topic id -> name
        self._names: dict[str, bytes] = {}
        self._sessions: dict[int, _Session] = {}
        self._delivered: dict[tuple[str, int, int], int | None] = {}  # records handed out: ack type or None
        self._pending: dict[TopicPartition, dict[int, int]] = {}  # acknowledgements not yet sent: offset -> type
        self._hb_task: asyncio.Task | None = None
        self._joined = asyncio.Event()
        self._assigned = asyncio.Event()  # set while the assignment names partitions
        self._send_topics = False
        self._closed = False

    async def start(self) -> AIOShareConsumer:
        await self.cluster.start()
        self._hb_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        return self

    async def wait_for_assignment(self, timeout_ms: int) -> bool:
        """Until the group has given this member partitions (True), or `timeout_ms` passed."""
        try:
            await asyncio.wait_for(self._assigned.wait(), timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            return False
        return True

    def subscribe(self, topics: list[str]) -> None:
        """A new subscription, sent with the next heartbeat."""
        self.topics = list(topics)
        self._send_topics = True

    # -- membership --------------------------------------------------------------------------------
    async def _heartbeat(self, epoch: int) -> Any:
        node = await self.cluster.find_coordinator(self.group_id)
        conn = await self.cluster.connection(node)
        send_topics = epoch == 0 or self._send_topics
        req = ShareGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                                         subscribed_topic_names=self.topics if send_topics else None)
        resp = await conn.send(req, version=SHARE_VERSION)
        if not resp.error_code and send_topics:
            self._send_topics = False
        return resp

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            try:
                resp = await self._heartbeat(self.member_epoch)
                if resp.error_code in REJOIN:
                    self.member_epoch = 0
                    continue
                if resp.error_code:
                    log.warning("share group %s: heartbeat: %s", self.group_id, E.for_code(resp.error_code).__name__)
                else:
                    self.member_epoch = resp.member_epoch
                    self.heartbeat_interval = resp.heartbeat_interval_ms / 1000.0
                    if resp.assignment is not None:
                        await self._assign(resp.assignment)
                    self._joined.set()
            except (E.KafkaError, OSError) as exc:
                log.info("share group %s: heartbeat failed: %s", self.group_id, exc)
            await asyncio.sleep(self.heartbeat_interval)

    async def _assign(self, assignment: Any) -> None:
        unknown = [tp.topic_id for tp in assignment.topic_partitions if tp.topic_id not in self._ids]
        if unknown:
            await self._learn_topic_ids()
        self.assignment = {TopicPartition(self._ids[tp.topic_id], p) for tp in assignment.topic_partitions
                           if tp.topic_id in self._ids for p in tp.partitions}
        if self.assignment:
            self._assigned.set()
        else:
            self._assigned.clear()

    async def _learn_topic_ids(self) -> None:
        md = await self.cluster.send_any(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)
                                                                 for t in self.topics]))
        for t in md.topics:
            if not t.error_code:
                self._ids[t.topic_id] = t.name
                self._names[t.name] = t.topic_id
        await self.cluster.refresh_metadata(self.topics)

    # -- acknowledgements ---------------------------------------------------------------------------
    def acknowledge(self, record: ShareRecord, ack_type: int = ACCEPT) -> None:
        """Explicit mode: how the broker should treat a record the last poll returned."""
        if not self.explicit:
            raise IllegalStateError("acknowledge() is for acknowledgement_mode='explicit'")
        key = (record.topic, record.partition, record.offset)
        if key not in self._delivered:
            raise IllegalStateError(f"{record.topic}-{record.partition}@{record.offset} is not in flight")
        if ack_type not in (ACCEPT, RELEASE, REJECT):
            raise ValueError(f"unknown acknowledge type {ack_type}")
        self._delivered[key] = ack_type

    def acknowledge_range(self, topic: str, partition: int, first_offset: int, last_offset: int,
                          ack_type: int = ACCEPT) -> None:
        """Explicit mode: one type for offsets first..last that `acquire` answered; sent with the
        next poll, acquire or commit (the broker refuses offsets this member does not hold with
        INVALID_RECORD_STATE, which commit_sync reports)."""
        if not self.explicit:
            raise IllegalStateError("acknowledge_range() is for acknowledgement_mode='explicit'")
        if ack_type not in (ACCEPT, RELEASE, REJECT):
            raise ValueError(f"unknown acknowledge type {ack_type}")
        pending = self._pending.setdefault(TopicPartition(topic, partition), {})
        for off in range(first_offset, last_offset + 1):
            pending[off] = ack_type

    def _take_delivered(self) -> None:
        """The records handed out become pending acknowledgements (implicit: accepted)."""
        if self.explicit and any(t is None for t in self._delivered.values()):
            raise IllegalStateError("every record of the last poll must be acknowledged first")
        for (topic, p, off), t in self._delivered.items():
            self._pending.setdefault(TopicPartition(topic, p), {})[off] = t if t is not None else ACCEPT
        self._delivered.clear()

    def _ack_batches(self, tp: TopicPartition, cls: Any) -> list:
        acks = self._pending.pop(tp, {})
        out: list[list] = []
        for off in sorted(acks):
            if out and out[-1][1] == off - 1 and out[-1][2] == acks[off]:
                out[-1][1] = off
            else:
                out.append([off, off, acks[off]])
        return [cls(first_offset=a, last_offset=b, acknowledge_types=[t]) for a, b, t in out]

    async def commit_sync(self) -> dict[TopicPartition, Exception | None]:
        """Sends the pending acknowledgements (ShareAcknowledge); each partition's result."""
        self._take_delivered()
        return await self._acknowledge(final=False)

    def commit_async(self) -> asyncio.Task:
        self._take_delivered()
        return asyncio.get_running_loop().create_task(self._acknowledge(final=False))

    async def _acknowledge(self, final: bool) -> dict[TopicPartition, Exception | None]:
        R = ShareAcknowledgeRequest
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in list(self._pending) if not final else set(self._pending) | {tp for s in self._sessions.values()
                                                                              for tp in s.partitions}:
            by_node.setdefault(self.cluster.leader_for(tp), []).append(tp)
        results: dict[TopicPartition, Exception | None] = {}
        for node, tps in by_node.items():
            session = self._sessions.get(node)
            if session is None or session.epoch == 0 or node < 0:
                for tp in tps:
                    if self._pending.pop(tp, None):
                        results[tp] = E.for_code(SHARE_SESSION_NOT_FOUND)("no share session with the partition's leader")
                continue
            topics: dict[str, list] = {}
            for tp in tps:
                batches = self._ack_batches(tp, R.AcknowledgementBatch)
                if batches:
                    topics.setdefault(tp.topic, []).append(R.AcknowledgePartition(partition_index=tp.partition,
                                                                                  acknowledgement_batches=batches))
            if not topics and not final:
                continue
            epoch = -1 if final else session.epoch
            req = R(group_id=self.group_id, member_id=self.member_id, share_session_epoch=epoch,
                    topics=[R.AcknowledgeTopic(topic_id=self._names[t], partitions=ps) for t, ps in topics.items()])
            conn = await self.cluster.connection(node)
            resp = await conn.send(req, version=SHARE_VERSION)
            if not final:
                session.epoch += 1
            if resp.error_code:
                for t, ps in topics.items():
                    for p in ps:
                        results[TopicPartition(t, p.partition_index)] = E.for_code(resp.error_code)(resp.error_message)
                continue
            for t in resp.responses:
                for p in t.partitions:
                    results[TopicPartition(self._ids[t.topic_id], p.partition_index)] = (
                        E.for_code(p.error_code)(p.error_message) if p.error_code else None)
        return results

    # -- fetching ---------------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        """Records acquired for this member (with the previous poll's acknowledgements sent first)."""
        out: list[ShareRecord] = []
        for topic, p in await self._acquire_within(timeout_ms, self.max_records):
            counts = {o: a.delivery_count for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)}
            records, _ = decode_fetched(p.records, topic, p.partition_index, min(counts))
            for r in records:
                count = counts.get(r.offset)
                if count is not None:
                    out.append(ShareRecord(topic, p.partition_index, r.offset, r.timestamp, r.key, r.value,
                                           r.headers, count))
                    self._delivered[(topic, p.partition_index, r.offset)] = None
        return out

    async def acquire(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[AcquiredRange]:
        """Explicit mode: as poll, but answers the acquired offset ranges and decodes no record;
        give each range its type with acknowledge_range."""
        if not self.explicit:
            raise IllegalStateError("acquire() is for acknowledgement_mode='explicit'")
        return [AcquiredRange(topic, p.partition_index, a.first_offset, a.last_offset, a.delivery_count)
                for topic, p in await self._acquire_within(timeout_ms, max_records or self.max_records)
                for a in p.acquired_records]

    async def _acquire_within(self, timeout_ms: int, max_records: int) -> list[tuple[str, Any]]:
        """ShareFetch rounds until one acquires records or `timeout_ms` passed: (topic, partition
        answer) of each partition with acquired records."""
        self._take_delivered()
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000.0
        if not self._joined.is_set():
            try:
                await asyncio.wait_for(self._joined.wait(), timeout_ms / 1000.0)
            except asyncio.TimeoutError:
                return []
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            wait_ms = max(0, min(self.fetch_max_wait_ms, int(remaining * 1000)))
            parts = await self._fetch_all(wait_ms, max_records)
            if parts or remaining <= 0:
                return parts

    async def _fetch_all(self, wait_ms: int, max_records: int) -> list[tuple[str, Any]]:
        by_node: dict[int, set[TopicPartition]] = {}
        for tp in self.assignment | set(self._pending):
            by_node.setdefault(self.cluster.leader_for(tp), set()).add(tp)
        for node in list(self._sessions):
            by_node.setdefault(node, set())
        by_node.pop(-1, None)
        if not by_node:
            await asyncio.sleep(wait_ms / 1000.0)
            return []
        answers = await asyncio.gather(*(self._fetch(node, tps, wait_ms, max_records) for node, tps in by_node.items()),
                                       return_exceptions=True)
        out: list[tuple[str, Any]] = []
        for a in answers:
            if isinstance(a, BaseException):
                log.info("share fetch failed: %s", a)
                continue
            out += a
        return out

    async def _fetch(self, node: int, tps: set[TopicPartition], wait_ms: int,
                     max_records: int) -> list[tuple[str, Any]]:
        F = ShareFetchRequest
        session = self._sessions.setdefault(node, _Session())
        wanted = {tp for tp in tps if tp in self.assignment}
        if session.epoch == 0:
            session.partitions = set()
        added, forgotten = wanted - session.partitions, session.partitions - wanted
        acks = {tp for tp in tps if tp in self._pending} if session.epoch > 0 else set()
        topics: dict[str, list] = {}
        for tp in added | acks:
            topics.setdefault(tp.topic, []).append(F.FetchPartition(
                partition_index=tp.partition, acknowledgement_batches=self._ack_batches(tp, F.AcknowledgementBatch)))
        forget: dict[str, list[int]] = {}
        for tp in forgotten:
            forget.setdefault(tp.topic, []).append(tp.partition)
        req = F(group_id=self.group_id, member_id=self.member_id, share_session_epoch=session.epoch,
                max_wait_ms=wait_ms, min_bytes=1, max_bytes=self.fetch_max_bytes, max_records=max_records,
                batch_size=max_records,
                topics=[F.FetchTopic(topic_id=self._names[t], partitions=ps) for t, ps in topics.items()],
                forgotten_topics_data=[F.ForgottenTopic(topic_id=self._names[t], partitions=ps)
                                       for t, ps in forget.items()])
        conn = await self.cluster.connection(node)
        resp = await conn.send(req, version=SHARE_VERSION, timeout=(wait_ms + self.cluster.request_timeout_ms) / 1000.0)
        if resp.error_code:
            if resp.error_code in (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH):
                session.epoch = 0  # open a new session next time
            log.info("share fetch from node %d: %s", node, E.for_code(resp.error_code).__name__)
            return []
        session.epoch += 1
        session.partitions = wanted
        return [(self._ids[t.topic_id], p) for t in resp.responses if t.topic_id in self._ids
                for p in t.partitions if not p.error_code and p.acquired_records]

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if not self.explicit or all(t is not None for t in self._delivered.values()):
                self._take_delivered()
            await self._acknowledge(final=True)
        except (E.KafkaError, OSError) as exc:
            log.info("share group %s: closing the share sessions failed: %s", self.group_id, exc)
        self._closed = True
        if self._hb_task is not None:
            self._hb_task.cancel()
        try:
            await self._heartbeat(-1)
        except (E.KafkaError, OSError) as exc:
            log.info("share group %s: leaving failed: %s", self.group_id, exc)
        await self.cluster.close()


class ShareConsumer:
    """Blocking share consumer over `AIOShareConsumer` (same keyword settings) on a private loop thread."""

    def __init__(self, *topics: str, bootstrap_servers: str | list[str], group_id: str, **settings: Any) -> None:
        self._lt = LoopThread("kafkafast-share-consumer", use_uvloop=False)
        self._c = AIOShareConsumer(*topics, bootstrap_servers=bootstrap_servers, group_id=group_id, **settings)
        self._lt.run(self._c.start())

    def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        return self._lt.run(self._c.poll(timeout_ms))

    def wait_for_assignment(self, timeout_ms: int) -> bool:
        return self._lt.run(self._c.wait_for_assignment(timeout_ms))

    def acquire(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[AcquiredRange]:
        return self._lt.run(self._c.acquire(timeout_ms, max_records))

    def acknowledge(self, record: ShareRecord, ack_type: int = ACCEPT) -> None:
        async def run() -> None:
            self._c.acknowledge(record, ack_type)
        self._lt.run(run())

    def acknowledge_range(self, topic: str, partition: int, first_offset: int, last_offset: int,
                          ack_type: int = ACCEPT) -> None:
        async def run() -> None:
            self._c.acknowledge_range(topic, partition, first_offset, last_offset, ack_type)
        self._lt.run(run())

    def commit_sync(self) -> dict[TopicPartition, Exception | None]:
        return self._lt.run(self._c.commit_sync())

    def commit_async(self) -> Any:
        async def run() -> Any:
            return self._c.commit_async()
        return self._lt.run(run())

    def close(self) -> None:
        try:
            self._lt.run(self._c.close())
        finally:
            self._lt.stop()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
