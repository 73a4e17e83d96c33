"""One classic consumer group: members, generation, protocol, committed offsets.

States and transitions (Kafka's `GroupState`):

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                  ▲      │ (no members left: Empty, generation + 1)      │ leader's SyncGroup
      │                  │      ▼                                               ▼
      │                  └───── member joins, leaves, expires, changes ◀──── Stable
      └──────────── offsets all expired or DeleteGroups ──▶ Dead

The generation grows by one each time a join phase completes. The state machine itself is
driven by `GroupCoordinator`; this module only holds the data and the rules that need no
timers: protocol selection, member bookkeeping, the consumer-protocol subscription parse.
"""
from __future__ import annotations

import asyncio
import struct
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kafkafast.broker.groups.offsets_records import CommittedOffset
from kafkafast.protocol.errors import ErrorCode


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_future: asyncio.Future | None = None  # set while the member waits in JoinGroup
    sync_future: asyncio.Future | None = None  # set while the member waits in SyncGroup
    is_new: bool = False  # joined during the current join phase
    heartbeat_timer: Any = None
    last_heartbeat: float = 0.0

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates` (Kafka's `MemberMetadata.vote`)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member does not support any of the candidate protocols")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, Any] = field(default_factory=dict)  # member id -> expiry timer (MEMBER_ID_REQUIRED)
    pending_sync: set[str] = field(default_factory=set)  # members that have not sent SyncGroup yet
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    state_timestamp: int = -1  # when the group last changed state (offset expiry counts from Empty)
    join_timer: Any = None
    sync_timer: Any = None
    in_initial_delay: bool = False  # the join phase waits out group.initial.rebalance.delay.ms
    new_member_added: bool = False

    # -- state ----------------------------------------------------------------------------
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms

    # -- members --------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Kafka prefers a member that is already waiting in JoinGroup as the new leader.
            waiting = [m.member_id for m in self.members.values() if m.awaiting_join]
            self.leader_id = waiting[0] if waiting else next(iter(self.members), None)
        return member

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A static member's instance id now maps to another member id (Kafka's `isStaticMemberFenced`)."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The candidate protocol with the most member votes; ties go to the earlier vote."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        for m in self.members.values():
            choice = m.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    # -- subscriptions (consumer protocol) ------------------------------------------------
    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from consumer-protocol metadata; None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics


def static_leaver(static_members: dict[str, str], members: dict, member_id: str, instance_id: str) -> tuple[str, int]:
    """(member id, 0) of the static member a LeaveGroup entry names, or ("", UNKNOWN_MEMBER_ID
    / FENCED_INSTANCE_ID) as Kafka answers an unknown or replaced instance."""
    current = static_members.get(instance_id)
    if current is None or current not in members:
        return "", ErrorCode.UNKNOWN_MEMBER_ID
    if member_id and member_id != current:
        return "", ErrorCode.FENCED_INSTANCE_ID
    return current, 0


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (int16 version, then [string] topics)."""
    try:
        data = bytes(metadata)
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            out.append(data[pos:pos + ln].decode("utf-8"))
            pos += ln
        return out
    except (struct.error, UnicodeDecodeError):
        return None
