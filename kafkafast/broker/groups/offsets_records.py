"""Records of the internal topic `__consumer_offsets`, in Kafka's formats.

Every record has a key and (unless it is a tombstone) a value, each an int16 version
followed by the struct of that version (`../shared/kafka-protocol/group-coordinator/`):

    key version 0, 1   OffsetCommitKey    group, topic, partition
    key version 2      GroupMetadataKey   group
    key version 3      ConsumerGroupMetadata (KIP-848): the group is a consumer group;
                       value: its group epoch
    key version 5      ConsumerGroupMemberMetadata: a member's subscription and client
    key version 6      ConsumerGroupTargetAssignmentMetadata: the assignment epoch
    key version 7      ConsumerGroupTargetAssignmentMember: a member's target assignment
    key version 8      ConsumerGroupCurrentMemberAssignment: a member's epochs, state
                       (0 stable, 1 unrevoked partitions, 2 unreleased partitions) and
                       assigned / pending-revocation partitions (epoch -2: a static member
                       that left for now)
    key version 4      ConsumerGroupPartitionMetadata: the subscribed topics' ids, names and
                       partition counts the target assignment was computed from (no racks),
                       so loading the group does not bump its epoch unless they changed
    key version 9      ShareGroupPartitionMetadata (KIP-932): the topics and partitions whose
                       share-partition state the share group initialised
    key version 10     ShareGroupMemberMetadata: a share group member's subscription and client
    key version 11     ShareGroupMetadata: the group is a share group; value: its group epoch
    key version 12     ShareGroupTargetAssignmentMetadata: the share group's assignment epoch
    key version 13     ShareGroupTargetAssignmentMember: a share group member's target assignment
    key version 14     ShareGroupCurrentMemberAssignment: a share group member's epoch, previous
                       epoch, state (0 stable) and assigned partitions

    OffsetCommitValue  version 1 when an expire timestamp is set (OffsetCommit v2-v4 with a
                       retention time), otherwise version 3 (with the leader epoch), as
                       Kafka writes them
    GroupMetadataValue version 3 (members carry group.instance.id)

    Below inter.broker.protocol.version 2.3 Kafka writes older values, and so does kafkafast
    (tools that decode this topic, such as Burrow 1.2, know only those): GroupMetadataValue v2
    (no group.instance.id) below 2.3-IV0 and v1 (no state timestamp) below 2.1-IV0;
    OffsetCommitValue v1 (an expire timestamp of -1) below 2.1-IV0 and v2 (no leader epoch)
    below 2.1-IV1. Records of every version are read.

A null value is a tombstone: the committed offset was deleted or expired, or the group
was deleted. The topic is compacted, so only the latest record per key survives.
"""
from __future__ import annotations

from dataclasses import dataclass

from kafkafast.protocol._generated.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupPartitionMetadataKey,
    ShareGroupPartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)
from kafkafast.config_def import ibp_at_least
from kafkafast.protocol.primitives import Reader, Writer

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3
CONSUMER_GROUP_KEY_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 0
# consumer-group record kinds: key version -> (name, key class, value class)
CONSUMER_RECORDS = {
    3: ("group", ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: ("partition_metadata", ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: ("member", ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: ("target_epoch", ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: ("target", ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: ("current", ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
}
_CONSUMER_KEY_VERSION = {name: version for version, (name, _, _) in CONSUMER_RECORDS.items()}
# share-group record kinds, likewise
SHARE_RECORDS = {
    9: ("partition_metadata", ShareGroupPartitionMetadataKey, ShareGroupPartitionMetadataValue),
    10: ("member", ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
    11: ("group", ShareGroupMetadataKey, ShareGroupMetadataValue),
    12: ("target_epoch", ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
    13: ("target", ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
    14: ("current", ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
}
_SHARE_KEY_VERSION = {name: version for version, (name, _, _) in SHARE_RECORDS.items()}


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


def _encode(version: int, struct) -> bytes:
    w = Writer()
    w.int16(version)
    struct.encode(w, version)
    return w.getvalue()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _encode(OFFSET_KEY_VERSION, OffsetCommitKey(group=group, topic=topic, partition=partition))


def value_versions(inter_broker_protocol: str | None) -> tuple[int, int]:
    """(GroupMetadataValue version, OffsetCommitValue version without an expire timestamp) that
    Kafka's GroupMetadataManager writes at inter.broker.protocol.version `inter_broker_protocol`
    (None: the latest). Below 0.11.0 the broker does not start (BrokerConfig)."""
    group = 3 if ibp_at_least(inter_broker_protocol, "2.3-IV0") else (
        2 if ibp_at_least(inter_broker_protocol, "2.1-IV0") else 1)
    offset = 3 if ibp_at_least(inter_broker_protocol, "2.1-IV1") else (
        2 if ibp_at_least(inter_broker_protocol, "2.1-IV0") else OFFSET_VALUE_VERSION_WITH_EXPIRY)
    return group, offset


def offset_value(c: CommittedOffset, version: int = OFFSET_VALUE_VERSION) -> bytes:
    """The committed offset's value: `version` (value_versions), or version 1 when it has an
    expire timestamp."""
    if c.expire_timestamp >= 0 or version == OFFSET_VALUE_VERSION_WITH_EXPIRY:
        return _encode(OFFSET_VALUE_VERSION_WITH_EXPIRY, OffsetCommitValue(
            offset=c.offset, metadata=c.metadata, commit_timestamp=c.commit_timestamp,
            expire_timestamp=c.expire_timestamp))
    return _encode(version, OffsetCommitValue(
        offset=c.offset, leader_epoch=c.leader_epoch, metadata=c.metadata, commit_timestamp=c.commit_timestamp))


def group_key(group: str) -> bytes:
    return _encode(GROUP_KEY_VERSION, GroupMetadataKey(group=group))


def group_value(value: GroupMetadataValue, version: int = GROUP_VALUE_VERSION) -> bytes:
    return _encode(version, value)


def consumer_key(kind: str, group: str, member_id: str | None = None) -> bytes:
    """The key of a consumer-group record of `kind` (see CONSUMER_RECORDS)."""
    return _group_key(CONSUMER_RECORDS, _CONSUMER_KEY_VERSION[kind], group, member_id)


def share_key(kind: str, group: str, member_id: str | None = None) -> bytes:
    """The key of a share-group record of `kind` (see SHARE_RECORDS)."""
    return _group_key(SHARE_RECORDS, _SHARE_KEY_VERSION[kind], group, member_id)


def _group_key(kinds: dict, version: int, group: str, member_id: str | None) -> bytes:
    key_cls = kinds[version][1]
    key = key_cls(group_id=group) if member_id is None else key_cls(group_id=group, member_id=member_id)
    return _encode(version, key)


def consumer_value(value) -> bytes:
    return _encode(0, value)


def consumer_group_key(group: str) -> bytes:
    return consumer_key("group", group)


def consumer_group_value(epoch: int) -> bytes:
    return consumer_value(ConsumerGroupMetadataValue(epoch=epoch))


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    group: str
    topic: str
    partition: int
    value: CommittedOffset | None  # None: tombstone


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group: str
    value: GroupMetadataValue | None  # None: tombstone


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecord:
    kind: str  # "group", "partition_metadata", "member", "target_epoch", "target", "current"
    group: str
    member_id: str | None
    value: object | None  # the decoded value struct; None: tombstone


@dataclass(frozen=True, slots=True)
class ShareGroupRecord:
    kind: str  # "group", "partition_metadata", "member", "target_epoch", "target", "current"
    group: str
    member_id: str | None
    value: object | None  # the decoded value struct; None: tombstone


def decode_record(key: bytes | None, value: bytes | None
                  ) -> OffsetRecord | GroupRecord | ConsumerGroupRecord | ShareGroupRecord | None:
    """The record as an `OffsetRecord`, `GroupRecord`, `ConsumerGroupRecord` or `ShareGroupRecord`;
    None for keys of other kinds."""
    if key is None or len(key) < 2:
        return None
    r = Reader(key)
    version = r.int16()
    if version in (0, 1):
        k = OffsetCommitKey.decode(r, version)
        if value is None:
            return OffsetRecord(k.group, k.topic, k.partition, None)
        vr = Reader(value)
        vv = vr.int16()
        v = OffsetCommitValue.decode(vr, min(vv, OffsetCommitValue.MAX_VERSION))
        return OffsetRecord(k.group, k.topic, k.partition,
                            CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp))
    if version == 2:
        k = GroupMetadataKey.decode(r, version)
        if value is None:
            return GroupRecord(k.group, None)
        vr = Reader(value)
        vv = vr.int16()
        return GroupRecord(k.group, GroupMetadataValue.decode(vr, min(vv, GroupMetadataValue.MAX_VERSION)))
    if version in CONSUMER_RECORDS or version in SHARE_RECORDS:
        record_cls = ConsumerGroupRecord if version in CONSUMER_RECORDS else ShareGroupRecord
        kind, key_cls, value_cls = (CONSUMER_RECORDS if version in CONSUMER_RECORDS else SHARE_RECORDS)[version]
        ck = key_cls.decode(r, version)
        member_id = getattr(ck, "member_id", None)
        if value is None:
            return record_cls(kind, ck.group_id, member_id, None)
        vr = Reader(value)
        vv = vr.int16()
        return record_cls(kind, ck.group_id, member_id, value_cls.decode(vr, min(vv, value_cls.MAX_VERSION)))
    return None
