"""The share-group assignment records of `__consumer_offsets` (KIP-932) as Kafka lays them out,
built byte by byte here: ShareGroupTargetAssignmentMetadata (record type 12),
ShareGroupTargetAssignmentMember (13) and ShareGroupCurrentMemberAssignment (14), decoded by
the group coordinator's loader (`decode_record`) and by `kafkafast dump-log --offsets-decoder`."""
import struct

from kafkafast.broker.groups.offsets_records import ShareGroupRecord, decode_record, share_key
from kafkafast.cli.coordinator_decoders import offsets_record

TID = bytes(range(16))  # base64 AAECAwQFBgcICQoLDA0ODw==


def string(s: str) -> bytes:  # a non-flexible key's string: int16 length
    return struct.pack(">h", len(s)) + s.encode()


def uvarint(n: int) -> bytes:  # the compact arrays' length + 1 (small here)
    return bytes([n])


def partitions(ps: list[int]) -> bytes:  # a flexible []TopicPartitions entry: uuid, compact []int32, no tags
    return TID + uvarint(len(ps) + 1) + b"".join(struct.pack(">i", p) for p in ps) + b"\0"


def test_a_members_current_assignment_decodes_as_kafka_writes_it():
    key = struct.pack(">h", 14) + string("g") + string("m1")
    value = struct.pack(">hiib", 0, 7, 5, 0) + uvarint(2) + partitions([0, 2]) + b"\0"
    assert share_key("current", "g", "m1") == key
    rec = decode_record(key, value)
    assert isinstance(rec, ShareGroupRecord) and (rec.kind, rec.group, rec.member_id) == ("current", "g", "m1")
    v = rec.value
    assert (v.member_epoch, v.previous_member_epoch, v.state) == (7, 5, 0)
    assert [(bytes(t.topic_id), list(t.partitions)) for t in v.assigned_partitions] == [(TID, [0, 2])]
    assert offsets_record(key, value, 0) == (
        '{"type":"14","data":{"groupId":"g","memberId":"m1"}}',
        '{"version":"0","data":{"memberEpoch":7,"previousMemberEpoch":5,"state":0,'
        '"assignedPartitions":[{"topicId":"AAECAwQFBgcICQoLDA0ODw==","partitions":[0,2]}]}}')
    assert offsets_record(key, None, 0)[1] == "<DELETE>"


def test_the_target_assignment_and_its_epoch_decode_as_kafka_writes_them():
    member_key = struct.pack(">h", 13) + string("g") + string("m1")
    member_value = struct.pack(">h", 0) + uvarint(2) + partitions([1]) + b"\0"
    epoch_key = struct.pack(">h", 12) + string("g")
    epoch_value = struct.pack(">hi", 0, 7) + b"\0"
    assert (share_key("target", "g", "m1"), share_key("target_epoch", "g")) == (member_key, epoch_key)
    target = decode_record(member_key, member_value)
    assert (target.kind, target.member_id) == ("target", "m1")
    assert [(bytes(t.topic_id), list(t.partitions)) for t in target.value.topic_partitions] == [(TID, [1])]
    assert decode_record(epoch_key, epoch_value).value.assignment_epoch == 7
    assert offsets_record(member_key, member_value, 0)[1] == \
        '{"version":"0","data":{"topicPartitions":[{"topicId":"AAECAwQFBgcICQoLDA0ODw==","partitions":[1]}]}}'
    assert offsets_record(epoch_key, epoch_value, 0) == (
        '{"type":"12","data":{"groupId":"g"}}', '{"version":"0","data":{"assignmentEpoch":7}}')
