"""The group coordinator: classic consumer groups, committed offsets, and (through
`consumer_coordinator.ConsumerProtocol`, in the same `groups` map) the groups of the
next-generation consumer protocol (KIP-848).

All group state lives in one `GroupCoordinator` and changes only on the event loop, so
there are no locks; the handlers in `kafkafast/broker/handlers/` only translate requests
and responses. A JoinGroup or SyncGroup that has to wait for other members parks on a
future that the state machine resolves (see `kafkafast/broker/groups/group.py` for the
states).

Persistence: every committed offset and every group's metadata (generation, protocol,
leader, members with their subscription and assignment) is appended to the compacted
internal topic `__consumer_offsets`, in Kafka's record formats (`groups/offsets_records.py`),
to partition `partition_for(group_id)` = (Java `String.hashCode` & 0x7fffffff) % number of
partitions. On start-up the partitions this process owns are read back into memory; while
that runs, requests for their groups get COORDINATOR_LOAD_IN_PROGRESS.

Timers (loop `call_later`): a member's session expiry (reset by every heartbeat, join,
sync and commit), the join phase (initial rebalance delay for a group leaving Empty, then
the largest rebalance timeout of the members), the sync phase (members that never send
SyncGroup within the rebalance timeout are removed), pending MEMBER_ID_REQUIRED joins
(session timeout), and the periodic offset expiry (offsets.retention.check.interval.ms), which
also lets share groups forget their deleted topics (`ShareGroups.forget_deleted_topics`).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from kafkafast import clock
from kafkafast.broker.consumer_coordinator import ConsumerProtocol
from kafkafast.broker.groups.consumer_group import (ConsumerGroup, assignment_bytes, group_tombstones,
                                                     subscription_bytes)
from kafkafast.broker.groups.group import Group, GroupState, Member, static_leaver
from kafkafast.broker.groups.offsets_records import (
    CommittedOffset,
    ConsumerGroupRecord,
    consumer_group_key,
    consumer_group_value,
    GroupRecord,
    OffsetRecord,
    ShareGroupRecord,
    decode_record,
    group_key,
    group_value,
    offset_key,
    offset_value,
    value_versions,
)
from kafkafast.config_def import ibp_at_least
from kafkafast.protocol._generated.coordinator_records import GroupMetadataValue
from kafkafast.protocol import errors as E
from kafkafast.records import BatchBuilder, iter_record_batches

log = logging.getLogger("kafkafast.groups")

OFFSETS_TOPIC = "__consumer_offsets"
EC = E.ErrorCode
NONE = 0

STABLE = GroupState.STABLE
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
DEAD = GroupState.DEAD

# APIs for which Kafka accepts an empty group id (only null is invalid).
_EMPTY_ID_OK = ("offset_commit", "offset_fetch", "describe_groups", "delete_groups")
_LOAD_CHUNK_BYTES = 1 << 20


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def now_ms() -> int:
    return clock.now_ms()


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # only for the leader
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.groups: dict[str, Group] = {}
        self.loading: set[int] = set()
        self.initial_rebalance_delay_ms = cfg.get_int("group.initial.rebalance.delay.ms")
        self.min_session_timeout_ms = cfg.get_int("group.min.session.timeout.ms")
        self.max_session_timeout_ms = cfg.get_int("group.max.session.timeout.ms")
        self.max_group_size = cfg.get_int("group.max.size")
        self.offsets_retention_ms = cfg.get_int("offsets.retention.minutes") * 60_000
        self.retention_check_interval_ms = cfg.get_int("offsets.retention.check.interval.ms")
        self.metadata_max_bytes = int(cfg.get("offset.metadata.max.bytes") or 4096)
        # The __consumer_offsets value versions Kafka writes at inter.broker.protocol.version, and
        # whether static members may join (2.3 and later: older group values drop their instance id)
        ibp = cfg.get("inter.broker.protocol.version")
        self.group_value_version, self.offset_value_version = value_versions(ibp)
        self.static_membership = ibp_at_least(ibp, "2.3-IV0")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = False
        # Offsets committed in open transactions (TxnOffsetCommit), applied on the COMMIT marker:
        # producer id -> group -> (topic, partition) -> offset
        self.pending_txn: dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]] = {}
        # Groups of the consumer protocol (KIP-848) share `groups` with classic ones.
        self.consumer = ConsumerProtocol(self)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        meta = self.broker.topics.get(OFFSETS_TOPIC)
        if meta is not None:
            owned = [i for i in range(meta.partitions) if self._owns(i)]
            self.loading.update(owned)
            self._tasks.append(self._loop.create_task(self._load_partitions(owned)))
        self._tasks.append(self._loop.create_task(self._expire_offsets_periodically()))

    async def stop(self) -> None:
        self._stopped = True
        await cancel_tasks(self._tasks)
        for group in self.groups.values():
            self._release_group(group)

    # -- placement ---------------------------------------------------------------------------
    def num_partitions(self) -> int:
        meta = self.broker.topics.get(OFFSETS_TOPIC)
        if meta is not None:
            return meta.partitions
        return self.broker.config.get_int("offsets.topic.num.partitions")

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition that holds the group (Kafka's placement)."""
        return (java_string_hash(group_id) & 0x7FFFFFFF) % self.num_partitions()

    def ensure_offsets_topic(self) -> None:
        if self.broker.topics.get(OFFSETS_TOPIC) is None:
            try:
                self.broker.create_topic(OFFSETS_TOPIC, self.broker.config.get_int("offsets.topic.num.partitions"))
            except E.TopicAlreadyExistsError:
                self.broker.refresh_topics()

    def _offsets_partition(self, index: int) -> Any:
        return self.broker.get_partition(OFFSETS_TOPIC, index)

    def _owns(self, index: int) -> bool:
        part = self._offsets_partition(index)
        return part is not None and self.broker.owns(part)

    def status(self, group_id: str | None, api: str) -> int:
        """Kafka's `validateGroupStatus`: INVALID_GROUP_ID, COORDINATOR_LOAD_IN_PROGRESS,
        NOT_COORDINATOR, or NONE."""
        if group_id is None or (group_id == "" and api not in _EMPTY_ID_OK):
            return EC.INVALID_GROUP_ID
        if self._stopped:
            return EC.COORDINATOR_NOT_AVAILABLE
        self.ensure_offsets_topic()
        p = self.partition_for(group_id)
        if p in self.loading:
            return EC.COORDINATOR_LOAD_IN_PROGRESS
        if not self._owns(p):
            return EC.NOT_COORDINATOR
        return NONE

    # -- timers ------------------------------------------------------------------------------
    def _later(self, delay_ms: float, fn, *args) -> asyncio.TimerHandle:
        assert self._loop is not None
        return clock.call_later(self._loop, delay_ms, fn, *args)

    def _cancel_group_timers(self, group: Any) -> None:
        if isinstance(group, ConsumerGroup):
            self.consumer.cancel_timers(group)
            return
        for h in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            if h is not None:
                h.cancel()
        group.join_timer = group.sync_timer = None
        for m in group.members.values():
            if m.heartbeat_timer is not None:
                m.heartbeat_timer.cancel()
                m.heartbeat_timer = None

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self._later(member.session_timeout_ms, self._on_heartbeat_expired, group, member)

    def _on_heartbeat_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join or member.awaiting_sync:
            # Members parked in JoinGroup/SyncGroup are waiting on us, not dead (Kafka's shouldKeepAlive).
            self._schedule_heartbeat(group, member)
            return
        log.info("group %s: member %s session timed out", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    # -- JoinGroup ---------------------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]], *,
                         require_known_member_id: bool) -> JoinResult:
        err = self.status(group_id, "join_group")
        if err:
            return JoinResult(err, member_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(EC.INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        protocols = [(n, bytes(m)) for n, m in protocols]
        unknown = member_id == ""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            if group.members:  # a classic member in a consumer group (group_migration.py)
                error, mid, generation, name = self.consumer.migration.join(
                    group, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                    rebalance_timeout_ms, protocol_type, protocols, require_known_member_id=require_known_member_id)
                if not error:
                    error = await self.wait_replicated(group_id)  # as a heartbeat: answered once the ISR has it
                if error:
                    return JoinResult(error, mid)
                return JoinResult(NONE, mid, generation, "consumer", name, "", [])
            # An empty consumer group becomes a classic group; its offsets stay.
            error = self._append(group_id, group_tombstones(group), now_ms())
            if error:
                return JoinResult(error, member_id)
            self._cancel_group_timers(group)
            group = self.groups[group_id] = Group(group_id, offsets=group.offsets, state_timestamp=now_ms())
        if group is None:
            if not unknown:
                return JoinResult(EC.UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp=now_ms())
        if not self._accept_joining_member(group, member_id):
            return JoinResult(EC.GROUP_MAX_SIZE_REACHED, "")
        args = (group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, protocols)
        if unknown:
            outcome = self._join_new_member(group, *args, require_known_member_id=require_known_member_id)
        else:
            outcome = self._join_current_member(group, member_id, *args)
        if group.is_(PREPARING):
            self._maybe_complete_join(group)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.is_(EMPTY) or group.is_(DEAD):
            return True
        if group.has(member_id) or member_id in group.pending_members:
            return True
        return len(group.members) + len(group.pending_members) < self.max_group_size

    def _join_new_member(self, group: Group, group_instance_id, client_id, client_host, session_timeout_ms,
                         rebalance_timeout_ms, protocol_type, protocols, *, require_known_member_id: bool):
        if group.is_(DEAD):
            return JoinResult(EC.COORDINATOR_NOT_AVAILABLE, "")
        if not group.supports_protocols(protocol_type, protocols):
            return JoinResult(EC.INCONSISTENT_GROUP_PROTOCOL, "")
        new_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
        if group_instance_id is not None:
            old_id = group.static_members.get(group_instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static_member(group, group_instance_id, old_id, new_id, session_timeout_ms,
                                                   rebalance_timeout_ms, protocols)
            return self._add_member_and_rebalance(group, new_id, group_instance_id, client_id, client_host,
                                                  session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if require_known_member_id:
            # KIP-394: hand out the id first; the member joins for real with it.
            group.pending_members[new_id] = self._later(session_timeout_ms, self._on_pending_member_expired,
                                                        group, new_id)
            return JoinResult(EC.MEMBER_ID_REQUIRED, new_id)
        return self._add_member_and_rebalance(group, new_id, None, client_id, client_host, session_timeout_ms,
                                              rebalance_timeout_ms, protocol_type, protocols)

    def _on_pending_member_expired(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None and group.is_(PREPARING):
            self._maybe_complete_join(group)

    def _join_current_member(self, group: Group, member_id, group_instance_id, client_id, client_host,
                             session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols):
        if group.is_(DEAD):
            return JoinResult(EC.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(protocol_type, protocols):
            return JoinResult(EC.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return self._add_member_and_rebalance(group, member_id, group_instance_id, client_id, client_host,
                                                  session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return JoinResult(EC.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None or group.is_(EMPTY):
            return JoinResult(EC.UNKNOWN_MEMBER_ID, member_id)
        if group.is_(PREPARING):
            return self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                     rebalance_timeout_ms)
        if group.is_(COMPLETING):
            if member.matches(protocols):
                # A retried join of the current generation: answer with it again.
                return self._join_result(group, member)
            return self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                     rebalance_timeout_ms)
        # Stable: the leader rejoins to force a rebalance; others only when their metadata changed.
        if member_id == group.leader_id or not member.matches(protocols):
            return self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                     rebalance_timeout_ms)
        return self._join_result(group, member)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader_id:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                       for m in group.members.values()]
        return JoinResult(NONE, member.member_id, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    def _add_member_and_rebalance(self, group: Group, member_id, group_instance_id, client_id, client_host,
                                  session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols):
        assert self._loop is not None
        member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, is_new=True)
        member.join_future = self._loop.create_future()
        group.add(member)
        if group.is_(PREPARING) and group.generation == 0:
            group.new_member_added = True
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        return member.join_future

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols, session_timeout_ms,
                                     rebalance_timeout_ms):
        assert self._loop is not None
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if member.join_future is None or member.join_future.done():
            member.join_future = self._loop.create_future()
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")
        return member.join_future

    def _replace_static_member(self, group: Group, instance_id: str, old_id: str, new_id: str,
                               session_timeout_ms: int, rebalance_timeout_ms: int, protocols):
        """A static member rejoins with an unknown member id: the old id is fenced (KIP-345). As
        Kafka's `updateStaticMemberAndRebalance`: in a Stable group whose protocol of the next
        generation stays the one chosen, the member gets the current generation at once, with no
        rebalance (whatever its new subscription metadata, and even when it led), and the old
        leader id, so that it does not compute an assignment the stable group would not send; a
        group completing a rebalance rebalances again; one preparing a rebalance waits for it."""
        assert self._loop is not None
        old = group.members[old_id]
        _resolve(old.join_future, JoinResult(EC.FENCED_INSTANCE_ID, old_id))
        _resolve(old.sync_future, SyncResult(EC.FENCED_INSTANCE_ID))
        old.join_future = old.sync_future = None
        current_leader = group.leader_id
        before = (old.session_timeout_ms, old.rebalance_timeout_ms, old.protocols)
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocols = protocols
        if group.is_(PREPARING):
            member.join_future = self._loop.create_future()
            return member.join_future
        if group.is_(STABLE) and group.protocol_name == group.select_protocol():
            error = self._store_group(group)
            if error:  # the new member id is not persisted: the old member stays, as in Kafka
                member.session_timeout_ms, member.rebalance_timeout_ms, member.protocols = before
                self._schedule_heartbeat(group, group.replace_static_member(instance_id, new_id, old_id))
                return JoinResult(error, new_id)
            self._schedule_heartbeat(group, member)
            return JoinResult(NONE, new_id, group.generation, group.protocol_type, group.protocol_name,
                              current_leader or "", [])
        member.join_future = self._loop.create_future()
        self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        return member.join_future

    # -- rebalance phases --------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(COMPLETING):
            self._reset_and_propagate_assignment_error(group, EC.REBALANCE_IN_PROGRESS)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()
        was_empty = group.is_(EMPTY)
        group.transition(PREPARING, now_ms())
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation, reason)
        if group.join_timer is not None:
            group.join_timer.cancel()
        timeout = group.max_rebalance_timeout_ms()
        if was_empty and self.initial_rebalance_delay_ms > 0:
            delay = min(self.initial_rebalance_delay_ms, timeout)
            group.new_member_added = False
            group.in_initial_delay = True
            group.join_timer = self._later(delay, self._on_initial_delay, group, max(timeout - delay, 0))
        else:
            group.in_initial_delay = False
            group.join_timer = self._later(timeout, self._complete_join, group)

    def _on_initial_delay(self, group: Group, remaining_ms: int) -> None:
        """Kafka's InitialDelayedJoin: wait again while new members keep arriving."""
        group.join_timer = None
        if not group.is_(PREPARING):
            group.in_initial_delay = False
            return
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            group.join_timer = self._later(delay, self._on_initial_delay, group, max(remaining_ms - delay, 0))
            return
        group.in_initial_delay = False
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        # While the initial delay runs, the join completes only when the delay ends.
        if group.in_initial_delay:
            return
        if group.is_(PREPARING) and group.all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        group.in_initial_delay = False
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        if not group.is_(PREPARING):
            return
        for m in group.not_yet_rejoined():
            if m.group_instance_id is not None:
                continue  # a static member stays, as in Kafka (KIP-345): its partitions wait for it
            log.info("group %s: member %s did not rejoin in time", group.group_id, m.member_id)
            if m.heartbeat_timer is not None:
                m.heartbeat_timer.cancel()
            group.remove(m.member_id)
        joined = [m.member_id for m in group.members.values() if m.awaiting_join]
        if group.members and not joined:
            # only static members are left and none rejoined: wait once more (Kafka's onCompleteJoin);
            # their sessions end it if they never come back
            log.info("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            group.join_timer = self._later(group.max_rebalance_timeout_ms(), self._complete_join, group)
            return
        if group.leader_id not in joined and joined:
            group.leader_id = joined[0]  # the leader did not rejoin: a member that did leads (maybeElectNewJoinedLeader)
        group.generation += 1
        now = now_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(EMPTY, now)
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            self._store_group(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition(COMPLETING, now)
        group.pending_sync = set(group.members)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol_name, group.leader_id)
        for m in list(group.members.values()):
            fut, m.join_future = m.join_future, None
            m.is_new = False
            _resolve(fut, self._join_result(group, m))
            self._schedule_heartbeat(group, m)
        group.sync_timer = self._later(group.max_rebalance_timeout_ms(), self._on_sync_timeout, group,
                                       group.generation)

    def _on_sync_timeout(self, group: Group, generation: int) -> None:
        group.sync_timer = None
        if group.generation != generation or group.state not in (COMPLETING, STABLE) or not group.pending_sync:
            return
        missing = [group.members[m] for m in group.pending_sync if m in group.members]
        group.pending_sync.clear()
        for m in missing:
            log.info("group %s: member %s did not sync in time", group.group_id, m.member_id)
            if m.heartbeat_timer is not None:
                m.heartbeat_timer.cancel()
                m.heartbeat_timer = None
            group.remove(m.member_id)
        if missing:
            if group.members:
                self._prepare_rebalance(group, "members did not sync")
            else:
                self._prepare_rebalance(group, "no members left")
                self._maybe_complete_join(group)

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for m in group.members.values():
            m.assignment = b""
            fut, m.sync_future = m.sync_future, None
            _resolve(fut, SyncResult(error))

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        fut, member.join_future = member.join_future, None
        _resolve(fut, JoinResult(EC.UNKNOWN_MEMBER_ID, member.member_id))
        sfut, member.sync_future = member.sync_future, None
        _resolve(sfut, SyncResult(EC.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, f"removing member {member.member_id}")
        elif group.is_(PREPARING):
            self._maybe_complete_join(group)

    # -- SyncGroup ---------------------------------------------------------------------------
    async def sync_group(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncResult:
        err = self.status(group_id, "sync_group")
        if err:
            return SyncResult(err)
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            error, assignment, name = self.consumer.migration.sync(group, generation, member_id, group_instance_id,
                                                                   protocol_type, protocol_name)
            return SyncResult(error, assignment, "consumer" if not error else None, name)
        if group is None:
            return SyncResult(EC.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return SyncResult(EC.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return SyncResult(EC.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(EC.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return SyncResult(EC.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(EC.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(EMPTY):
            return SyncResult(EC.UNKNOWN_MEMBER_ID)
        if group.is_(PREPARING):
            return SyncResult(EC.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member_id)
        self._schedule_heartbeat(group, member)
        if group.is_(STABLE):
            return SyncResult(NONE, member.assignment, group.protocol_type, group.protocol_name)
        # CompletingRebalance: wait for the leader's assignment.
        assert self._loop is not None
        if member.sync_future is None or member.sync_future.done():
            member.sync_future = self._loop.create_future()
        fut = member.sync_future
        if member_id == group.leader_id:
            given = {mid: bytes(a) for mid, a in assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            error = self._store_group(group)
            if group.is_(COMPLETING) and group.generation == generation:
                if error:
                    self._reset_and_propagate_assignment_error(group, error)
                    self._maybe_prepare_rebalance(group, "failed to store the group metadata")
                else:
                    for m in group.members.values():
                        f, m.sync_future = m.sync_future, None
                        _resolve(f, SyncResult(NONE, m.assignment, group.protocol_type, group.protocol_name))
                    group.transition(STABLE, now_ms())
        return await fut

    # -- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> int:
        err = self.status(group_id, "heartbeat")
        if err:
            return err
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return self.consumer.migration.heartbeat(group, member_id, group_instance_id, generation)
        if group is None:
            return EC.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return EC.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return EC.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return EC.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return EC.ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return EC.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, member)
        return EC.REBALANCE_IN_PROGRESS if group.is_(PREPARING) else NONE

    # -- LeaveGroup --------------------------------------------------------------------------
    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(top-level error, one error per leaving (member id, group instance id))."""
        err = self.status(group_id, "leave_group")
        if err:
            return err, []
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):  # its classic members leave so; the others by heartbeat (epoch -1)
            return NONE, self.consumer.migration.leave(group, leaving)
        if group is None:
            return NONE, [EC.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_(DEAD):
            return EC.COORDINATOR_NOT_AVAILABLE, []
        errors = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                current, error = static_leaver(group.static_members, group.members, member_id, instance_id)
                if error:
                    errors.append(error)
                else:
                    log.info("group %s: static member %s leaves", group_id, instance_id)
                    self._remove_member_and_update_group(group, group.members[current])
                    errors.append(NONE)
            elif member_id in group.pending_members:
                group.pending_members.pop(member_id).cancel()
                if group.is_(PREPARING):
                    self._maybe_complete_join(group)
                errors.append(NONE)
            elif member_id not in group.members:
                errors.append(EC.UNKNOWN_MEMBER_ID)
            else:
                log.info("group %s: member %s leaves", group_id, member_id)
                self._remove_member_and_update_group(group, group.members[member_id])
                errors.append(NONE)
        return NONE, errors

    # -- OffsetCommit ------------------------------------------------------------------------
    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                       entries: list[OffsetCommitEntry], *, retention_ms: int = -1, api_version: int = 9,
                       ) -> dict[tuple[str, int], int]:
        """Error per (topic, partition); the valid ones are written to `__consumer_offsets`.
        `generation` is a consumer group's member epoch (OffsetCommit v9, KIP-848)."""
        keys = [(e.topic, e.partition) for e in entries]
        group, err = self._group_for_commit(group_id, member_id, group_instance_id, generation, "offset_commit")
        if not err and isinstance(group, ConsumerGroup):
            err = self.consumer.check_commit(group, member_id, generation, api_version=api_version,
                                             transactional=False)
            return dict.fromkeys(keys, err) if err else self._store_offsets(group, entries, retention_ms)
        if err:
            return dict.fromkeys(keys, err)
        if not (generation < 0 and group.is_(EMPTY)):
            member = group.members.get(member_id)
            if member is None:
                return dict.fromkeys(keys, EC.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                return dict.fromkeys(keys, EC.ILLEGAL_GENERATION)
            if group.is_(COMPLETING):
                return dict.fromkeys(keys, EC.REBALANCE_IN_PROGRESS)
            self._schedule_heartbeat(group, member)
        return self._store_offsets(group, entries, retention_ms)

    def _group_for_commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                          api: str) -> tuple[Any, int]:
        """(group, 0) or (None, error): the checks OffsetCommit and TxnOffsetCommit share; an
        unknown group is created for a commit without generation."""
        err = self.status(group_id, api)
        if err:
            return None, err
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return None, EC.ILLEGAL_GENERATION
            group = self.groups[group_id] = Group(group_id, state_timestamp=now_ms())
        if group.is_(DEAD):
            return None, EC.COORDINATOR_NOT_AVAILABLE
        if isinstance(group, Group) and group.is_static_member_fenced(member_id, group_instance_id):
            return None, EC.FENCED_INSTANCE_ID
        return group, NONE

    def _store_offsets(self, group: Group, entries: list[OffsetCommitEntry], retention_ms: int,
                       producer: tuple[int, int] | None = None) -> dict[tuple[str, int], int]:
        """Writes the offsets; they become the group's at once, or (`producer`: a transaction's
        id and epoch) when its COMMIT marker arrives."""
        result: dict[tuple[str, int], int] = {}
        ts = now_ms()
        expire = ts + retention_ms if retention_ms >= 0 else -1
        records: list[tuple[bytes, bytes | None]] = []
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for e in entries:
            metadata = e.metadata if e.metadata is not None else ""
            if len(metadata.encode("utf-8")) > self.metadata_max_bytes:
                result[(e.topic, e.partition)] = EC.OFFSET_METADATA_TOO_LARGE
                continue
            c = CommittedOffset(e.offset, e.leader_epoch, metadata, ts, expire)
            accepted[(e.topic, e.partition)] = c
            records.append((offset_key(group.group_id, e.topic, e.partition), offset_value(c, self.offset_value_version)))
        if records:
            error = self._append(group.group_id, records, ts, producer=producer)
            for key in accepted:
                result[key] = error
            if not error:
                if producer is None:
                    group.offsets.update(accepted)
                else:
                    self.pending_txn.setdefault(producer[0], {}).setdefault(group.group_id, {}).update(accepted)
        return result

    # -- TxnOffsetCommit (KIP-98, KIP-447) ---------------------------------------------------
    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                           group_instance_id: str | None, generation: int, entries: list[OffsetCommitEntry],
                           ) -> dict[tuple[str, int], int]:
        """Offsets written to `__consumer_offsets` in the producer's transaction (a transactional
        batch); they become the committed offsets only when the COMMIT marker reaches that
        partition (`complete_txn`). Group fencing as Kafka's `doTxnCommitOffsets`: a member
        id (not "") must be in the group, a generation >= 0 must be the group's."""
        keys = [(e.topic, e.partition) for e in entries]
        group, err = self._group_for_commit(group_id, member_id, group_instance_id, generation, "txn_offset_commit")
        if not err and isinstance(group, ConsumerGroup):
            err = self.consumer.check_commit(group, member_id, generation, api_version=None, transactional=True)
            if err:
                return dict.fromkeys(keys, err)
            return self._store_offsets(group, entries, -1, producer=(producer_id, producer_epoch))
        if not err and member_id and member_id not in group.members:
            err = EC.UNKNOWN_MEMBER_ID
        if not err and generation >= 0 and generation != group.generation:
            err = EC.ILLEGAL_GENERATION
        if err:
            return dict.fromkeys(keys, err)
        return self._store_offsets(group, entries, -1, producer=(producer_id, producer_epoch))

    def complete_txn(self, partition_index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker reached `__consumer_offsets` partition `partition_index`."""
        per_group = self.pending_txn.get(producer_id)
        if not per_group:
            return
        for gid in [g for g in per_group if self.partition_for(g) == partition_index]:
            offsets = per_group.pop(gid)
            group = self.groups.get(gid)
            if commit and group is not None:
                group.offsets.update(offsets)
        if not per_group:
            del self.pending_txn[producer_id]

    # -- OffsetFetch -------------------------------------------------------------------------
    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      member: tuple[str | None, int] | None = None,
                      ) -> tuple[int, list[tuple[str, int, CommittedOffset | None]]]:
        """(group error, [(topic, partition, committed or None)]); all committed when None.
        `member`: the (member id, member epoch) of OffsetFetch v9, checked in a consumer group."""
        err = self.status(group_id, "offset_fetch")
        if err:
            return err, []
        group = self.groups.get(group_id)
        if member is not None and isinstance(group, ConsumerGroup):
            err = self.consumer.check_fetch(group, member[0], member[1])
            if err:
                return err, []
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return NONE, [(t, p, c) for (t, p), c in sorted(offsets.items())]
        return NONE, [(t, p, offsets.get((t, p))) for t, p in partitions]

    # -- DescribeGroups / ListGroups ---------------------------------------------------------
    def describe_group(self, group_id: str) -> GroupSummary:
        err = self.status(group_id, "describe_groups")
        if err:
            return GroupSummary(err, group_id, "", "", "", [])
        group = self.groups.get(group_id)
        if group is None:
            return GroupSummary(NONE, group_id, DEAD.value, "", "", [])
        if isinstance(group, ConsumerGroup):
            return self._describe_consumer_group(group)
        stable = group.is_(STABLE)
        members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.metadata_for(group.protocol_name) if stable else b"",
                                 m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupSummary(NONE, group_id, group.state.value, group.protocol_type or "",
                            (group.protocol_name or "") if stable else "", members)

    def _describe_consumer_group(self, group: ConsumerGroup) -> GroupSummary:
        """A consumer group in DescribeGroups' terms, as Kafka 4.0 answers: protocol type
        "consumer", the assignor as the protocol, each member's subscription and current
        assignment in the consumer protocol's formats."""
        named = self.consumer.named
        members = [MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host,
                                 subscription_bytes(sorted(group.member_topics(m))),
                                 assignment_bytes(named(m.assigned)))
                   for m in group.members.values()]
        return GroupSummary(NONE, group.group_id, group.state_name, "consumer",
                            group.assignor_name or self.consumer.assignors[0], members)

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type) of every group, optionally only in `states`."""
        wanted = {s.lower() for s in states} if states else None
        out = []
        for group in self.groups.values():
            if group.is_(DEAD) or self.partition_for(group.group_id) in self.loading:
                continue
            if isinstance(group, ConsumerGroup):
                state, kind = group.state_name, "consumer"
            else:
                state, kind = group.state.value, "classic"
            if wanted is not None and state.lower() not in wanted:
                continue
            out.append((group.group_id, group.protocol_type or "", state, kind))
        return out

    # -- DeleteGroups / OffsetDelete ---------------------------------------------------------
    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for gid in group_ids:
            err = self.status(gid, "delete_groups")
            if err:
                out[gid] = err
                continue
            group = self.groups.get(gid)
            if group is None or group.is_(DEAD):
                out[gid] = EC.GROUP_ID_NOT_FOUND
            elif not group.is_(EMPTY):
                out[gid] = EC.NON_EMPTY_GROUP
            else:
                records = [(offset_key(gid, t, p), None) for t, p in group.offsets]
                records += group_tombstones(group)
                error = self._append(gid, records, now_ms())
                if error:
                    out[gid] = error
                    continue
                self._cancel_group_timers(group)
                group.transition(DEAD, now_ms())
                group.offsets.clear()
                del self.groups[gid]
                out[gid] = NONE
        return out

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        err = self.status(group_id, "offset_delete")
        if err:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return EC.GROUP_ID_NOT_FOUND, {}
        result: dict[tuple[str, int], int] = {}
        if group.is_(EMPTY):
            doomed = list(partitions)
        elif group.protocol_type == "consumer":
            subscribed = group.subscribed_topics() or set()
            doomed = []
            for tp in partitions:
                if tp[0] in subscribed:
                    result[tp] = EC.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    doomed.append(tp)
        else:
            return EC.NON_EMPTY_GROUP, {}
        present = [tp for tp in doomed if tp in group.offsets]
        error = self._append(group_id, [(offset_key(group_id, t, p), None) for t, p in present], now_ms()) \
            if present else NONE
        if error:
            return error, {}
        for tp in doomed:
            group.offsets.pop(tp, None)
            result[tp] = NONE
        return NONE, result

    # -- offset expiry -----------------------------------------------------------------------
    async def _expire_offsets_periodically(self) -> None:
        while True:
            await clock.sleep(max(self.retention_check_interval_ms, 100))
            try:
                self.expire_offsets(now_ms())
                self.broker.share.groups.forget_deleted_topics(  # (share groups without members too)
                    lambda gid: self.partition_for(gid) not in self.loading and self._owns(self.partition_for(gid)))
            except Exception:
                log.exception("offset expiry failed")

    def expire_offsets(self, now: int) -> int:
        """Kafka's `cleanupGroupMetadata`: tombstones for expired offsets, Dead for groups left
        Empty without offsets. Offsets of a group with members never expire here; those of an
        Empty group count from when it became Empty; of a group that never used group
        management, from their commit."""
        removed = 0
        for gid, group in list(self.groups.items()):
            if self.partition_for(gid) in self.loading or not self._owns(self.partition_for(gid)):
                continue
            expired: list[tuple[str, int]] = []
            if group.protocol_type is None or group.is_(EMPTY):
                for tp, c in group.offsets.items():
                    if c.expire_timestamp >= 0:
                        due = now >= c.expire_timestamp
                    else:
                        base = group.state_timestamp if (group.protocol_type is not None and group.state_timestamp >= 0) \
                            else c.commit_timestamp
                        due = now - base >= self.offsets_retention_ms
                    if due:
                        expired.append(tp)
            records: list[tuple[bytes, bytes | None]] = [(offset_key(gid, t, p), None) for t, p in expired]
            dead = group.is_(EMPTY) and len(expired) == len(group.offsets) and not group.pending_members
            if dead:
                records += group_tombstones(group)
            if not records:
                continue
            if self._append(gid, records, now):
                continue
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            if dead:
                self._cancel_group_timers(group)
                group.transition(DEAD, now)
                del self.groups[gid]
                log.info("group %s: expired %d offsets; group removed", gid, len(expired))
        return removed

    # -- persistence -------------------------------------------------------------------------
    def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]], timestamp: int,
                producer: tuple[int, int] | None = None) -> int:
        """Write records to the group's partition (in a transaction when `producer` is its id
        and epoch); an error code (0 on success) as Kafka maps storage errors for the group APIs."""
        part = self._offsets_partition(self.partition_for(group_id))
        if part is None:
            return EC.COORDINATOR_NOT_AVAILABLE
        builder = (BatchBuilder(producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
                   if producer else BatchBuilder())
        for key, value in records:
            builder.append(timestamp, key, value)
        try:
            self.broker.append(part, bytearray(builder.build()))
        except (E.UnknownTopicOrPartitionError, E.NotEnoughReplicasError):
            return EC.COORDINATOR_NOT_AVAILABLE
        except (E.NotLeaderOrFollowerError, E.KafkaStorageError):  # Kafka's mapping, a full disk included
            return EC.NOT_COORDINATOR
        except (E.MessageTooLargeError, E.RecordListTooLargeError):
            return EC.INVALID_COMMIT_OFFSET_SIZE
        except E.InvalidProducerEpochError:  # a newer epoch of the producer wrote here already
            return EC.PRODUCER_FENCED
        except Exception:
            log.exception("group %s: writing to %s failed", group_id, OFFSETS_TOPIC)
            return EC.UNKNOWN_SERVER_ERROR
        return NONE

    async def wait_replicated(self, group_id: str) -> int:
        """Cluster mode: 0 once everything written to the group's partition is in every ISR
        member (offsets.commit.timeout.ms), else COORDINATOR_NOT_AVAILABLE, as Kafka answers
        a group write that did not complete; so a new coordinator after a failover knows
        whatever this one answered. Single node: 0 at once."""
        part = self._offsets_partition(self.partition_for(group_id))
        if part is None or not part.is_leader:
            return NONE
        timeout_s = self.broker.config.get_int("offsets.commit.timeout.ms") / 1000.0
        return EC.COORDINATOR_NOT_AVAILABLE if await part.wait_for_hw(part.log_end_offset, timeout_s) else NONE

    def store_consumer_group(self, group: ConsumerGroup, replaces_classic: bool = False) -> int:
        """Writes the consumer group's epoch (ConsumerGroupMetadata), and a tombstone for the
        classic group it replaces."""
        records: list[tuple[bytes, bytes | None]] = [(consumer_group_key(group.group_id),
                                                      consumer_group_value(group.group_epoch))]
        if replaces_classic:
            records.insert(0, (group_key(group.group_id), None))
        return self._append(group.group_id, records, now_ms())

    def _store_group(self, group: Group) -> int:
        return self._append(group.group_id, [self._group_record(group)], now_ms())

    def _group_record(self, group: Group) -> tuple[bytes, bytes]:
        """The group's GroupMetadata record."""
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation, protocol=group.protocol_name,
            leader=group.leader_id, current_state_timestamp=group.state_timestamp,
            members=[GroupMetadataValue.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms, subscription=m.metadata_for(group.protocol_name),
                assignment=m.assignment) for m in group.members.values()])
        return group_key(group.group_id), group_value(value, self.group_value_version)

    # -- loading -----------------------------------------------------------------------------
    def load_partition(self, index: int) -> None:
        """This broker now leads `__consumer_offsets` partition `index` (the replica manager says
        so): load its groups; an empty partition (a new topic's) has none, and serves at once."""
        if self._loop is None or self._stopped or nothing_to_load(self._offsets_partition(index)):
            return
        self.loading.add(index)
        self._tasks.append(self._loop.create_task(self._load_partitions([index])))

    def unload_partition(self, index: int) -> None:
        """Leadership of partition `index` moved away: forget its groups (NOT_COORDINATOR from now)."""
        self.loading.discard(index)
        for gid in [g for g in self.groups if self.partition_for(g) == index]:
            self._release_group(self.groups.pop(gid))
        self.broker.share.groups.unload(lambda gid: self.partition_for(gid) == index)

    def _release_group(self, group: Any, error: int = EC.NOT_COORDINATOR) -> None:
        """This coordinator lets go of the group (or the group changes kind): timers stop,
        parked requests get `error`."""
        self._cancel_group_timers(group)
        if isinstance(group, ConsumerGroup):
            return
        for m in group.members.values():
            _resolve(m.join_future, JoinResult(error, m.member_id))
            _resolve(m.sync_future, SyncResult(error))
            m.join_future = m.sync_future = None

    async def _load_partitions(self, partitions: list[int]) -> None:
        await load_each(partitions, self._load_partition, self.loading, OFFSETS_TOPIC)

    async def _load_partition(self, index: int) -> None:
        part = self._offsets_partition(index)
        if part is None:
            return
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        metas: dict[str, GroupMetadataValue | None] = {}
        consumer: dict[str, dict[tuple[str, str | None], Any]] = {}  # consumer groups (KIP-848): their records
        share: dict[str, dict[tuple[str, str | None], Any]] = {}  # share groups (KIP-932): their records
        pending: dict[int, dict[str, dict[tuple[str, int], CommittedOffset | None]]] = {}  # open transactions
        async for header, records in read_partition(part):
            if header.is_control:
                done = pending.pop(header.producer_id, {})
                if records and control_type_of(records[0]) == COMMIT_MARKER:
                    for gid, entries in done.items():
                        for key, value in entries.items():
                            if value is None:
                                offsets.setdefault(gid, {}).pop(key, None)
                            else:
                                offsets.setdefault(gid, {})[key] = value
                continue
            txn = pending.setdefault(header.producer_id, {}) if header.is_transactional else None
            for rec in records:
                decoded = decode_record(rec.key, rec.value)
                if txn is not None and isinstance(decoded, OffsetRecord):
                    txn.setdefault(decoded.group, {})[(decoded.topic, decoded.partition)] = decoded.value
                elif isinstance(decoded, OffsetRecord):
                    per_group = offsets.setdefault(decoded.group, {})
                    if decoded.value is None:
                        per_group.pop((decoded.topic, decoded.partition), None)
                    else:
                        per_group[(decoded.topic, decoded.partition)] = decoded.value
                elif isinstance(decoded, GroupRecord):
                    metas[decoded.group] = decoded.value
                elif isinstance(decoded, ConsumerGroupRecord):
                    consumer.setdefault(decoded.group, {})[(decoded.kind, decoded.member_id)] = decoded.value
                elif isinstance(decoded, ShareGroupRecord):
                    self.broker.share.groups.replay(share.setdefault(decoded.group, {}), decoded)
        for pid, groups in pending.items():  # still open: applied when their marker comes
            for gid, entries in groups.items():
                self.pending_txn.setdefault(pid, {}).setdefault(gid, {}).update(
                    {k: v for k, v in entries.items() if v is not None})
        loaded = 0
        for gid in set(offsets) | set(metas) | set(consumer):
            value = metas.get(gid)
            group_offsets = offsets.get(gid, {})
            head = consumer.get(gid, {}).get(("group", None))
            if value is None and not group_offsets and head is None:
                continue
            group: Any
            if head is not None:
                group = self.consumer.restore(gid, head.epoch, consumer[gid], group_offsets)
            else:
                group = self._group_from_metadata(gid, value)
            group.offsets = group_offsets
            self.groups[gid] = group
            loaded += 1
        for gid, records in share.items():
            if records.get(("group", None)) is not None and gid not in self.groups:
                self.broker.share.groups.restore(gid, records)
                loaded += 1
        log.info("loaded %d groups from %s-%d", loaded, OFFSETS_TOPIC, index)

    def _group_from_metadata(self, gid: str, value: GroupMetadataValue | None) -> Group:
        if value is None:
            return Group(gid, state_timestamp=now_ms())
        group = Group(gid, generation=value.generation, protocol_type=value.protocol_type,
                      protocol_name=value.protocol, state_timestamp=value.current_state_timestamp)
        for mm in value.members:
            member = Member(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                            mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout,
                            mm.session_timeout, value.protocol_type,
                            [(value.protocol or "", bytes(mm.subscription))], assignment=bytes(mm.assignment))
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        if group.members:
            group.state = STABLE
            for m in group.members.values():
                self._schedule_heartbeat(group, m)
        else:
            group.state = EMPTY
            if group.state_timestamp < 0:
                group.state_timestamp = now_ms()
        return group


COMMIT_MARKER = 1


async def cancel_tasks(tasks: list[asyncio.Task]) -> None:
    """Cancels a coordinator's background tasks and waits for them to end."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except (asyncio.CancelledError, Exception):
            pass


def nothing_to_load(part: Any) -> bool:
    """Whether a coordinator topic's partition holds no record to replay."""
    return part is not None and part.log_end_offset == part.log_start_offset


async def load_each(partitions: list[int], load: Any, loading: set[int], topic: str) -> None:
    """Loads an internal topic's partitions one after the other; each leaves `loading` when
    done (a failure is logged: its ids are then unknown, not stuck in COORDINATOR_LOAD_IN_PROGRESS)."""
    for p in partitions:
        try:
            await load(p)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", topic, p)
        finally:
            loading.discard(p)


async def read_partition(part: Any) -> Any:
    """(header, records at or after the log start) of every batch of a partition, read from
    its files in 1 MiB pieces, yielding to the loop between pieces (loading an internal topic)."""
    reader = part.log.reader
    position = part.log_start_offset
    end = part.log_end_offset
    while position < end:
        res = reader.read(position, _LOAD_CHUNK_BYTES, upper_bound_offset=end)
        if res.region is None:
            break
        last = position
        for header, records in iter_record_batches(res.region.read()):
            last = header.next_offset
            yield header, [r for r in records if r.offset >= position]
        if last <= position:
            break
        position = last
        await asyncio.sleep(0)  # let requests for other partitions through


def control_type_of(record: Any) -> int:
    """The marker type of a control record (key: int16 version, int16 type); -1 if unreadable."""
    key = record.key
    if key is None or len(key) < 4:
        return -1
    return int.from_bytes(bytes(key[2:4]), "big", signed=True)


def _resolve(fut: asyncio.Future | None, result: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(result)
