"""The follower's in-place walk of a Fetch v12 answer (protocol/fetch_walk.py) reads what the
generated decoder reads, on partitions with and without aborted transactions, tagged fields,
errors and null records, records whose length takes one to four varint bytes, and a frame cut
anywhere is a DecodeError, never a wrong answer."""
from __future__ import annotations

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchResponse as R
from kafkafast.protocol.fetch_walk import FETCH_WALK_VERSION, FetchAnswer
from kafkafast.protocol.primitives import DecodeError


def partition(i: int, **kw) -> R.PartitionData:
    fields = dict(partition_index=i, error_code=0, high_watermark=100 + i, last_stable_offset=90 + i,
                  log_start_offset=i, aborted_transactions=None, preferred_read_replica=-1, records=bytes([i]) * (50 * i))
    fields.update(kw)
    return R.PartitionData(**fields)


PARTITIONS = {
    "plain": [partition(i) for i in range(1, 4)],
    "mixed": [
        partition(0, records=None, error_code=6),  # NOT_LEADER_OR_FOLLOWER, null records
        partition(1, aborted_transactions=[R.AbortedTransaction(producer_id=3, first_offset=7)]),
        partition(2, aborted_transactions=[]),
        partition(3, diverging_epoch=R.EpochEndOffset(epoch=4, end_offset=77)),  # tagged fields
        partition(4, current_leader=R.LeaderIdAndEpoch(leader_id=2, leader_epoch=9), records=b"\x00" * 300),
        partition(5),
        partition(6, records=b"\x01" * 17_000),  # a length of three varint bytes
    ],
}


def answer_frame() -> bytes:
    resp = R(throttle_time_ms=0, error_code=0, session_id=5, responses=[
        R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in PARTITIONS.items()])
    return b"".join(bytes(p) for p in api.encode_response(R.API_KEY, FETCH_WALK_VERSION, 3, resp))[4:]


def test_reads_what_the_generated_decoder_reads():
    data = answer_frame()
    walked = list(FetchAnswer(data).partitions())
    _, resp = api.decode_response(R.API_KEY, FETCH_WALK_VERSION, data)
    want = [(t.topic, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
             None if p.aborted_transactions is None else [(a.producer_id, a.first_offset) for a in p.aborted_transactions],
             None if p.records is None else bytes(p.records)) for t in resp.responses for p in t.partitions]
    assert [(p.topic, p.partition, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset, p.aborted,
             None if p.records is None else bytes(p.records)) for p in walked] == want
    assert len(walked) == 10


def test_records_longer_than_2_mib():
    """A length of four varint bytes: read through the Reader, as the same answer's short ones."""
    resp = R(throttle_time_ms=0, error_code=0, session_id=5, responses=[R.FetchableTopicResponse(
        topic="t", partitions=[partition(0, records=b"\x02" * ((2 << 20) + 5)), partition(1)])])
    data = b"".join(bytes(p) for p in api.encode_response(R.API_KEY, FETCH_WALK_VERSION, 3, resp))[4:]
    walked = list(FetchAnswer(data).partitions())
    assert [(p.partition, len(p.records), bytes(p.records[:1])) for p in walked] == [(0, (2 << 20) + 5, b"\x02"),
                                                                                      (1, 50, b"\x01")]


def test_a_cut_frame_is_a_decode_error():
    data = answer_frame()
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            list(FetchAnswer(data[:cut]).partitions())
