"""The generated protocol modules are exactly what the generator writes from the schemas,
and every message round-trips at every version it declares."""
from __future__ import annotations

import pytest

import kafkafast.protocol._generated as gen
from kafkafast.protocol import api, generator
from kafkafast.protocol._generated import coordinator_records as cr
from kafkafast.protocol._generated import headers
from kafkafast.protocol._generated.fetch import FetchResponse
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.protocol.primitives import DecodeError, Reader, Writer


def test_committed_modules_match_a_fresh_generation():
    if not generator.protocol_dir().exists():
        pytest.skip("../shared/kafka-protocol is not beside the repository")
    assert generator.diff() == []


def _all_classes():
    for cls in list(gen.REQUESTS.values()) + list(gen.RESPONSES.values()) + [headers.RequestHeader, headers.ResponseHeader]:
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            yield cls, v


@pytest.mark.parametrize("cls,version", list(_all_classes()), ids=lambda x: getattr(x, "__name__", str(x)))
def test_default_message_round_trips(cls, version):
    w = Writer()
    cls().encode(w, version)
    data = w.getvalue()
    r = Reader(data)
    decoded = cls.decode(r, version)
    assert r.remaining() == 0
    w2 = Writer()
    decoded.encode(w2, version)
    assert w2.getvalue() == data


def test_produce_request_v9_bytes_are_as_the_protocol_defines():
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=2, records=b"\x01\x02\x03")])])
    w = Writer()
    req.encode(w, 9)
    # compact nullable string null=0, acks int16, timeout int32, compact array (n+1),
    # compact string "t", compact array, int32 index, compact records (len+1), tags
    assert w.getvalue() == bytes([0x00, 0xFF, 0xFF, 0x00, 0x00, 0x75, 0x30, 0x02, 0x02, ord("t"), 0x02,
                                  0x00, 0x00, 0x00, 0x02, 0x04, 1, 2, 3, 0x00, 0x00, 0x00])


def test_produce_request_v3_uses_classic_strings_and_arrays():
    req = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=5, topic_data=[])
    w = Writer()
    req.encode(w, 3)
    assert w.getvalue() == b"\x00\x02tx" + b"\x00\x01" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x00"


def test_tagged_fields_round_trip_and_unknown_tags_are_kept():
    resp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[
        FetchResponse.PartitionData(partition_index=0, current_leader=FetchResponse.LeaderIdAndEpoch(
            leader_id=3, leader_epoch=7), records=b"")])])
    w = Writer()
    resp.encode(w, 12)
    back = FetchResponse.decode(Reader(w.getvalue()), 12)
    assert back.responses[0].partitions[0].current_leader.leader_id == 3
    assert back.responses[0].partitions[0].current_leader.leader_epoch == 7
    # an unknown tag on the request header survives a round trip
    h = headers.RequestHeader(request_api_key=3, request_api_version=12, correlation_id=9, client_id="c",
                              _unknown_tags={42: b"xyz"})
    w = Writer()
    h.encode(w, 2)
    h2 = headers.RequestHeader.decode(Reader(w.getvalue()), 2)
    assert h2._unknown_tags == {42: b"xyz"} and h2.client_id == "c"


def test_array_longer_than_the_bytes_left_is_rejected_before_allocating():
    w = Writer()
    w.int32(0x7FFFFFFF)  # topics array length
    with pytest.raises(DecodeError):
        MetadataRequest.decode(Reader(w.getvalue()), 1)


def test_negative_string_length_in_non_nullable_field_is_rejected():
    w = Writer()
    w.int32(1)
    w.int16(-1)  # topic name null where not nullable (v1-v9)
    with pytest.raises(DecodeError):
        MetadataRequest.decode(Reader(w.getvalue()), 1)


def test_request_frame_round_trip_through_api_helpers():
    req = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    frame = api.encode_request(req, 12, 77, "me")
    header, body = api.decode_request(memoryview(frame)[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (3, 12, 77, "me")
    assert body.topics is None and body.allow_auto_topic_creation is False


def test_coordinator_record_formats_are_generated():
    key = cr.OffsetCommitKey(group="g", topic="t", partition=4)
    w = Writer()
    key.encode(w, 1)
    assert w.getvalue() == b"\x00\x01g\x00\x01t\x00\x00\x00\x04"


@pytest.mark.parametrize("make_dir", [False, True], ids=["missing", "empty"])
def test_check_without_schemas_says_the_schema_directory_is_missing(tmp_path, make_dir):
    import os
    import subprocess
    import sys

    proto = tmp_path / "kafka-protocol"
    if make_dir:
        (proto / "messages").mkdir(parents=True)
    repo = str(generator.REPO_DIR)  # this tree's generator, whatever is installed
    env = dict(os.environ, KAFKAFAST_PROTOCOL_DIR=str(proto), PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "kafkafast.protocol.generator", "--check"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert f"Kafka's protocol schemas are not at {proto}" in res.stderr
    assert "differ" not in res.stdout + res.stderr
    with pytest.raises(generator.SchemaDirMissing):
        generator.generate(generator.OUT_DIR, proto)
