"""Consumer group membership through the broker's group coordinator (eager rebalancing).

Joining: FindCoordinator -> JoinGroup (from v4 the first join is answered with
MEMBER_ID_REQUIRED and the member id to join with; the second join uses it) carrying one
protocol per configured assignor, each with a `ConsumerProtocol` subscription. The
coordinator picks the protocol every member supports (the first of the leader's list
that all share). The leader gets every member's subscription, runs the chosen assignor
over the partition counts from Metadata and sends the result with SyncGroup; followers
send an empty SyncGroup and all receive their own assignment.

While a member: Heartbeat every `heartbeat_interval_ms`; REBALANCE_IN_PROGRESS means
rejoin; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION mean the membership is gone (rejoin with
a new id); coordinator errors mean look the coordinator up again. OffsetCommit carries
the generation and member id; OffsetFetch reads committed offsets. LeaveGroup on close.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafkafast.client.assignors import ASSIGNORS
from kafkafast.client.cluster import Cluster, OffsetAndMetadata, TopicPartition
from kafkafast.client.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)
from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import (
    IllegalGenerationError,
    KafkaError,
    MemberIdRequiredError,
    NetworkError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    for_code,
)

logger = logging.getLogger("kafkafast.client.group")

_COORDINATOR_ERRORS = {14, 15, 16}  # load in progress, not available, not coordinator


class GroupMembership:
    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        assignors: list[str],
        session_timeout_ms: int = 45000,
        rebalance_timeout_ms: int = 300000,
        heartbeat_interval_ms: int = 3000,
        group_instance_id: str | None = None,
        retry_backoff_ms: int = 100,
    ) -> None:
        for a in assignors:
            if a not in ASSIGNORS:
                raise ValueError(f"unknown assignor {a!r} (known: {sorted(ASSIGNORS)})")
        self.cluster = cluster
        self.group_id = group_id
        self.assignors = list(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000.0
        self.group_instance_id = group_instance_id
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader = False
        self.coordinator: int = -1
        self.needs_rejoin = True
        self.assignment: list[TopicPartition] = []
        self._hb_task: asyncio.Task | None = None
        self.closed = False

    # -- coordinator ---------------------------------------------------------------------

    async def _coordinator_conn(self) -> Any:
        if self.coordinator < 0:
            self.coordinator = await self.cluster.find_coordinator(self.group_id)
        try:
            return await self.cluster.connection(self.coordinator)
        except NetworkError:
            self.coordinator = -1
            raise

    async def _send(self, request: Any, timeout: float | None = None) -> Any:
        conn = await self._coordinator_conn()
        try:
            return await conn.send(request, timeout=timeout)
        except NetworkError:
            self.coordinator = -1
            raise

    def _coordinator_error(self, code: int) -> bool:
        if code in _COORDINATOR_ERRORS:
            self.coordinator = -1
            return True
        return False

    # -- join / sync ---------------------------------------------------------------------

    async def join(self, topics: list[str], owned: list[TopicPartition]) -> list[TopicPartition]:
        """Joins (or rejoins) the group with a subscription to `topics`; returns the assignment."""
        deadline = time.monotonic() + self.rebalance_timeout_ms / 1000.0 + 30
        backoff = self.retry_backoff
        while True:
            try:
                result = await self._join_once(topics, owned)
                if result is not None:
                    self.assignment = result
                    self.needs_rejoin = False
                    self._start_heartbeat()
                    return result
            except (UnknownMemberIdError, IllegalGenerationError):
                self.member_id, self.generation = "", -1
            except RebalanceInProgressError:
                pass
            except NetworkError as exc:
                logger.info("group %s: %r; retrying", self.group_id, exc)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
            if time.monotonic() > deadline:
                raise RebalanceInProgressError(f"group {self.group_id}: could not join")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _join_once(self, topics: list[str], owned: list[TopicPartition]) -> list[TopicPartition] | None:
        P = gen.JoinGroupRequest.JoinGroupRequestProtocol
        protocols = []
        for name in self.assignors:
            sub = Subscription(sorted(topics), owned_partitions=[(t, p) for t, p in owned],
                               generation_id=self.generation)
            if name == "sticky":
                sub.user_data = encode_sticky_user_data([(t, p) for t, p in owned], self.generation)
            protocols.append(P(name=name, metadata=encode_subscription(sub)))
        req = gen.JoinGroupRequest(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                                   rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                                   group_instance_id=self.group_instance_id, protocol_type="consumer",
                                   protocols=protocols, reason=None)
        resp = await self._send(req, timeout=self.rebalance_timeout_ms / 1000.0 + 5)
        code = resp.error_code
        if code == MemberIdRequiredError.code:
            self.member_id = resp.member_id
            return None
        if code:
            if self._coordinator_error(code):
                return None
            if code == UnknownMemberIdError.code:
                self.member_id = ""
            raise for_code(code)(f"JoinGroup {self.group_id}")
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        self.protocol = resp.protocol_name
        self.leader = resp.leader == resp.member_id
        assignments = []
        if self.leader:
            assignments = await self._assign(resp.members)
        sreq = gen.SyncGroupRequest(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                                    group_instance_id=self.group_instance_id, protocol_type="consumer",
                                    protocol_name=self.protocol, assignments=assignments)
        sresp = await self._send(sreq, timeout=self.rebalance_timeout_ms / 1000.0 + 5)
        if sresp.error_code:
            if self._coordinator_error(sresp.error_code):
                return None
            raise for_code(sresp.error_code)(f"SyncGroup {self.group_id}")
        a = decode_assignment(sresp.assignment)
        return [TopicPartition(t, p) for t, p in a.partitions]

    async def _assign(self, members: list[Any]) -> list[Any]:
        subs = {m.member_id: decode_subscription(m.metadata) for m in members}
        topics = sorted({t for s in subs.values() for t in s.topics})
        self.cluster.add_topics(topics)
        await self.cluster.refresh_metadata()
        counts = {}
        for t in topics:
            parts = self.cluster.partitions_for(t)
            if parts:
                counts[t] = len(parts)
        assignor = ASSIGNORS[self.protocol or self.assignors[0]]
        result = assignor(counts, subs)
        logger.info("group %s generation %d: %s assigned %s", self.group_id, self.generation, self.protocol,
                    {m: len(v) for m, v in result.items()})
        A = gen.SyncGroupRequest.SyncGroupRequestAssignment
        return [A(member_id=m, assignment=encode_assignment(Assignment(tps))) for m, tps in result.items()]

    # -- heartbeat -----------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        if self._hb_task is None or self._hb_task.done():
            self._hb_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.heartbeat_interval)
            if self.needs_rejoin or self.generation < 0:
                continue
            try:
                resp = await self._send(gen.HeartbeatRequest(group_id=self.group_id, generation_id=self.generation,
                                                             member_id=self.member_id,
                                                             group_instance_id=self.group_instance_id))
                code = resp.error_code
            except KafkaError as exc:
                logger.info("group %s heartbeat: %r", self.group_id, exc)
                continue
            if code == 0:
                continue
            if code == RebalanceInProgressError.code:
                self.needs_rejoin = True
            elif code in (UnknownMemberIdError.code, IllegalGenerationError.code, 82):
                self.member_id, self.generation = "", -1
                self.needs_rejoin = True
            elif not self._coordinator_error(code):
                logger.warning("group %s heartbeat error %s", self.group_id, for_code(code).__name__)

    # -- offsets -------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], *, in_group: bool = True) -> None:
        if not offsets:
            return
        T = gen.OffsetCommitRequest.OffsetCommitRequestTopic
        Pt = T.OffsetCommitRequestPartition
        topics: dict[str, Any] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, T(name=tp.topic, partitions=[])).partitions.append(
                Pt(partition_index=tp.partition, committed_offset=om.offset, committed_leader_epoch=-1,
                   commit_timestamp=-1, committed_metadata=om.metadata))
        for attempt in range(5):
            req = gen.OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation if in_group else -1,
                member_id=self.member_id if in_group else "",
                group_instance_id=self.group_instance_id if in_group else None,
                retention_time_ms=-1, topics=list(topics.values()))
            try:
                resp = await self._send(req)
            except NetworkError:
                await asyncio.sleep(self.retry_backoff * (attempt + 1))
                continue
            errors = {p.error_code for t in resp.topics for p in t.partitions if p.error_code}
            if not errors:
                return
            code = errors.pop()
            if self._coordinator_error(code) or for_code(code).retriable:
                await asyncio.sleep(self.retry_backoff * (attempt + 1))
                continue
            if code in (UnknownMemberIdError.code, IllegalGenerationError.code, RebalanceInProgressError.code):
                self.needs_rejoin = True
            raise for_code(code)(f"OffsetCommit {self.group_id}")
        raise NetworkError(f"OffsetCommit {self.group_id}: coordinator unavailable")

    async def fetch_committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        T = gen.OffsetFetchRequest.OffsetFetchRequestTopic
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        for attempt in range(10):
            conn = await self._coordinator_conn()
            version = min(conn.version(9), 7)  # v8+ moves to per-group lists
            req = gen.OffsetFetchRequest(group_id=self.group_id,
                                         topics=[T(name=t, partition_indexes=ps) for t, ps in topics.items()],
                                         require_stable=False)
            try:
                resp = await conn.send(req, version=version)
            except NetworkError:
                self.coordinator = -1
                await asyncio.sleep(self.retry_backoff * (attempt + 1))
                continue
            if resp.error_code:
                if self._coordinator_error(resp.error_code) or for_code(resp.error_code).retriable:
                    await asyncio.sleep(self.retry_backoff * (attempt + 1))
                    continue
                raise for_code(resp.error_code)(f"OffsetFetch {self.group_id}")
            out: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise for_code(p.error_code)(f"OffsetFetch {t.name}-{p.partition_index}")
                    out[TopicPartition(t.name, p.partition_index)] = (
                        OffsetAndMetadata(p.committed_offset, p.metadata or "") if p.committed_offset >= 0 else None)
            return out
        raise NetworkError(f"OffsetFetch {self.group_id}: coordinator unavailable")

    async def leave(self) -> None:
        self.closed = True
        if self._hb_task is not None:
            self._hb_task.cancel()
        if not self.member_id or self.generation < 0:
            return
        try:
            conn = await self._coordinator_conn()
            v = conn.version(13)
            M = gen.LeaveGroupRequest.MemberIdentity
            req = gen.LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id,
                                        members=[M(member_id=self.member_id, group_instance_id=self.group_instance_id,
                                                   reason=None)])
            await conn.send(req, version=v, timeout=5.0)
        except KafkaError as exc:
            logger.info("group %s: LeaveGroup failed: %r", self.group_id, exc)
        self.member_id, self.generation = "", -1


__all__ = ["GroupMembership"]
