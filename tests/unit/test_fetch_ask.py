"""The replica fetcher's Fetch request (protocol/fetch_ask.py) is the generated encoder's bytes,
its session bookkeeping (SessionRequests.build_params) names what `build` names, and the request
headers encode_request_parts writes itself are the generated ones."""
from __future__ import annotations

import pytest

from kafkafast.broker.fetch_sessions import SessionRequests
from kafkafast.client.connection import encode_request_parts
from kafkafast.protocol import _generated as gen, api
from kafkafast.protocol._generated.fetch import FetchRequest as F
from kafkafast.protocol.fetch_ask import FETCH_ASK_VERSION, encode_fetch_ask
from kafkafast.protocol.primitives import Writer

CASES = [
    # (topics, forgotten, session id, epoch)
    ({}, {}, 0, 0),
    ({"t": [(0, 3, 1234, -1, 0, 1 << 20)]}, {}, 0, 0),
    ({"orders": [(p, 7, 10**12 + p, -1, 5 * p, 1 << 20) for p in range(6)],
      "ü" * 70: [(2, 0, 0, 4, 0, 1), (200, -1, 2**63 - 1, -1, -1, 0x7FFFFFFF)]},
     {"gone": [1, 2, 300], "x" * 200: [0]}, 123456789, 17),
    ({f"topic-{i}": [(i, i, i, -1, i, 1 << 20)] for i in range(200)}, {f"old-{i}": [i] for i in range(130)}, 5, 2**31 - 1),
]


def generated(topics, forgotten, session_id, epoch) -> F:
    return F(replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=session_id,
             session_epoch=epoch, rack_id="",
             topics=[F.FetchTopic(topic=t, partitions=[F.FetchPartition(
                 partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=le, log_start_offset=ls,
                 partition_max_bytes=mb) for p, e, o, le, ls, mb in ps]) for t, ps in topics.items()],
             forgotten_topics_data=[F.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_bytes_as_the_generated_encoder(case):
    topics, forgotten, session_id, epoch = CASES[case]
    ask = encode_fetch_ask(2, 500, 1, 10 << 20, 0, session_id, epoch, topics, forgotten)
    w = Writer()
    generated(topics, forgotten, session_id, epoch).encode(w, FETCH_ASK_VERSION)
    assert ask.body == bytes(w.buf)
    frame = b"".join(bytes(p) for p in encode_request_parts(ask, FETCH_ASK_VERSION, 9, "broker-2-fetcher"))
    _, decoded = api.decode_request(frame[4:])
    assert decoded == generated(topics, forgotten, session_id, epoch)


def test_only_its_version():
    ask = encode_fetch_ask(2, 500, 1, 1, 0, 0, 0, {}, {})
    with pytest.raises(ValueError):
        ask.encode(Writer(), 13)


def test_build_params_names_what_build_names():
    """Full first, then only moved partitions, forgotten ones, and a full one after a failure."""
    by_objects, by_params = SessionRequests(), SessionRequests()
    offsets = {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}
    steps = [{}, {("a", 1): 5}, {}, {("b", 0): 9, ("a", 0): 1}, "forget", "fail", {("a", 1): 6}]
    for step in steps:
        if step == "forget":
            offsets.pop(("a", 0))
        elif step == "fail":
            by_objects.failed()
            by_params.failed()
            continue
        else:
            offsets.update(step)
        params = {k: (k[1], 4, o, -1, 0, 1 << 20) for k, o in offsets.items()}
        wanted = {k: F.FetchPartition(partition=k[1], current_leader_epoch=4, fetch_offset=o, last_fetched_epoch=-1,
                                      log_start_offset=0, partition_max_bytes=1 << 20) for k, o in offsets.items()}
        sid, epoch, topics, forgotten = by_objects.build(wanted)
        psid, pepoch, ptopics, pforgotten = by_params.build_params(params)
        assert (sid, epoch) == (psid, pepoch)
        assert {(t.topic, p.partition, p.fetch_offset) for t in topics for p in t.partitions} == \
            {(t, p[0], p[2]) for t, ps in ptopics.items() for p in ps}
        assert {(t.topic, p) for t in forgotten for p in t.partitions} == \
            {(t, p) for t, ps in pforgotten.items() for p in ps}
        if step == "forget":
            assert pforgotten == {"a": [0]}
        if step == {("a", 1): 5}:
            assert ptopics == {"a": [params[("a", 1)]]}
        for s in (by_objects, by_params):
            s.answered(0, 77)


@pytest.mark.parametrize("client_id", ["broker-2-fetcher", "", None, "é" * 40])
@pytest.mark.parametrize("api_key,api_version", [(1, 12), (1, 4), (3, 12), (18, 0), (18, 3), (7, 0), (7, 3)])
def test_the_request_header_is_the_generated_one(client_id, api_key, api_version):
    """encode_request_parts writes v1 and v2 request headers itself (the client id's bytes made
    once): the same frame as protocol.api.encode_request for every header version."""
    request = gen.REQUESTS[api_key]()
    frame = b"".join(bytes(p) for p in encode_request_parts(request, api_version, 2**31 - 5, client_id))
    assert frame == api.encode_request(request, api_version, 2**31 - 5, client_id)
