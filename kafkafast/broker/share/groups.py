"""Share groups (KIP-932): membership through ShareGroupHeartbeat, with server-side assignment.

A share group's members subscribe by topic names and heartbeat with their member epoch, as
Kafka 4.2 serves them (`GroupMetadataManager.shareGroupHeartbeat`): the member makes up its
own member id (an empty one is INVALID_REQUEST), joins with epoch 0 and its subscribed topic
names, leaves with epoch -1; any other epoch must be its current one (FENCED_MEMBER_EPOCH),
an unknown member gets UNKNOWN_MEMBER_ID. A join, a leave, a new subscription or a changed
partition count of a subscribed topic bumps the group epoch; the assignment is then computed
again with the `simple` assignor and every member takes the new epoch at its next heartbeat,
which carries its assignment. Nothing is revoked first: partitions are shared, so a member
starts fetching a partition while others still do.

The `simple` assignor (Kafka's `SimpleAssignor`, homogeneous case: balance first, then
stickiness): each partition wants S = ceil(members / partitions) members, and the members (in
join order) want S x partitions assignments between them, spread evenly (the counts differ by
at most one). Each member keeps what it had of its previous target assignment (in partition
order) up to its count; a partition shared by more than S members is given up by the later
ones; then every partition with fewer than S members goes to the first member in join order
below its count that does not have it. Keeping assignments matters beyond moving less: a
member learns a new one only at its next heartbeat (every few seconds), so while a group
grows, the early members still fetch their earlier, wider assignments; kept assignments are
subsets of those, and the partitions the newcomers get are the ones the others gave up, so
every partition keeps readers and none is left to a single stale member. Topics are taken in
name order and their partitions numbered across topics, so several topics spread the same way.

Timers: each member's session (`group.share.session.timeout.ms`, per group
`share.session.timeout.ms`, reset by every heartbeat; the heartbeat interval likewise,
`group.share.heartbeat.interval.ms` / `share.heartbeat.interval.ms`);
its expiry removes the member, bumps the group epoch and releases the records it had acquired
(`on_member_gone`). A member that leaves (epoch -1) keeps its records and share session until
it closes that session, or the connection that opened it closes (as Kafka: the share session,
not the membership, holds the records).
States: Empty (no members), Stable, Dead (deleted).

Share groups live beside the group coordinator's classic and consumer groups, under the same
placement (the group's `__consumer_offsets` partition decides the owner worker or broker), in
a map of their own: a group id already used by a classic or consumer group gets
GROUP_ID_NOT_FOUND here, as Kafka answers a heartbeat to a group of another type.

Persistence: the group is written to its `__consumer_offsets` partition, through the group
coordinator's `_append` as consumer groups are, with the share-group records of the schemas
(`groups/offsets_records.py`): ShareGroupMetadata (the group epoch, at every bump),
ShareGroupMemberMetadata (a member's client and subscription, when it joins or changes it; a
tombstone when it goes) and ShareGroupPartitionMetadata (the topics and partitions whose
share-partition state the group initialised: every partition of a subscribed topic, once
assigned), and as Kafka's coordinator the assignment: ShareGroupTargetAssignmentMember (a
member's target, when it changes) with ShareGroupTargetAssignmentMetadata (the assignment
epoch), and ShareGroupCurrentMemberAssignment (a member's epoch and previous epoch, when its
heartbeat moves it to the assignment epoch); a leaving member's three records get
tombstones. Loading the partition brings the group back (`restore`) with its epoch, members,
their targets and epochs; their session timers start again: a member that goes on
heartbeating keeps its membership, with the epoch it last heard (or the one before, as Kafka
accepts the previous epoch: the answer bumping it may have been lost), one that does not
expires and the group becomes Empty; a new member's epoch continues from the stored one.
DeleteGroups writes tombstones for the group's records (the members' went as they left). The records' delivery state is
durable elsewhere, in `__share_group_state` (`broker/share/state_store.py`).

Deleted topics: an initialised topic whose id is gone from the metadata (deleted, perhaps
created again under its name: a new id, so new share-partitions) is moved to the deleting
topics of a new ShareGroupPartitionMetadata record; its share-partitions' state is deleted at
their share coordinators (DeleteShareGroupState), then a record without it is written, as
Kafka's group coordinator does when the metadata image drops a topic. Here that is noticed at
a member's heartbeat, when the group is loaded, and for groups without members at the group
coordinator's periodic cleanup (offsets.retention.check.interval.ms). A deletion interrupted by a
coordinator move (or a restart) is finished by the next one: the record names a deleting
topic without its partitions (Kafka's format), so loading the partition keeps every partition
an earlier record of the group listed as initialised (`replay`), and those are deleted. (Once
compaction has removed every such earlier record, the partitions are unknown and the state of
the deleted topic stays in `__share_group_state`, unread: a topic created again has a new id.)
"""
from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from kafkafast import clock
from kafkafast.broker.consumer_coordinator import HeartbeatResult
from kafkafast.broker.group_coordinator import OFFSETS_TOPIC
from kafkafast.broker.groups.consumer_group import HeartbeatError
from kafkafast.broker.groups.group import GroupState
from kafkafast.broker.groups.offsets_records import ShareGroupRecord, consumer_value, share_key
from kafkafast.broker.topics import INTERNAL_TOPICS
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.coordinator_records import (
    ShareGroupCurrentMemberAssignmentValue as CurrentValue,
    ShareGroupMemberMetadataValue as MemberValue,
    ShareGroupMetadataValue as GroupValue,
    ShareGroupPartitionMetadataValue as PartitionMetaValue,
    ShareGroupTargetAssignmentMemberValue as TargetValue,
    ShareGroupTargetAssignmentMetadataValue as TargetEpochValue,
)

log = logging.getLogger("kafkafast.share")
EC = E.ErrorCode
LEAVE_EPOCH = -1
STABLE_MEMBER = 0  # ShareGroupCurrentMemberAssignment's State (Kafka's MemberState.STABLE): nothing is revoked first
EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
ASSIGNOR = "simple"

Assignment = dict[bytes, list[int]]  # topic id -> partitions
Records = list[tuple[bytes, bytes | None]]
EVER_INITIALIZED = ("ever_initialized", None)  # a loading group's records: topic id -> partitions ever initialised


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None = None
    subscribed_topics: list[str] = field(default_factory=list)
    member_epoch: int = 0
    previous_member_epoch: int = -1  # accepted too: the answer bumping the epoch may have been lost
    assignment: Assignment = field(default_factory=dict)  # its target assignment
    sent_epoch: int = -1  # the epoch whose assignment the member was last sent
    timer: Any = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    topic_signature: tuple = ()  # (name, id, partitions) of the subscribed topics at the last assignment
    initialized: dict[bytes, tuple[str, set[int]]] = field(default_factory=dict)  # topic id -> (name, partitions)
    deleting: dict[bytes, tuple[str, set[int]]] = field(default_factory=dict)  # deleted topics whose state goes
    deleting_task: Any = None
    dead: bool = False

    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topics}


def simple_assign(members: list[str], partitions: list[tuple[bytes, int]],
                  current: dict[str, Assignment] | None = None) -> dict[str, Assignment]:
    """The `simple` assignor for members with one subscription, in join order, given their
    `current` target assignments (see the module docstring)."""
    if not members or not partitions:
        return {m: {} for m in members}
    sharing = -(-len(members) // len(partitions))
    per_member = sharing * len(partitions) / len(members)
    want = {m: math.ceil(per_member * (i + 1)) - math.ceil(per_member * i) for i, m in enumerate(members)}
    order = {tp: i for i, tp in enumerate(partitions)}
    held: dict[str, list[tuple[bytes, int]]] = {}
    readers: dict[tuple[bytes, int], list[str]] = {tp: [] for tp in partitions}
    for m in members:
        had = sorted(((tid, p) for tid, ps in (current or {}).get(m, {}).items() for p in ps if (tid, p) in order),
                     key=order.__getitem__)
        held[m] = [tp for tp in had[:want[m]] if len(readers[tp]) < sharing]
        for tp in held[m]:
            readers[tp].append(m)
    for tp in partitions:
        for m in members:
            if len(readers[tp]) >= sharing:
                break
            if len(held[m]) < want[m] and tp not in held[m]:
                held[m].append(tp)
                readers[tp].append(m)
    out: dict[str, Assignment] = {}
    for m in members:
        out[m] = {}
        for tid, p in sorted(held[m], key=order.__getitem__):
            out[m].setdefault(tid, []).append(p)
    return out


class ShareGroups:
    """The share groups this process coordinates (see the module docstring)."""

    def __init__(self, broker: Any, on_member_gone: Callable[[str, str], None],
                 group_config: Callable[[str, str], str | None]) -> None:
        self.broker = broker
        cfg = broker.config
        self.session_timeout_ms = cfg.get_int("group.share.session.timeout.ms")
        self.heartbeat_interval_ms = cfg.get_int("group.share.heartbeat.interval.ms")
        self.max_size = cfg.get_int("group.share.max.size")
        for name in ("session.timeout.ms", "heartbeat.interval.ms"):
            lo, hi = cfg.get_int(f"group.share.min.{name}"), cfg.get_int(f"group.share.max.{name}")
            if not lo <= cfg.get_int(f"group.share.{name}") <= hi:
                raise ValueError(f"group.share.{name} must be within group.share.min.{name} and group.share.max.{name}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")
        self.groups: dict[str, ShareGroup] = {}
        self.on_member_gone = on_member_gone
        self.group_config = group_config
        self._loop: Any = None

    def start(self, loop: Any) -> None:
        self._loop = loop

    def stop(self) -> None:
        for g in self.groups.values():
            for m in g.members.values():
                if m.timer is not None:
                    m.timer.cancel()

    # -- heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  topics: list[str] | None, client_id: str, client_host: str, status: int) -> HeartbeatResult:
        try:
            if not group_id:
                raise HeartbeatError(EC.INVALID_REQUEST, "GroupId can't be empty.")
            if not member_id:
                raise HeartbeatError(EC.INVALID_REQUEST, "MemberId can't be empty.")
            if rack_id == "":
                raise HeartbeatError(EC.INVALID_REQUEST, "RackId can't be empty.")
            if member_epoch == 0 and not topics:
                raise HeartbeatError(EC.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            if member_epoch < LEAVE_EPOCH:
                raise HeartbeatError(EC.INVALID_REQUEST, "MemberEpoch is invalid.")
            if status:
                raise HeartbeatError(status)
            if member_epoch == LEAVE_EPOCH:
                return self._leave(group_id, member_id)
            return self._heartbeat(group_id, member_id, member_epoch, rack_id, topics, client_id, client_host)
        except HeartbeatError as exc:
            return HeartbeatResult(exc.code, exc.message, member_epoch=0)

    def _group(self, group_id: str, create: bool) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is not None and not group.dead:
            return group
        other = self.broker.group_coordinator.groups.get(group_id)
        if other is not None and not other.is_(GroupState.DEAD):
            raise HeartbeatError(EC.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            raise HeartbeatError(EC.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def _heartbeat(self, group_id: str, member_id: str, epoch: int, rack_id: str | None, topics: list[str] | None,
                   client_id: str, client_host: str) -> HeartbeatResult:
        group = self._group(group_id, create=epoch == 0)
        member = group.members.get(member_id)
        bump = False
        records: Records = []
        if epoch == 0:
            if member is None:
                if len(group.members) >= self.max_size:
                    raise HeartbeatError(EC.GROUP_MAX_SIZE_REACHED,
                                         f"The share group has reached its maximum capacity of {self.max_size} members.")
                member = group.members[member_id] = ShareMember(member_id, client_id, client_host)
                bump = True
            member.sent_epoch = -1  # a (re)join always gets its assignment
        elif member is None:
            raise HeartbeatError(EC.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        elif epoch != member.member_epoch and epoch != member.previous_member_epoch:
            raise HeartbeatError(EC.FENCED_MEMBER_EPOCH,
                                 f"The share group member has a {'greater' if epoch > member.member_epoch else 'smaller'}"
                                 f" member epoch ({epoch}) than the one known by the group coordinator "
                                 f"({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        stored = (member.rack_id, list(member.subscribed_topics))
        if rack_id is not None:
            member.rack_id = rack_id
        if topics is not None and sorted(topics) != sorted(member.subscribed_topics):
            member.subscribed_topics = list(topics)
            bump = True
        if bump or stored != (member.rack_id, list(member.subscribed_topics)):
            records.append(self._member_record(group, member))
        records += self._forget_deleted_topics(group)
        signature = self._topic_signature(group)
        if signature != group.topic_signature:
            group.topic_signature = signature
            bump = True
        if bump:
            group.group_epoch += 1
            targets = self._assign(group)
            records += self._epoch_records(group) + targets
        moved = member.member_epoch != group.assignment_epoch
        if moved:
            records.append(self._current_record(group, member, group.assignment_epoch, member.member_epoch))
        err = self._write(group, records)
        if err:  # the member retries; what changed in memory stays consistent
            raise HeartbeatError(err)
        if moved:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        self._schedule_session(group, member)
        result = HeartbeatResult(member_id=member_id, member_epoch=member.member_epoch,
                                 heartbeat_interval_ms=self._setting(group_id, "heartbeat.interval.ms"))
        if member.sent_epoch != member.member_epoch or epoch != member.member_epoch:
            result.assignment = member.assignment
            member.sent_epoch = member.member_epoch
        return result

    def _topic_signature(self, group: ShareGroup) -> tuple:
        out = []
        for name in sorted(group.subscribed_topics()):
            meta = self.broker.topics.get(name)
            if meta is not None and name not in INTERNAL_TOPICS:
                out.append((name, meta.topic_id, meta.partitions))
        return tuple(out)

    # -- persistence (`__consumer_offsets`) ---------------------------------------------------
    @staticmethod
    def _member_record(group: ShareGroup, member: ShareMember) -> tuple[bytes, bytes]:
        return share_key("member", group.group_id, member.member_id), consumer_value(MemberValue(
            rack_id=member.rack_id, client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=list(member.subscribed_topics)))

    @staticmethod
    def _current_record(group: ShareGroup, member: ShareMember, epoch: int, previous: int) -> tuple[bytes, bytes]:
        """ShareGroupCurrentMemberAssignment: the member at `epoch` with its target assignment."""
        return share_key("current", group.group_id, member.member_id), consumer_value(CurrentValue(
            member_epoch=epoch, previous_member_epoch=previous, state=STABLE_MEMBER,
            assigned_partitions=[CurrentValue.TopicPartitions(topic_id=tid, partitions=ps)
                                 for tid, ps in sorted(member.assignment.items())]))

    @staticmethod
    def _target_records(group: ShareGroup, changed: list[ShareMember]) -> Records:
        """ShareGroupTargetAssignmentMember of the members whose target changed, then
        ShareGroupTargetAssignmentMetadata with the assignment epoch."""
        records: Records = [(share_key("target", group.group_id, m.member_id), consumer_value(TargetValue(
            topic_partitions=[TargetValue.TopicPartition(topic_id=tid, partitions=ps)
                              for tid, ps in sorted(m.assignment.items())]))) for m in changed]
        records.append((share_key("target_epoch", group.group_id),
                        consumer_value(TargetEpochValue(assignment_epoch=group.assignment_epoch))))
        return records

    @staticmethod
    def _epoch_records(group: ShareGroup) -> Records:
        """The group epoch record, after the initialised-partitions record when the assignment
        reached partitions not initialised before."""
        records: Records = []
        grown = False
        for name, tid, count in group.topic_signature:
            _, parts = group.initialized.setdefault(tid, (name, set()))
            if len(parts) < count:
                parts.update(range(count))
                grown = True
        if grown:
            records.append(ShareGroups._partition_metadata_record(group))
        records.append((share_key("group", group.group_id), consumer_value(GroupValue(epoch=group.group_epoch))))
        return records

    @staticmethod
    def _partition_metadata_record(group: ShareGroup) -> tuple[bytes, bytes]:
        V = PartitionMetaValue
        return share_key("partition_metadata", group.group_id), consumer_value(V(
            initialized_topics=[V.TopicPartitionsInfo(topic_id=tid, topic_name=name, partitions=sorted(parts))
                                for tid, (name, parts) in group.initialized.items()],
            deleting_topics=[V.TopicInfo(topic_id=tid, topic_name=name) for tid, (name, _) in group.deleting.items()]))

    # -- deleted topics -----------------------------------------------------------------------
    def forget_deleted_topics(self, coordinated: Callable[[str], bool]) -> None:
        """`_forget_deleted_topics` for every share group coordinated here (`coordinated`): the
        group coordinator's periodic cleanup, which reaches groups that no member heartbeats to."""
        for group in list(self.groups.values()):
            if not group.dead and coordinated(group.group_id):
                self._write_forgotten(group)

    def _write_forgotten(self, group: ShareGroup) -> None:
        if self._write(group, self._forget_deleted_topics(group)):
            log.warning("share group %s: could not write its partition metadata", group.group_id)

    def _forget_deleted_topics(self, group: ShareGroup) -> Records:
        """The initialised topics that no longer exist (deleted, perhaps created again under
        their name with a new topic id) move to the deleting ones, in the record returned (to be
        written first), and their share-partition state is deleted at the share coordinators
        (`_delete_state`; again at a later heartbeat when that failed)."""
        topics = self.broker.topics
        # (a starting cluster broker may coordinate before its first metadata arrives: it knows
        # the topic it coordinates from once it knows them all, and only then can a topic be missing)
        gone = [tid for tid in group.initialized if tid not in topics.by_id] if topics.get(OFFSETS_TOPIC) else []
        for tid in gone:
            group.deleting[tid] = group.initialized.pop(tid)
        if group.deleting and group.deleting_task is None and self._loop is not None:
            group.deleting_task = self._loop.create_task(self._delete_state(group))
        return [self._partition_metadata_record(group)] if gone else []

    async def _delete_state(self, group: ShareGroup) -> None:
        """DeleteShareGroupState of every partition of the group's deleting topics, then the
        group's partition metadata without them (Kafka's group coordinator does the same when
        the metadata image drops a topic)."""
        try:  # (a task: it starts once the record naming them deleting is written)
            deleting = dict(group.deleting)
            keys = [(group.group_id, tid, p) for tid, (_, parts) in deleting.items() for p in sorted(parts)]
            try:
                await self.broker.share.store.delete_state(keys)
            except E.KafkaError as exc:
                log.warning("share group %s: deleting the state of deleted topics failed: %s", group.group_id, exc)
                return
            if self.groups.get(group.group_id) is not group:
                return  # deleted, or no longer coordinated here
            for tid in deleting:
                group.deleting.pop(tid, None)
            if self._write(group, [self._partition_metadata_record(group)]):
                log.warning("share group %s: could not write its partition metadata", group.group_id)
        finally:
            group.deleting_task = None

    def _write(self, group: ShareGroup, records: Records) -> int:
        return self.broker.group_coordinator._append(group.group_id, records, clock.now_ms()) if records else 0

    @staticmethod
    def replay(records: dict[tuple[str, str | None], Any], record: ShareGroupRecord) -> None:
        """A share-group record read while loading `__consumer_offsets`, into its group's
        `records` (for `restore`): the latest value of each kind (and member), and under
        EVER_INITIALIZED the partitions every ShareGroupPartitionMetadata of the group listed
        as initialised, by topic id (a topic being deleted is listed without them)."""
        records[(record.kind, record.member_id)] = record.value
        if record.kind == "partition_metadata":
            if record.value is None:  # the group was deleted
                records.pop(EVER_INITIALIZED, None)
                return
            ever = records.setdefault(EVER_INITIALIZED, {})
            for t in record.value.initialized_topics:
                ever.setdefault(bytes(t.topic_id), set()).update(t.partitions)

    def restore(self, group_id: str, records: dict[tuple[str, str | None], Any]) -> None:
        """The share group as its records in `__consumer_offsets` left it (loading a partition):
        its epoch, initialised partitions and members; the members' sessions start again and
        their assignment is computed again at the stored epoch."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self.unload(lambda gid: gid == group_id)  # (loaded again: the records are the truth)
        head = records[("group", None)]
        target_epoch = records.get(("target_epoch", None))
        group = self.groups[group_id] = ShareGroup(
            group_id, group_epoch=head.epoch, assignment_epoch=target_epoch.assignment_epoch if target_epoch else 0)
        meta = records.get(("partition_metadata", None))
        for t in meta.initialized_topics if meta is not None else ():
            group.initialized[bytes(t.topic_id)] = (t.topic_name, set(t.partitions))
        ever = records.get(EVER_INITIALIZED, {})
        for t in meta.deleting_topics if meta is not None else ():  # (the record does not say their partitions)
            group.deleting[bytes(t.topic_id)] = (t.topic_name, set(ever.get(bytes(t.topic_id), ())))
        for (kind, mid), v in records.items():
            if kind == "member" and mid and v is not None:
                group.members[mid] = ShareMember(mid, v.client_id, v.client_host, v.rack_id,
                                                 list(v.subscribed_topic_names), member_epoch=head.epoch)
        for (kind, mid), v in records.items():
            member = group.members.get(mid or "")
            if member is None or v is None:
                continue
            if kind == "current":
                member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
            elif kind == "target":
                member.assignment = {bytes(t.topic_id): sorted(t.partitions) for t in v.topic_partitions}
        group.topic_signature = self._topic_signature(group)
        targets = self._assign(group)  # (the stored targets again, unless the topics changed meanwhile)
        for m in group.members.values():
            self._schedule_session(group, m)
        if self._write(group, targets):
            log.warning("share group %s: could not write its target assignment", group.group_id)
        self._write_forgotten(group)

    def unload(self, owned: Callable[[str], bool]) -> None:
        """This process no longer coordinates the groups `owned` says (a `__consumer_offsets`
        partition moved away): they are forgotten here, their timers stopped."""
        for gid in [g for g in self.groups if owned(g)]:
            for m in self.groups.pop(gid).members.values():
                if m.timer is not None:
                    m.timer.cancel()

    def _assign(self, group: ShareGroup) -> Records:
        """A new target assignment at the group epoch. Members with the same subscription are
        assigned together (the homogeneous case); different subscriptions each by their own.
        Returns the records of what changed (none when neither a target nor the epoch did)."""
        by_subscription: dict[tuple[str, ...], list[str]] = {}
        changed: list[ShareMember] = []
        for m in group.members.values():
            by_subscription.setdefault(tuple(sorted(set(m.subscribed_topics))), []).append(m.member_id)
        topics = {name: (tid, count) for name, tid, count in group.topic_signature}
        for subscription, members in by_subscription.items():
            partitions = [(topics[t][0], p) for t in subscription if t in topics for p in range(topics[t][1])]
            current = {mid: group.members[mid].assignment for mid in members}
            for mid, assignment in simple_assign(members, partitions, current).items():
                target = {tid: sorted(ps) for tid, ps in assignment.items()}
                if target != group.members[mid].assignment:
                    group.members[mid].assignment = target
                    changed.append(group.members[mid])
        if not changed and group.assignment_epoch == group.group_epoch:
            return []
        group.assignment_epoch = group.group_epoch
        return self._target_records(group, changed)

    def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self._group(group_id, create=False)
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(EC.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        self._remove(group, member, expired=False)
        return HeartbeatResult(member_id=member_id, member_epoch=LEAVE_EPOCH)

    def _remove(self, group: ShareGroup, member: ShareMember, expired: bool = True) -> None:
        """Takes the member out of the group. Only an expired member's records and share session
        go (`on_member_gone`): a member leaving with epoch -1 closes its share session after
        that (librdkafka's close() sends the leave heartbeat first, then the ShareAcknowledge
        with the last poll's acknowledgements), so its records stay acquired for it, as Kafka
        keeps them, until its session closes or their locks expire."""
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None
        del group.members[member.member_id]
        group.group_epoch += 1
        group.topic_signature = self._topic_signature(group)
        targets = self._assign(group)
        if self._write(group, [(share_key(kind, group.group_id, member.member_id), None)
                               for kind in ("current", "target", "member")] + self._epoch_records(group) + targets):
            log.warning("share group %s: could not write the removal of member %s", group.group_id, member.member_id)
        if expired:
            self.on_member_gone(group.group_id, member.member_id)

    def _schedule_session(self, group: ShareGroup, member: ShareMember) -> None:
        if member.timer is not None:
            member.timer.cancel()
        member.timer = clock.call_later(self._loop, self._setting(group.group_id, "session.timeout.ms"), self._expire,
                                        group, member)

    def _setting(self, group_id: str, name: str) -> int:
        """share.<name> of the group's configs, else the broker's group.share.<name>."""
        value = self.group_config(group_id, f"share.{name}")
        return int(value) if value else (self.session_timeout_ms if name == "session.timeout.ms"
                                         else self.heartbeat_interval_ms)

    def _expire(self, group: ShareGroup, member: ShareMember) -> None:
        member.timer = None
        if group.members.get(member.member_id) is member:
            log.info("share group %s: member %s session timed out", group.group_id, member.member_id)
            self._remove(group, member)

    # -- describe, list, delete --------------------------------------------------------------
    def get(self, group_id: str) -> ShareGroup | None:
        group = self.groups.get(group_id)
        return None if group is None or group.dead else group

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.get(group_id)
        return group is not None and member_id in group.members

    def deletable(self, group_id: str) -> int:
        """NONE for an empty share group; GROUP_ID_NOT_FOUND, or NON_EMPTY_GROUP while it has members."""
        group = self.get(group_id)
        if group is None:
            return EC.GROUP_ID_NOT_FOUND
        return EC.NON_EMPTY_GROUP if group.members else 0

    def delete(self, group_id: str) -> int:
        """DeleteGroups for a share group: only an empty one (`deletable`); its records in
        `__consumer_offsets` get tombstones."""
        err = self.deletable(group_id) or self._write(self.groups[group_id], [
            (share_key(kind, group_id), None) for kind in ("target_epoch", "partition_metadata", "group")])
        if err:
            return err
        group = self.groups[group_id]
        group.dead = True
        del self.groups[group_id]
        return 0
