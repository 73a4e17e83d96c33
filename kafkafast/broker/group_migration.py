"""Mixed groups (KIP-848 online migration, as Kafka 4.0 serves them): members of the classic
protocol inside a consumer group, and the conversions between the two kinds of group.

Upgrade: a ConsumerGroupHeartbeat that joins a classic group with members turns it into a
consumer group when `group.consumer.migration.policy` allows it (upgrade, bidirectional),
the group uses the "consumer" embedded protocol and it has no more members than
`group.consumer.max.size`; otherwise GROUP_ID_NOT_FOUND, as Kafka answers. The classic
members stay: each keeps its member id, its subscription (from its JoinGroup metadata),
its current assignment as both current and target assignment, and the generation as its
member epoch and the group epoch. Parked JoinGroup/SyncGroup requests get
REBALANCE_IN_PROGRESS.

Classic members of a consumer group speak JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
OffsetCommit (Kafka's `classicGroup*ToConsumerGroup`): a JoinGroup updates the member's
subscription, bumps the group epoch when it changed, lets the server-side assignor compute
the target and reconciles the member against the partitions its subscription says it owns;
the answer comes at once with the member epoch as generation, no leader and no members
(nobody assigns on the client side); SyncGroup returns the member's current assignment in
the consumer protocol's format. Heartbeat answers REBALANCE_IN_PROGRESS while the member is
behind the group epoch, has partitions to revoke, or may now get partitions that others
have released, and the member rejoins. Each classic member has its own session timeout and
must rejoin (after REBALANCE_IN_PROGRESS) and sync (after a join) within its rebalance
timeout, else it is removed. A classic JoinGroup to a consumer group is served this way
whatever the policy (Kafka 4.0 checks the policy only when converting).

Downgrade: when a member leaves, is fenced or expires and every member left speaks the
classic protocol, the group becomes a classic group again (policy downgrade or
bidirectional, at most `group.max.size` members) with the group epoch as generation and
each member's current assignment, and rebalances at once.

Persistence: a classic member is a consumer group member whose ConsumerGroupMemberMetadata
record carries ClassicMemberMetadata (session timeout, protocols), as Kafka writes it; a
conversion writes, in one batch, tombstones for the old kind's records and the new kind's.
"""
from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from kafkafast import clock
from kafkafast.broker.groups.consumer_group import (
    UNRELEASED,
    UNREVOKED,
    Assignment,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    HeartbeatError,
    assignment_bytes,
    copy_assignment,
    group_tombstones,
)
from kafkafast.broker.groups.group import Group, GroupState, Member, static_leaver
from kafkafast.broker.groups.offsets_records import group_key
from kafkafast.client.consumer_protocol import decode_assignment, decode_subscription
from kafkafast.protocol import errors as E

if TYPE_CHECKING:
    from kafkafast.broker.consumer_coordinator import ConsumerProtocol

log = logging.getLogger("kafkafast.groups")
EC = E.ErrorCode
NONE = 0
POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


class Migration:
    def __init__(self, cp: ConsumerProtocol) -> None:
        self.cp = cp
        self.gc = cp.gc
        policy = (self.gc.broker.config.get("group.consumer.migration.policy") or "bidirectional").strip().lower()
        if policy not in POLICIES:
            raise ValueError(f"group.consumer.migration.policy must be one of {', '.join(POLICIES)}")
        self.upgrade_enabled = policy in ("upgrade", "bidirectional")
        self.downgrade_enabled = policy in ("downgrade", "bidirectional")

    # -- helpers -------------------------------------------------------------------------------
    def _ids(self, partitions: list[tuple[str, int]]) -> Assignment:
        out: Assignment = {}
        topics = self.gc.broker.topics
        for name, p in partitions:
            meta = topics.get(name)
            if meta is not None and 0 <= p < meta.partitions:
                out.setdefault(bytes(meta.topic_id), set()).add(p)
        return out

    def _assignment_bytes(self, member: ConsumerMember) -> bytes:
        return assignment_bytes(self.cp.named(member.assigned))

    def _schedule_deadline(self, group: ConsumerGroup, member: ConsumerMember, what: str) -> None:
        if member.classic_timer is not None:
            member.classic_timer.cancel()
        member.classic_timer = self.gc._later(max(member.rebalance_timeout_ms, 0), self._on_deadline, group, member,
                                              what)

    def _on_deadline(self, group: ConsumerGroup, member: ConsumerMember, what: str) -> None:
        member.classic_timer = None
        if group.members.get(member.member_id) is member and self.gc.groups.get(group.group_id) is group:
            log.info("group %s: classic member %s did not %s in time", group.group_id, member.member_id, what)
            self.cp.remove_member(group, member)

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation: int | None) -> tuple[ConsumerMember | None, int]:
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return None, EC.UNKNOWN_MEMBER_ID
        if instance_id is not None and member.instance_id != instance_id:
            return None, EC.FENCED_INSTANCE_ID
        if generation is not None and generation != member.member_epoch:
            return None, EC.ILLEGAL_GENERATION
        return member, NONE

    # -- upgrade ---------------------------------------------------------------------------------
    def upgrade(self, classic: Group) -> ConsumerGroup:
        """The consumer group a classic group with members becomes (written and in place), or
        HeartbeatError GROUP_ID_NOT_FOUND when it may not be converted."""
        gid = classic.group_id

        def refuse(why: str) -> HeartbeatError:
            log.info("group %s: cannot upgrade to a consumer group: %s", gid, why)
            return HeartbeatError(EC.GROUP_ID_NOT_FOUND,
                                  f"Cannot upgrade classic group {gid} to consumer group because {why}.")

        if not self.upgrade_enabled:
            raise refuse("online upgrade is disabled")
        if classic.protocol_type != "consumer":
            raise refuse("the group does not use the consumer embedded protocol")
        if len(classic.members) > self.cp.max_size:
            raise refuse("the group size exceeds the consumer group maximum size")
        now = clock.now_ms()
        group = ConsumerGroup(gid, group_epoch=classic.generation, assignment_epoch=classic.generation,
                              offsets=classic.offsets, state_timestamp=now)
        for m in classic.members.values():
            try:
                sub = decode_subscription(m.metadata_for(classic.protocol_name) or
                                          (m.protocols[0][1] if m.protocols else b""))
                held = self._ids(decode_assignment(m.assignment).partitions)
            except Exception:
                raise refuse("the embedded consumer protocol is malformed") from None
            cm = ConsumerMember(m.member_id, m.group_instance_id, sub.rack_id, m.client_id, m.client_host,
                                list(sub.topics), None, m.rebalance_timeout_ms,
                                classic=ClassicMeta(m.session_timeout_ms, list(m.protocols)))
            cm.member_epoch = cm.previous_member_epoch = classic.generation
            group.members[cm.member_id] = cm
            if cm.instance_id is not None:
                group.static_members[cm.instance_id] = cm.member_id
            free = {t: {p for p in ps if (t, p) not in group.owners} for t, ps in held.items()}
            group.set_member_assignment(cm, free, {})
            group.target[cm.member_id] = copy_assignment(free)
        cp = self.cp
        group.subscription_meta = cp._subscription_meta(group)
        group.assignor_name = cp._assignor_of(group)
        records: list[tuple[bytes, bytes | None]] = [(group_key(gid), None)]
        cp._records = records
        cp._rec_group(group)
        cp._rec_partition_meta(group)
        for cm in group.members.values():
            cp._rec_member(group, cm)
        cp._compute_target_records(group)
        for cm in group.members.values():
            cp._rec_current(group, cm)
        err = cp._flush(group)
        if err:
            raise HeartbeatError(err)
        self.gc._release_group(classic, EC.REBALANCE_IN_PROGRESS)
        self.gc.groups[gid] = group
        for cm in group.members.values():
            cp._schedule_session(group, cm)
        log.info("group %s: converted from a classic group (generation %d, %d members) to a consumer group",
                 gid, classic.generation, len(group.members))
        return group

    # -- downgrade -------------------------------------------------------------------------------
    def should_downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> bool:
        rest = [m for m in group.members.values() if m is not leaving]
        return bool(rest) and all(m.classic is not None for m in rest) and self.downgrade_enabled \
            and len(rest) <= self.gc.max_group_size

    def downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> None:
        """The group without `leaving` becomes a classic group, which rebalances at once."""
        cp, gc = self.cp, self.gc
        cp.cancel_timers(group)
        now = clock.now_ms()
        classic = Group(group.group_id, state=GroupState.STABLE, generation=group.group_epoch,
                        protocol_type="consumer", offsets=group.offsets, state_timestamp=now)
        for m in group.members.values():
            if m is leaving or m.classic is None:
                continue
            classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                               m.classic.session_timeout_ms, "consumer", list(m.classic.protocols),
                               assignment=self._assignment_bytes(m)))
        try:
            classic.protocol_name = classic.select_protocol()
        except (ValueError, AssertionError):
            classic.protocol_name = next(iter(classic.members.values())).protocols[0][0]
        records: list[tuple[bytes, bytes | None]] = []
        cp._records = records
        for mid in group.members:
            cp._rec_gone(group, mid)
        records += group_tombstones(group)
        records.append(gc._group_record(classic))
        if cp._flush(group):  # as a lost removal: a restart brings back the consumer group
            log.warning("group %s: could not write its conversion to a classic group", group.group_id)
        group.dead = True
        gc.groups[group.group_id] = classic
        for m in classic.members.values():
            gc._schedule_heartbeat(classic, m)
        log.info("group %s: converted from a consumer group (epoch %d) to a classic group of %d members",
                 group.group_id, group.group_epoch, len(classic.members))
        gc._prepare_rebalance(classic, f"Downgrade group {group.group_id} from consumer to classic.")

    # -- the classic protocol inside a consumer group ---------------------------------------------
    def join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], *, require_known_member_id: bool) -> tuple[int, str, int, str | None]:
        """(error, member id, generation, protocol name) of a classic JoinGroup to a consumer group."""
        cp = self.cp
        unknown = member_id == ""
        if unknown:
            member_id = str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= cp.max_size:
            return EC.GROUP_MAX_SIZE_REACHED, member_id, -1, None
        if not group.supports_classic_protocols(protocol_type, {n for n, _ in protocols}):
            return EC.INCONSISTENT_GROUP_PROTOCOL, member_id, -1, None
        if require_known_member_id and unknown and instance_id is None:
            return EC.MEMBER_ID_REQUIRED, member_id, -1, None
        try:
            sub = decode_subscription(protocols[0][1])
        except Exception:  # Kafka throws IllegalStateException here: UNKNOWN_SERVER_ERROR
            log.info("group %s: malformed embedded consumer protocol in a JoinGroup", group.group_id)
            return EC.UNKNOWN_SERVER_ERROR, member_id, -1, None
        cp._records.clear()
        member = group.members.get(member_id)
        bump = False
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None and old_id != member_id:
                if not unknown:
                    return EC.FENCED_INSTANCE_ID, member_id, -1, None
                old = group.members[old_id]
                if old.classic is None:
                    return EC.UNKNOWN_MEMBER_ID, member_id, -1, None
                cp._cancel_member_timers(old)
                cp._rec_gone(group, old_id)
                member = group.rename_member(old_id, member_id)
        if member is not None and member.classic is None:
            return EC.UNKNOWN_MEMBER_ID, member_id, -1, None
        if member is None:
            member = ConsumerMember(member_id, instance_id, sub.rack_id, client_id, client_host, [], None,
                                    rebalance_timeout_ms)
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
            bump = True
            log.info("group %s: classic member %s joins the consumer group", group.group_id, member_id)
        before = cp.current_of(member) if not bump else None
        stored = cp.member_fields(member)
        if sorted(sub.topics) != sorted(member.subscribed_topics):
            member.subscribed_topics = list(sub.topics)
            bump = True
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.rack_id = sub.rack_id if sub.rack_id is not None else member.rack_id
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMeta(session_timeout_ms, [(n, bytes(m)) for n, m in protocols])
        if cp.member_fields(member) != stored:
            cp._rec_member(group, member)
        cp.update_target(group, member, bump)
        owned = self._ids(sub.owned_partitions)
        group.reconcile(member, owned)
        if member.state == UNREVOKED:  # this join already says what it holds: no second round trip
            group.reconcile(member, owned)
        if cp.current_of(member) != before:
            cp._rec_current(group, member)
        err = cp._flush(group)
        if err:  # the member retries; what changed in memory stays consistent
            return err, member_id, -1, None
        cp._schedule_session(group, member)
        cp._schedule_revocation(group, member)
        self._schedule_deadline(group, member, "sync")
        return NONE, member_id, member.member_epoch, protocols[0][0]

    def sync(self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> tuple[int, bytes, str | None]:
        """(error, assignment, protocol name) of a classic SyncGroup to a consumer group."""
        member, err = self._classic_member(group, member_id, instance_id, generation)
        if member is None:
            return err, b"", None
        names = [n for n, _ in member.classic.protocols]  # type: ignore[union-attr]
        if (protocol_type is not None and protocol_type != "consumer") or \
                (protocol_name is not None and protocol_name not in names):
            return EC.INCONSISTENT_GROUP_PROTOCOL, b"", None
        if member.classic_timer is not None:
            member.classic_timer.cancel()
            member.classic_timer = None
        self.cp._schedule_session(group, member)
        return NONE, self._assignment_bytes(member), protocol_name or names[0]

    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int) -> int:
        member, err = self._classic_member(group, member_id, instance_id, generation)
        if member is None:
            return err
        self.cp._schedule_session(group, member)
        if member.member_epoch < group.group_epoch or member.state == UNREVOKED or \
                (member.state == UNRELEASED and not group.waiting_on_unreleased(member)):
            if member.classic_timer is None:
                self._schedule_deadline(group, member, "rejoin")
            return EC.REBALANCE_IN_PROGRESS
        return NONE

    def leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]) -> list[int]:
        errors = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                member_id, err = static_leaver(group.static_members, group.members, member_id, instance_id)
                if err:
                    errors.append(err)
                    continue
            member = group.members.get(member_id)
            if member is None or member.classic is None:
                errors.append(EC.UNKNOWN_MEMBER_ID)
                continue
            log.info("group %s: classic member %s leaves", group.group_id, member_id)
            self.cp.remove_member(group, member)
            errors.append(NONE)
            if self.gc.groups.get(group.group_id) is not group:  # became a classic group
                rest = self.gc.leave_group(group.group_id, leaving[len(errors):])[1]
                return errors + rest
        return errors
