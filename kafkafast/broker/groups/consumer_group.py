"""One group of the next-generation consumer group protocol (KIP-848): members, epochs,
target assignment, and the reconciliation of each member towards its target.

Epochs: the group epoch grows by one whenever what the assignment depends on changes (a
member joins, leaves, is fenced, changes its subscription or assignor; a subscribed topic
appears, disappears or gains partitions). When the group epoch is ahead of the assignment
epoch the coordinator runs the assignor (`assignors.py`) and the target assignment gets
the group epoch. Each member then moves towards its target on its own heartbeats (Kafka's
`CurrentAssignmentBuilder`):

    Stable ──target changed──▶ partitions to revoke? ── yes ─▶ UnrevokedPartitions
       ▲                           │ no                           │ the member's heartbeat no
       │                           ▼                              │ longer lists them
       └── all new partitions ◀── new partitions still owned ◀────┘
           free                   by another member? UnreleasedPartitions

A member keeps its epoch while it has partitions to revoke and takes the target's epoch
once it has none; a partition is handed to its new owner only after the previous owner
has acknowledged its revocation (it is free in `owners`). Partitions are keyed by topic
id, as on the wire.

Group states as Kafka names them: Empty (no members), Assigning (group epoch ahead of the
assignment epoch), Reconciling (some member not yet at the assignment epoch or in a
transitional state), Stable, Dead. `is_`/`transition` mirror the classic `Group` so that
the code shared by both kinds (offsets, expiry, deletion) treats them alike.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from kafkafast.broker.groups.group import GroupState
from kafkafast.broker.groups.offsets_records import CommittedOffset, consumer_group_key, consumer_key, group_key

STABLE = "stable"
UNREVOKED = "unrevoked_partitions"
UNRELEASED = "unreleased_partitions"
STATE_CODES = {STABLE: 0, UNREVOKED: 1, UNRELEASED: 2}  # as stored in CurrentMemberAssignment records
STATIC_LEFT_EPOCH = -2

Assignment = dict[bytes, set[int]]  # topic id -> partitions


def copy_assignment(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items() if ps}


@dataclass(slots=True)
class ClassicMeta:
    """What a member of the classic protocol inside a consumer group joined with (Kafka's
    ClassicMemberMetadata): its session timeout and (name, metadata) protocols in its order."""
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: list[str]
    server_assignor: str | None
    rebalance_timeout_ms: int
    subscribed_regex: str | None = None  # SubscribedTopicRegex (v1): topics whose whole name matches
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_timer: Any = None
    revocation_timer: Any = None
    classic: ClassicMeta | None = None  # set for a member speaking JoinGroup/SyncGroup/Heartbeat
    classic_timer: Any = None  # a classic member's join or sync deadline (its rebalance timeout)

    @property
    def left_static(self) -> bool:
        """Left with epoch -2: kept (with its assignment) until it rejoins or its session expires."""
        return self.member_epoch == STATIC_LEFT_EPOCH


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    owners: dict[tuple[bytes, int], str] = field(default_factory=dict)  # partition -> member holding it
    subscription_meta: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # topic -> (id, partitions)
    resolved: dict[str, frozenset[str]] = field(default_factory=dict)  # regex -> the topics it matches now
    regex_filters: dict[str, Any] = field(default_factory=dict)  # regex -> topic DESCRIBE check (authorizer)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    state_timestamp: int = -1
    assignor_name: str = ""
    dead: bool = False
    pending_members: dict[str, Any] = field(default_factory=dict)  # always empty (shared code reads it)
    protocol_type: str = "consumer"

    # -- state ----------------------------------------------------------------------------
    @property
    def state_name(self) -> str:
        if self.dead:
            return "Dead"
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != STABLE:
                return "Reconciling"
        return "Stable"

    def is_(self, state: GroupState) -> bool:
        if state is GroupState.DEAD:
            return self.dead
        if state is GroupState.EMPTY:
            return not self.dead and not self.members
        if state is GroupState.STABLE:
            return self.state_name == "Stable"
        return False

    def transition(self, state: GroupState, now_ms: int) -> None:
        if state is GroupState.DEAD:
            self.dead = True
        self.state_timestamp = now_ms

    def member_topics(self, member: ConsumerMember) -> set[str]:
        """What the member subscribes to: its topic names and what its regex matches (the union)."""
        topics = set(member.subscribed_topics)
        if member.subscribed_regex:
            topics |= self.resolved.get(member.subscribed_regex, frozenset())
        return topics

    def regexes(self) -> set[str]:
        return {m.subscribed_regex for m in self.members.values() if m.subscribed_regex}

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's `ConsumerGroup.supportsClassicProtocols`: protocol type "consumer" and a
        protocol every classic member supports (any, while there is none)."""
        if protocol_type != "consumer" or not names:
            return False
        classic = [m for m in self.members.values() if m.classic is not None]
        return any(all(n in {p for p, _ in m.classic.protocols} for m in classic) for n in names)  # type: ignore[union-attr]

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target is still held by another member."""
        for tid, parts in self.target.get(member.member_id, {}).items():
            for p in parts - member.assigned.get(tid, set()):
                if self.owners.get((tid, p)) not in (None, member.member_id):
                    return True
        return False

    # -- ownership ------------------------------------------------------------------------
    def set_member_assignment(self, member: ConsumerMember, assigned: Assignment, pending: Assignment) -> None:
        """Replaces what the member holds (assigned and pending revocation) in `owners`."""
        for held in (member.assigned, member.pending_revocation):
            for tid, parts in held.items():
                for p in parts:
                    if self.owners.get((tid, p)) == member.member_id:
                        del self.owners[(tid, p)]
        member.assigned = copy_assignment(assigned)
        member.pending_revocation = copy_assignment(pending)
        for held in (member.assigned, member.pending_revocation):
            for tid, parts in held.items():
                for p in parts:
                    self.owners[(tid, p)] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.get(member_id)
        if member is None:
            return None
        self.set_member_assignment(member, {}, {})
        del self.members[member_id]
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def rename_member(self, old_id: str, new_id: str) -> ConsumerMember:
        """A static member rejoined under a new member id: it keeps what it held."""
        member = self.members.pop(old_id)
        assigned, pending = member.assigned, member.pending_revocation
        self.set_member_assignment(member, {}, {})
        member.member_id = new_id
        self.members[new_id] = member
        self.set_member_assignment(member, assigned, pending)
        if old_id in self.target:
            self.target[new_id] = self.target.pop(old_id)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = new_id
        return member

    # -- reconciliation -------------------------------------------------------------------
    def reconcile(self, member: ConsumerMember, owned: Assignment | None) -> None:
        """Moves the member towards its target (Kafka's CurrentAssignmentBuilder); `owned`
        is what its heartbeat says it holds (None: unchanged since the last heartbeat)."""
        if member.state == UNREVOKED:
            if owned is None or _holds_any(owned, member.pending_revocation):
                return  # still revoking
            self.set_member_assignment(member, member.assigned, {})
            self._next_assignment(member)
        elif member.state == UNRELEASED or member.member_epoch != self.assignment_epoch:
            self._next_assignment(member)

    def _next_assignment(self, member: ConsumerMember) -> None:
        target = self.target.get(member.member_id, {})
        retained: Assignment = {}
        revoking: Assignment = {}
        assignable: Assignment = {}
        unreleased = False
        for tid in set(member.assigned) | set(target):
            current = member.assigned.get(tid, set())
            wanted = target.get(tid, set())
            if current & wanted:
                retained[tid] = current & wanted
            if current - wanted:
                revoking[tid] = current - wanted
            new = wanted - current
            free = {p for p in new if self.owners.get((tid, p)) in (None, member.member_id)}
            if free:
                assignable[tid] = free
            if len(free) < len(new):
                unreleased = True
        if revoking:
            member.state = UNREVOKED
            self.set_member_assignment(member, retained, revoking)
            return
        for tid, parts in assignable.items():
            retained.setdefault(tid, set()).update(parts)
        self.set_member_assignment(member, retained, {})
        member.state = UNRELEASED if unreleased else STABLE
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch


def _holds_any(owned: Assignment, partitions: Assignment) -> bool:
    return any(owned.get(tid, set()) & parts for tid, parts in partitions.items())


def is_subset(owned: Assignment, of: Assignment) -> bool:
    return all(parts <= of.get(tid, set()) for tid, parts in owned.items())


# -- the classic view (DescribeGroups on a consumer group, as Kafka 4.0 answers) ----------

def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def subscription_bytes(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: topics, null user data."""
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def assignment_bytes(partitions: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: topic partitions, null user data."""
    out = bytearray(struct.pack(">hi", 0, len(partitions)))
    for topic, parts in sorted(partitions.items()):
        out += _string(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in sorted(parts))
    out += struct.pack(">i", -1)
    return bytes(out)


class HeartbeatError(Exception):
    """A ConsumerGroupHeartbeat answered with `code` (and `message`) instead of an assignment."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def group_tombstones(group: Any) -> list[tuple[bytes, bytes | None]]:
    """Tombstones for an (empty) group's own records: GroupMetadata, or the consumer group's
    ConsumerGroupMetadata, PartitionMetadata and TargetAssignmentMetadata."""
    if isinstance(group, ConsumerGroup):
        return [(consumer_key("target_epoch", group.group_id), None),
                (consumer_key("partition_metadata", group.group_id), None), (consumer_group_key(group.group_id), None)]
    return [(group_key(group.group_id), None)]
