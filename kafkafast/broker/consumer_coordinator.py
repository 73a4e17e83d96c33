"""The coordinator side of the consumer group protocol (KIP-848): ConsumerGroupHeartbeat,
ConsumerGroupDescribe, and the member-epoch checks of OffsetCommit / OffsetFetch.

Consumer groups live in the same `GroupCoordinator.groups` map as classic groups, so a
group id is one or the other: an empty group of one kind becomes the other kind when a member
of the other protocol arrives (its committed offsets stay), as Kafka converts empty groups;
groups with members migrate online (`group_migration.py`: a classic JoinGroup to a consumer
group makes a classic member of it, a heartbeat of the consumer protocol to a classic group
upgrades it or gets GROUP_ID_NOT_FOUND, the last consumer-protocol member leaving downgrades it).

Heartbeat, as Kafka 4.0 serves version 0 (`GroupMetadataManager.consumerGroupHeartbeat`):
validate the request (INVALID_REQUEST with a message), find or create the member (epoch 0
joins; -1 leaves; -2 a static member leaves for now and keeps its assignment until it
rejoins with its instance id or its session expires), fence a member whose epoch is
neither its current one nor (with a subset of its partitions) its previous one
(FENCED_MEMBER_EPOCH), update its subscription, bump the group epoch when what the
assignment depends on changed, compute a new target assignment with the group's assignor
when the group epoch is ahead, and reconcile the member (`groups/consumer_group.py`).

Timers: each member's session (`group.consumer.session.timeout.ms`, reset by every
heartbeat; expiry removes the member and bumps the group epoch) and, while it has
partitions to revoke, its rebalance timeout (then it is fenced the same way).

Settings (Kafka 4.0 names and defaults): group.consumer.session.timeout.ms 45000 (within
group.consumer.min/max.session.timeout.ms 45000/60000), group.consumer.heartbeat.interval.ms
5000 (within min/max 5000/15000), group.consumer.max.size, group.consumer.assignors
"uniform,range" (the first is the default), group.consumer.migration.policy "bidirectional"
(disabled, upgrade, downgrade, bidirectional: `group_migration.py`).

Persistence: every change is written to `__consumer_offsets` in one batch, with Kafka's
record types: ConsumerGroupMetadata (group epoch), ConsumerGroupMemberMetadata (a member's
subscription), ConsumerGroupTargetAssignmentMember / -Metadata (the target assignment and
its epoch), ConsumerGroupCurrentMemberAssignment (a member's epochs, state and partitions),
tombstones when a member goes (`groups/offsets_records.py`). Loading the partition rebuilds
the group (`restore`) with its members, epochs and assignments and restarts their session
timers: members go on heartbeating after a restart or a coordinator move. The subscribed
topics' ids and partition counts (ConsumerGroupPartitionMetadata, written when they change)
come back too, so a load bumps the group epoch only if the topics changed meanwhile.
Regex subscriptions (v1 SubscribedTopicRegex) are compiled with RE2 (`google-re2`, the
syntax of Kafka's RE2/J, linear-time matching), matched against whole topic names with
internal topics left out, and resolved again on every heartbeat and member removal, so a
topic created or deleted changes the subscription metadata and bumps the group epoch;
a member's topics are its names and its regex's matches together. Kafka 4.0 resolves
regexes in the background and stores the result (ConsumerGroupRegularExpression); here
they are resolved inline and only the regex itself is stored with the member.
"""
from __future__ import annotations

import functools
import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import re2

from kafkafast import clock
from kafkafast.broker.groups import assignors
from kafkafast.broker.groups.consumer_group import (
    STABLE,
    STATE_CODES,
    STATIC_LEFT_EPOCH,
    Assignment,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    HeartbeatError,
    UNREVOKED,
    copy_assignment,
    is_subset,
)
from kafkafast.broker.group_migration import Migration
from kafkafast.broker.groups.group import Group, GroupState
from kafkafast.broker.groups.offsets_records import consumer_key, consumer_value
from kafkafast.broker.topics import INTERNAL_TOPICS
from kafkafast.protocol import errors as E
from kafkafast.security.context import authorizer_enabled
from kafkafast.protocol._generated.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentValue as CurrentValue,
    ConsumerGroupMemberMetadataValue as MemberValue,
    ConsumerGroupMemberMetadataValueClassicMemberMetadata as ClassicValue,
    ConsumerGroupMemberMetadataValueClassicProtocol as ClassicProtocolValue,
    ConsumerGroupMetadataValue as GroupValue,
    ConsumerGroupPartitionMetadataValue as PartitionMetaValue,
    ConsumerGroupTargetAssignmentMemberValue as TargetValue,
    ConsumerGroupTargetAssignmentMetadataValue as TargetEpochValue,
)

if TYPE_CHECKING:
    from kafkafast.broker.group_coordinator import GroupCoordinator

log = logging.getLogger("kafkafast.groups")
EC = E.ErrorCode
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = STATIC_LEFT_EPOCH
STATES = {code: name for name, code in STATE_CODES.items()}


@dataclass(slots=True)
class HeartbeatResult:
    error: int = 0
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None  # v1; "" clears it, None: unchanged
    server_assignor: str | None
    owned: Assignment | None  # the TopicPartitions field; None when not sent
    client_id: str
    client_host: str
    # Whether the heartbeating client may DESCRIBE a topic (None: no authorizer): what its regex matches is filtered so.
    topic_allowed: Callable[[str], bool] | None = None


def _validate(req: HeartbeatRequest) -> None:
    def invalid(msg: str) -> HeartbeatError:
        return HeartbeatError(EC.INVALID_REQUEST, msg)

    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")


class ConsumerProtocol:
    """Consumer-protocol groups inside a `GroupCoordinator` (see the module docstring)."""

    def __init__(self, gc: GroupCoordinator) -> None:
        self.gc = gc
        cfg = gc.broker.config
        self.session_timeout_ms = cfg.get_int("group.consumer.session.timeout.ms")
        self.heartbeat_interval_ms = cfg.get_int("group.consumer.heartbeat.interval.ms")
        self.max_size = cfg.get_int("group.consumer.max.size")
        self.assignors = assignors.assignor_names(cfg.get("group.consumer.assignors") or "uniform,range")
        lo, hi = cfg.get_int("group.consumer.min.session.timeout.ms"), cfg.get_int("group.consumer.max.session.timeout.ms")
        if not lo <= self.session_timeout_ms <= hi:
            raise ValueError("group.consumer.session.timeout.ms must be within "
                             "group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms")
        lo, hi = cfg.get_int("group.consumer.min.heartbeat.interval.ms"), cfg.get_int("group.consumer.max.heartbeat.interval.ms")
        if not lo <= self.heartbeat_interval_ms <= hi:
            raise ValueError("group.consumer.heartbeat.interval.ms must be within "
                             "group.consumer.min.heartbeat.interval.ms and group.consumer.max.heartbeat.interval.ms")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        self._records: list[tuple[bytes, bytes | None]] = []  # written by _flush, one batch per change
        self.migration = Migration(self)  # classic members, upgrade and downgrade (group_migration.py)

    # -- heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        try:
            _validate(req)
            if req.subscribed_topic_regex:
                compile_regex(req.subscribed_topic_regex)
            if req.server_assignor is not None and req.server_assignor not in self.assignors:
                raise HeartbeatError(EC.UNSUPPORTED_ASSIGNOR,
                                     f"ServerAssignor {req.server_assignor} is not supported. "
                                     f"Supported assignors: {', '.join(self.assignors)}.")
            err = self.gc.status(req.group_id, "consumer_group_heartbeat")
            if err:
                raise HeartbeatError(err)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req)
            return self._heartbeat(req)
        except HeartbeatError as exc:
            return HeartbeatResult(exc.code, exc.message, member_epoch=0)

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        existing = self.gc.groups.get(group_id)
        if isinstance(existing, ConsumerGroup) and not existing.dead:
            return existing
        if existing is not None and not existing.is_(GroupState.DEAD):
            if not create or (existing.pending_members and not existing.members):
                raise HeartbeatError(EC.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            if existing.members:  # a classic group with members: online upgrade (or GROUP_ID_NOT_FOUND)
                return self.migration.upgrade(existing)
            # An empty classic group becomes a consumer group; its offsets stay.
            group = ConsumerGroup(group_id, offsets=existing.offsets, state_timestamp=clock.now_ms())
            err = self.gc.store_consumer_group(group, replaces_classic=True)
            if err:
                raise HeartbeatError(err)
            self.gc._cancel_group_timers(existing)
            self.gc.groups[group_id] = group
            return group
        if not create:
            raise HeartbeatError(EC.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        group = ConsumerGroup(group_id, state_timestamp=clock.now_ms())
        self.gc.groups[group_id] = group
        return group

    def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        self._records.clear()
        group = self._group(req.group_id, create=req.member_epoch == 0)
        member = group.members.get(req.member_id) if req.member_id else None
        bump = False
        if req.member_epoch == 0:
            member, bump = self._join(group, req, member)
            self._rec_member(group, member)
        else:
            if member is None:
                raise HeartbeatError(EC.UNKNOWN_MEMBER_ID,
                                     f"Member {req.member_id} is not a member of group {req.group_id}.")
            if member.left_static or member.classic is not None:
                raise HeartbeatError(EC.UNKNOWN_MEMBER_ID)
            if req.instance_id is not None and member.instance_id != req.instance_id:
                raise HeartbeatError(EC.FENCED_INSTANCE_ID)
            self._check_epoch(member, req.member_epoch, req.owned)
        before = _current(member) if req.member_epoch != 0 else None
        metadata = (member.rebalance_timeout_ms, member.rack_id, list(member.subscribed_topics), member.server_assignor,
                    member.subscribed_regex)
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_topic_names is not None and sorted(req.subscribed_topic_names) != sorted(member.subscribed_topics):
            member.subscribed_topics = list(req.subscribed_topic_names)
            bump = True
        if req.subscribed_topic_regex is not None and (req.subscribed_topic_regex or None) != member.subscribed_regex:
            member.subscribed_regex = req.subscribed_topic_regex or None
            bump = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            bump = True
        if member.subscribed_regex and req.topic_allowed is not None:
            group.regex_filters[member.subscribed_regex] = req.topic_allowed  # the latest member's rights
        if req.member_epoch != 0 and metadata != (member.rebalance_timeout_ms, member.rack_id,
                                                  list(member.subscribed_topics), member.server_assignor,
                                                  member.subscribed_regex):
            self._rec_member(group, member)
        self.update_target(group, member, bump)
        group.reconcile(member, req.owned)
        after = _current(member)
        if after != before:
            self._rec_current(group, member)
        err = self._flush(group)
        if err:  # the member retries; what changed in memory stays consistent
            raise HeartbeatError(err)
        self._schedule_session(group, member)
        self._schedule_revocation(group, member)
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                                         and req.owned is not None)
        changed = before is None or (before[0], before[3]) != (after[0], after[3])
        return HeartbeatResult(NONE, None, member.member_id, member.member_epoch,
                               self._setting(group.group_id, "heartbeat.interval.ms"),
                               {t: set(p) for t, p in member.assigned.items()} if full or changed else None)

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest,
              member: ConsumerMember | None) -> tuple[ConsumerMember, bool]:
        if req.instance_id is not None:
            old_id = group.static_members.get(req.instance_id)
            old = group.members.get(old_id) if old_id else None
            if old is not None and old.member_id != req.member_id:
                if not old.left_static:
                    raise HeartbeatError(EC.UNRELEASED_INSTANCE_ID,
                                         f"Static member {old.member_id} with instance id {req.instance_id} "
                                         "is not released.")
                new_id = req.member_id or str(uuid.uuid4())
                self._cancel_member_timers(old)
                self._rec_gone(group, old.member_id)
                member = group.rename_member(old.member_id, new_id)
                member.client_id, member.client_host = req.client_id, req.client_host
                log.info("group %s: static member %s rejoined as %s", group.group_id, req.instance_id, new_id)
                return member, False
        if member is not None:
            # Rejoining with a known id: it starts over (what it held is given up).
            self._cancel_member_timers(member)
            self._rec_gone(group, member.member_id)
            group.remove_member(member.member_id)
        if len(group.members) >= self.max_size:
            raise HeartbeatError(EC.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        member_id = req.member_id or str(uuid.uuid4())
        member = ConsumerMember(member_id, req.instance_id, req.rack_id, req.client_id, req.client_host,
                                list(req.subscribed_topic_names or []), req.server_assignor,
                                req.rebalance_timeout_ms, req.subscribed_topic_regex or None)
        group.members[member_id] = member
        if req.instance_id is not None:
            group.static_members[req.instance_id] = member_id
        log.info("group %s: member %s joins", group.group_id, member_id)
        return member, True

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        if epoch > member.member_epoch:
            raise HeartbeatError(EC.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({epoch}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). "
                                 "The member must abandon all its partitions and rejoin.")
        if epoch < member.member_epoch:
            # The answer with the bumped epoch may have been lost: accept the previous epoch
            # when the member owns no more than it is assigned now.
            if epoch != member.previous_member_epoch or owned is None or not is_subset(owned, member.assigned):
                raise HeartbeatError(EC.FENCED_MEMBER_EPOCH,
                                     f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                                     f"known by the group coordinator ({member.member_epoch}). "
                                     "The member must abandon all its partitions and rejoin.")

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        self._records.clear()
        group = self._group(req.group_id, create=False)
        member = group.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(EC.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {req.group_id}.")
        if req.instance_id is not None and member.instance_id != req.instance_id:
            raise HeartbeatError(EC.FENCED_INSTANCE_ID)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # It keeps its assignment for when it comes back; what it was revoking is free now.
            group.set_member_assignment(member, member.assigned, {})
            member.state = STABLE
            member.member_epoch = STATIC_LEFT_EPOCH
            self._rec_current(group, member)
            err = self._flush(group)
            if err:
                raise HeartbeatError(err)
            self._cancel_member_timers(member)
            self._schedule_session(group, member)
            log.info("group %s: static member %s leaves for now", group.group_id, member.member_id)
        else:
            log.info("group %s: member %s leaves", group.group_id, member.member_id)
            self.remove_member(group, member)
        return HeartbeatResult(NONE, None, req.member_id, req.member_epoch, 0, None)

    # -- group epoch and target assignment ----------------------------------------------------
    def update_target(self, group: ConsumerGroup, member: ConsumerMember, bump: bool) -> None:
        """Refreshes the subscribed topics' metadata, bumps the group epoch when it or (`bump`)
        the member's subscription changed, and computes the target when the epoch is ahead."""
        meta = self._subscription_meta(group)
        if meta != group.subscription_meta:
            group.subscription_meta = meta
            self._rec_partition_meta(group)
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("group %s: epoch %d (member %s)", group.group_id, group.group_epoch, member.member_id)
            self._rec_group(group)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)

    def _resolve_regexes(self, group: ConsumerGroup) -> None:
        """What each regex of the group matches now: whole topic names, internal topics
        excluded, and with an authorizer only the topics the member that last heartbeated
        with the regex may DESCRIBE (Kafka 4.0 resolves them on the coordinator, with RE2/J's
        syntax and the resolving member's rights). Until such a member heartbeats again after
        a load, a regex keeps what it resolved to."""
        regexes = group.regexes()
        group.regex_filters = {rx: f for rx, f in group.regex_filters.items() if rx in regexes}
        if not regexes:
            group.resolved.clear()
            return
        names = [n for n in self.gc.broker.topics.names() if n not in INTERNAL_TOPICS]
        authorizer = authorizer_enabled(self.gc.broker)
        resolved = {}
        for rx in regexes:
            allow = group.regex_filters.get(rx)
            if allow is None and authorizer:
                resolved[rx] = group.resolved.get(rx, frozenset())
                continue
            program = compile_regex(rx)
            resolved[rx] = frozenset(n for n in names if program.fullmatch(n) and (allow is None or allow(n)))
        group.resolved = resolved

    def _subscription_meta(self, group: ConsumerGroup) -> dict[str, tuple[bytes, int]]:
        self._resolve_regexes(group)
        out = {}
        topics = self.gc.broker.topics
        for name in group.subscribed_topics():
            meta = topics.get(name)
            if meta is not None:
                out[name] = (bytes(meta.topic_id), meta.partitions)
        return out

    def _assignor_of(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for; without one, the first configured."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if votes:
            best = max(votes.values())
            return sorted(n for n, c in votes.items() if c == best)[0]
        return self.assignors[0]

    def _compute_target(self, group: ConsumerGroup) -> None:
        group.assignor_name = self._assignor_of(group)
        subs = {mid: sorted(group.member_topics(m)) for mid, m in group.members.items()}
        group.target = assignors.assign(group.assignor_name, subs, group.subscription_meta, group.target)
        group.assignment_epoch = group.group_epoch
        self._compute_target_records(group)

    def _compute_target_records(self, group: ConsumerGroup) -> None:
        """Records of the group's target assignment and its epoch."""
        for mid, target in group.target.items():
            self._records.append((consumer_key("target", group.group_id, mid), consumer_value(
                TargetValue(topic_partitions=[TargetValue.TopicPartition(topic_id=t, partitions=sorted(ps))
                                              for t, ps in sorted(target.items()) if ps]))))
        self._records.append((consumer_key("target_epoch", group.group_id),
                              consumer_value(TargetEpochValue(assignment_epoch=group.assignment_epoch))))

    # -- records (__consumer_offsets) ----------------------------------------------------------
    def _rec_group(self, group: ConsumerGroup) -> None:
        self._records.append((consumer_key("group", group.group_id), consumer_value(GroupValue(epoch=group.group_epoch))))

    def _rec_partition_meta(self, group: ConsumerGroup) -> None:
        self._records.append((consumer_key("partition_metadata", group.group_id), consumer_value(PartitionMetaValue(
            topics=[PartitionMetaValue.TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n)
                    for name, (tid, n) in sorted(group.subscription_meta.items())]))))

    def _rec_member(self, group: ConsumerGroup, m: ConsumerMember) -> None:
        classic = {} if m.classic is None else {"classic_member_metadata": ClassicValue(  # absent: not written
            session_timeout_ms=m.classic.session_timeout_ms,
            supported_protocols=[ClassicProtocolValue(name=n, metadata=md) for n, md in m.classic.protocols])}
        self._records.append((consumer_key("member", group.group_id, m.member_id), consumer_value(MemberValue(
            instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topics), subscribed_topic_regex=m.subscribed_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor, **classic))))

    @staticmethod
    def member_fields(m: ConsumerMember) -> tuple:
        """What the member's ConsumerGroupMemberMetadata record holds."""
        return (m.instance_id, m.rack_id, m.client_id, m.client_host, list(m.subscribed_topics), m.subscribed_regex,
                m.rebalance_timeout_ms, m.server_assignor,
                None if m.classic is None else (m.classic.session_timeout_ms, list(m.classic.protocols)))

    @staticmethod
    def current_of(m: ConsumerMember) -> tuple:
        """The member's epochs, state and partitions (to tell whether its record must be written)."""
        return _current(m)

    def _rec_current(self, group: ConsumerGroup, m: ConsumerMember) -> None:
        def tps(a: Assignment) -> list:
            return [CurrentValue.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.items()) if ps]
        self._records.append((consumer_key("current", group.group_id, m.member_id), consumer_value(CurrentValue(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=STATE_CODES[m.state],
            assigned_partitions=tps(m.assigned), partitions_pending_revocation=tps(m.pending_revocation)))))

    def _rec_gone(self, group: ConsumerGroup, member_id: str) -> None:
        for kind in ("current", "target", "member"):
            self._records.append((consumer_key(kind, group.group_id, member_id), None))

    def _flush(self, group: ConsumerGroup) -> int:
        records, self._records = self._records, []
        return self.gc._append(group.group_id, records, clock.now_ms()) if records else NONE

    def restore(self, group_id: str, epoch: int, records: dict[tuple[str, str | None], Any],
                offsets: dict) -> ConsumerGroup:
        """A consumer group as its records in `__consumer_offsets` left it (loading a partition).
        Its subscription metadata is the stored one: the first heartbeat bumps the group epoch
        and recomputes the target only when the subscribed topics changed meanwhile."""
        target_epoch = records.get(("target_epoch", None))
        group = ConsumerGroup(group_id, group_epoch=epoch, state_timestamp=clock.now_ms(), offsets=offsets,
                              assignment_epoch=target_epoch.assignment_epoch if target_epoch is not None else 0)
        stored_meta = records.get(("partition_metadata", None))
        if stored_meta is not None:
            group.subscription_meta = {t.topic_name: (bytes(t.topic_id), t.num_partitions) for t in stored_meta.topics}
        for (kind, mid), v in records.items():
            if kind == "member" and v is not None and mid:
                cm = v.classic_member_metadata
                group.members[mid] = ConsumerMember(
                    mid, v.instance_id, v.rack_id, v.client_id, v.client_host, list(v.subscribed_topic_names),
                    v.server_assignor, v.rebalance_timeout_ms, v.subscribed_topic_regex or None,
                    classic=None if cm is None or cm == ClassicValue() else ClassicMeta(
                        cm.session_timeout_ms, [(p.name, bytes(p.metadata)) for p in cm.supported_protocols]))
                if v.instance_id is not None:
                    group.static_members[v.instance_id] = mid
        for (kind, mid), v in records.items():
            member = group.members.get(mid or "")
            if member is None or v is None:
                continue
            if kind == "current":
                member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
                member.state = STATES.get(v.state, "stable")
                group.set_member_assignment(member, _assignment(v.assigned_partitions),
                                            _assignment(v.partitions_pending_revocation))
            elif kind == "target":
                group.target[mid] = _assignment(v.topic_partitions)  # type: ignore[index]
        group.assignor_name = self._assignor_of(group) if group.members else ""
        for m in group.members.values():
            self._schedule_session(group, m)
            self._schedule_revocation(group, m)
        return group

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Removes a member (left, expired or fenced) and bumps the group epoch; when only
        members of the classic protocol remain, the group may become a classic group."""
        if self.migration.should_downgrade(group, member):
            self.migration.downgrade(group, member)
            return
        self._cancel_member_timers(member)
        self._records.clear()
        self._rec_gone(group, member.member_id)
        group.remove_member(member.member_id)
        group.group_epoch += 1
        self._rec_group(group)
        meta = self._subscription_meta(group)
        if meta != group.subscription_meta:
            group.subscription_meta = meta
            self._rec_partition_meta(group)
        if group.members:
            self._compute_target(group)
            # Members waiting for partitions the removed one held get them on their next heartbeat.
        else:
            group.state_timestamp = clock.now_ms()
        if self._flush(group):  # what is lost: a restart brings the member back until its session expires
            log.warning("group %s: could not write the removal of member %s", group.group_id, member.member_id)

    def _setting(self, group_id: str, name: str) -> int:
        """consumer.<name> of the group's configs (IncrementalAlterConfigs on the group), else the
        broker's group.consumer.<name>, as Kafka's consumer groups take them."""
        share = self.gc.broker.share
        value = share.configs.get(group_id, f"consumer.{name}") if share is not None else None
        return int(value) if value else (self.session_timeout_ms if name == "session.timeout.ms"
                                         else self.heartbeat_interval_ms)

    # -- timers ------------------------------------------------------------------------------
    def _schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = (member.classic.session_timeout_ms if member.classic is not None
                   else self._setting(group.group_id, "session.timeout.ms"))
        member.session_timer = self.gc._later(timeout, self._on_session_expired, group, member)

    def _schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.state == UNREVOKED:
            if member.revocation_timer is None:
                member.revocation_timer = self.gc._later(max(member.rebalance_timeout_ms, 0),
                                                         self._on_revocation_expired, group, member)
        elif member.revocation_timer is not None:
            member.revocation_timer.cancel()
            member.revocation_timer = None

    def _on_session_expired(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is member and self.gc.groups.get(group.group_id) is group:
            log.info("group %s: member %s session timed out", group.group_id, member.member_id)
            self.remove_member(group, member)

    def _on_revocation_expired(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.revocation_timer = None
        if group.members.get(member.member_id) is member and member.state == UNREVOKED:
            log.info("group %s: member %s did not revoke its partitions in time", group.group_id, member.member_id)
            self.remove_member(group, member)

    @staticmethod
    def _cancel_member_timers(member: ConsumerMember) -> None:
        for h in (member.session_timer, member.revocation_timer, member.classic_timer):
            if h is not None:
                h.cancel()
        member.session_timer = member.revocation_timer = member.classic_timer = None

    def cancel_timers(self, group: ConsumerGroup) -> None:
        for m in group.members.values():
            self._cancel_member_timers(m)

    # -- offsets -------------------------------------------------------------------------------
    @staticmethod
    def check_commit(group: ConsumerGroup, member_id: str, member_epoch: int, *, api_version: int | None,
                     transactional: bool) -> int:
        """Kafka's `ConsumerGroup.validateOffsetCommit`: 0 or the error for every partition."""
        if member_epoch < 0 and not group.members:
            return NONE  # the admin client or a consumer without group management
        if transactional and not member_id and member_epoch < 0:
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return EC.UNKNOWN_MEMBER_ID
        if member.classic is not None:  # a classic member commits with its generation (the member epoch)
            if member_epoch > member.member_epoch:
                return EC.STALE_MEMBER_EPOCH
            return EC.ILLEGAL_GENERATION if member_epoch != member.member_epoch else NONE
        if not transactional and api_version is not None and api_version < 9:
            return EC.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return EC.STALE_MEMBER_EPOCH
        return NONE

    @staticmethod
    def check_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
        """Kafka's `ConsumerGroup.validateOffsetFetch` (OffsetFetch v9 with a member)."""
        if member_id is None and member_epoch < 0:
            return NONE
        member = group.members.get(member_id or "")
        if member is None:
            return EC.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return EC.STALE_MEMBER_EPOCH
        return NONE

    # -- describe ------------------------------------------------------------------------------
    def describe(self, group_id: str) -> tuple[int, str | None, ConsumerGroup | None]:
        """(error, message, group) for ConsumerGroupDescribe."""
        err = self.gc.status(group_id, "consumer_group_describe")
        if err:
            return err, None, None
        group = self.gc.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return EC.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if isinstance(group, Group):
            return EC.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return NONE, None, group

    def topic_name(self, topic_id: bytes) -> str:
        meta = self.gc.broker.topics.by_id.get(topic_id)
        return meta.name if meta is not None else ""

    def named(self, assignment: Assignment) -> dict[str, list[int]]:
        return {self.topic_name(t): sorted(ps) for t, ps in assignment.items() if ps}


NONE = 0
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = 1 << 20  # per program: plenty for a topic pattern; a bigger one does not compile


@functools.lru_cache(maxsize=128)
def compile_regex(pattern: str) -> Any:
    """The RE2 program of a SubscribedTopicRegex (linear-time matching: a hostile pattern
    cannot hold the event loop); HeartbeatError INVALID_REGULAR_EXPRESSION when it is not one."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise HeartbeatError(EC.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {detail}.") from None


def _current(m: ConsumerMember) -> tuple:
    return (m.member_epoch, m.previous_member_epoch, m.state, copy_assignment(m.assigned),
            copy_assignment(m.pending_revocation))


def _assignment(topic_partitions: Any) -> Assignment:
    return {bytes(tp.topic_id): set(tp.partitions) for tp in topic_partitions if tp.partitions}


def owned_from_request(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    out: Assignment = {}
    for tp in topic_partitions:
        out.setdefault(bytes(tp.topic_id), set()).update(tp.partitions)
    return out
