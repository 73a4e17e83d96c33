"""The Fetch answer's partitions the handler writes itself (`protocol/fetch_answer.py`) encode to
the bytes the generated FetchResponse.PartitionData encodes for the same fields, in every
flexible version, with records as bytes, as a file region (its own part, for sendfile) or
empty, and with or without aborted transactions; and the follower's reader
(`protocol/fetch_walk.py`) reads them back."""
from __future__ import annotations

import os

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchResponse
from kafkafast.protocol.fetch_answer import PartitionAnswer
from kafkafast.protocol.fetch_walk import FetchAnswer
from kafkafast.protocol.primitives import FileRegion

ABORTED = [FetchResponse.AbortedTransaction(producer_id=7, first_offset=100),
           FetchResponse.AbortedTransaction(producer_id=9, first_offset=2**40)]


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    path = tmp_path_factory.mktemp("fetch_answer") / "segment"
    path.write_bytes(bytes(range(256)) * 8)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def answers(segment):
    """(fields) of partitions: index, high watermark, last stable offset, log start, aborted, records."""
    return [
        (0, 1000, 990, 0, None, FileRegion(segment, 17, 1500)),
        (5, 2**40, 2**40, 12, [], b""),
        (2**31 - 1, -1, -1, -1, list(ABORTED), b"\x00\x01" * 70),
        (3, 64, 60, 0, list(ABORTED), FileRegion(segment, 0, 200)),
    ]


def frame(partition_class, fields, version):
    """The response frame's parts, FileRegions read, as one bytes object."""
    def part(i, hw, lso, start, aborted, records):
        if partition_class is PartitionAnswer:
            return PartitionAnswer(i, hw, lso, start, aborted, records)
        return FetchResponse.PartitionData(partition_index=i, error_code=0, high_watermark=hw,
                                           last_stable_offset=lso, log_start_offset=start,
                                           aborted_transactions=aborted, preferred_read_replica=-1, records=records)
    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=77, node_endpoints=[], responses=[
        FetchResponse.FetchableTopicResponse(topic="t", topic_id=b"\x01" * 16, partitions=[part(*f) for f in fields[:2]]),
        FetchResponse.FetchableTopicResponse(topic="u", topic_id=b"\x02" * 16, partitions=[part(*f) for f in fields[2:]])])
    parts = api.encode_response(1, version, 42, resp)
    return parts, b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)


@pytest.mark.parametrize("version", range(12, 18))
def test_same_bytes_as_the_generated_encoder(segment, version):
    fields = answers(segment)
    gen_parts, gen = frame(FetchResponse.PartitionData, fields, version)
    new_parts, new = frame(PartitionAnswer, fields, version)
    assert new == gen
    # the file regions stay parts of their own (sendfile), at the same places
    assert [p for p in new_parts if isinstance(p, FileRegion)] == [p for p in gen_parts if isinstance(p, FileRegion)]
    assert [isinstance(p, FileRegion) for p in new_parts] == [isinstance(p, FileRegion) for p in gen_parts]


def test_the_followers_reader_reads_them(segment):
    fields = answers(segment)
    _, data = frame(PartitionAnswer, fields, 12)
    walked = list(FetchAnswer(data[4:]).partitions())
    assert [(p.topic, p.partition, p.high_watermark, p.last_stable_offset, p.log_start_offset) for p in walked] == \
        [(t, f[0], f[1], f[2], f[3]) for t, f in zip("ttuu", fields)]
    assert [p.aborted for p in walked] == [None, [], [(7, 100), (9, 2**40)], [(7, 100), (9, 2**40)]]
    assert bytes(walked[0].records) == os.pread(segment, 1500, 17)
    assert bytes(walked[2].records) == b"\x00\x01" * 70
