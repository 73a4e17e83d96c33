"""The lean path's whole Fetch answer (`protocol/fetch_answer_frame.py`) has the bytes, part for
part, of `api.encode_response` of the generated FetchResponse with the same partitions, in every
flexible version: records as file regions (their own parts, for sendfile), bytes or empty, one
topic or several, none at all."""
from __future__ import annotations

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchResponse
from kafkafast.protocol.fetch_answer import PartitionAnswer
from kafkafast.protocol.fetch_answer_frame import fetch_answer_frame
from kafkafast.protocol.primitives import FileRegion
from tests.unit.test_fetch_answer import segment  # noqa: F401  (the fixture: a file for the regions)




def topics(segment):
    return [
        ("tópico", bytes(range(16)), [(0, 1000, 990, 0, FileRegion(segment, 17, 1500)), (5, 2**40, 2**40, 12, b""),
                                      (2**31 - 1, 64, 60, 0, FileRegion(segment, 0, 200))]),
        ("u", bytes(range(16, 32)), [(3, -1, -1, -1, b"\x00\x01" * 70)]),
        ("tópico", bytes(range(16)), [(7, 10, 10, 10, FileRegion(segment, 300, 1))]),
    ]


def flat(parts) -> list:
    return [p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts]


@pytest.mark.parametrize("version", range(12, 18))
@pytest.mark.parametrize("pick", [slice(0, 3), slice(1, 2), slice(0, 0)])
def test_same_parts_as_the_generated_encoder(segment, version, pick):
    chosen = topics(segment)[pick]
    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=2**31 - 5, node_endpoints=[], responses=[
        FetchResponse.FetchableTopicResponse(topic=name, topic_id=tid, partitions=[
            PartitionAnswer(i, hw, lso, start, None, records) for i, hw, lso, start, records in ps])
        for name, tid, ps in chosen])
    assert flat(fetch_answer_frame(99, 2**31 - 5, version, chosen)) == flat(api.encode_response(1, version, 99, resp))


def many(segment):
    """Counts of two bytes: 200 partitions in a topic, 130 topics; records empty as bytes,
    bytearray and memoryview, a region among them."""
    empties = [b"", bytearray(), memoryview(b"")]
    big = ("big", bytes(16), [(i, i, i, 0, empties[i % 3] if i != 126 else FileRegion(segment, 0, 61))
                              for i in range(200)])
    return [big] + [("t%d" % i, bytes([i]) * 16, [(0, 5, 5, 0, b"\x07" * i)]) for i in range(129)]


@pytest.mark.parametrize("version", [12, 13, 17])
@pytest.mark.parametrize("count", [126, 127, 128, 130])
def test_counts_over_a_byte(segment, version, count):
    chosen = many(segment)[:count]
    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=7, node_endpoints=[], responses=[
        FetchResponse.FetchableTopicResponse(topic=name, topic_id=tid, partitions=[
            PartitionAnswer(i, hw, lso, start, None, records) for i, hw, lso, start, records in ps])
        for name, tid, ps in chosen])
    assert flat(fetch_answer_frame(3, 7, version, chosen)) == flat(api.encode_response(1, version, 3, resp))


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """A file of 2 MiB + 8 bytes: regions whose compact lengths take one to four varint bytes."""
    import os
    path = tmp_path_factory.mktemp("fetch_answer_frame") / "large"
    path.write_bytes(bytes(range(256)) * (8 * 1024 + 1) + bytes(range(8)))
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("length", [1, 126, 127, 128, 0x3FFE, 0x3FFF, 0x4000, 0x1FFFFE, 0x1FFFFF, 0x200000])
def test_record_lengths_at_each_varint_width(large, length):
    chosen = [("t", bytes(16), [(0, 9, 9, 0, FileRegion(large, 3, length)), (1, 9, 9, 0, b"\x05" * (length % 300))])]
    for version in (12, 13):
        resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=7, node_endpoints=[], responses=[
            FetchResponse.FetchableTopicResponse(topic=name, topic_id=tid, partitions=[
                PartitionAnswer(i, hw, lso, start, None, records) for i, hw, lso, start, records in ps])
            for name, tid, ps in chosen])
        assert flat(fetch_answer_frame(3, 7, version, chosen)) == flat(api.encode_response(1, version, 3, resp))
