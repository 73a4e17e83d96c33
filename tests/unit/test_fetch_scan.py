"""`protocol/fetch_scan.py` reads a Fetch v12-17 request frame into exactly the values the
generated decoder (`api.decode_request`) reads: every field, tagged fields included (cluster_id,
replica_state, replica_directory_id, unknown tags), forgotten topics; and it answers None where
that decoder refuses the bytes (truncated frames, invalid UTF-8, null arrays), so the general
path reports those."""
from __future__ import annotations

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol.fetch_ask import encode_fetch_ask
from kafkafast.protocol.fetch_scan import scan_fetch

F = FetchRequest
TID = bytes(range(1, 17))
TID2 = bytes(range(100, 116))
DIR = bytes(range(50, 66))


def request(version: int, *, tags: bool) -> FetchRequest:
    p0 = F.FetchPartition(partition=0, current_leader_epoch=7, fetch_offset=2**40 + 3, last_fetched_epoch=6,
                          log_start_offset=11, partition_max_bytes=1 << 20)
    p5 = F.FetchPartition(partition=5, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=0x7FFFFFFF)
    if tags:
        p5._unknown_tags = {9: b"\x01\x02"}
        if version >= 17:
            p0.replica_directory_id = DIR
    topics = [F.FetchTopic(topic="tópico", topic_id=TID, partitions=[p0, p5]),
              F.FetchTopic(topic="u", topic_id=TID2, partitions=[])]
    if tags:
        topics[1]._unknown_tags = {3: b"x"}
    req = F(replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=12345,
            session_epoch=9, topics=topics, rack_id="rack-a",
            forgotten_topics_data=[F.ForgottenTopic(topic="gone", topic_id=TID2, partitions=[1, 2, 2**31 - 1])])
    if version >= 15:
        req.replica_state = F.ReplicaState(replica_id=3, replica_epoch=2**35)
    if tags:
        req.cluster_id = "cluster-1"
        req._unknown_tags = {7: b"zz"}
    return req


def scanned_as_decoded(frame: bytes) -> None:
    header, req = api.decode_request(frame)
    version = header.request_api_version
    s = scan_fetch(frame)
    assert s is not None
    assert (s.version, s.correlation_id, s.client_id) == (version, header.correlation_id, header.client_id)
    replica_id = req.replica_state.replica_id if version >= 15 else req.replica_id
    replica_epoch = req.replica_state.replica_epoch if version >= 15 else -1
    assert (s.replica_id, s.replica_epoch, s.max_wait_ms, s.min_bytes, s.max_bytes, s.isolation_level, s.session_id,
            s.session_epoch, s.rack_id, s.cluster_id) == (
        replica_id, replica_epoch, req.max_wait_ms, req.min_bytes, req.max_bytes, req.isolation_level,
        req.session_id, req.session_epoch, req.rack_id, req.cluster_id)
    assert s.topics == [(ft.topic, bytes(ft.topic_id), [
        (fp.partition, fp.current_leader_epoch, fp.fetch_offset, fp.last_fetched_epoch, fp.log_start_offset,
         fp.partition_max_bytes, bytes(fp.replica_directory_id), fp._unknown_tags) for fp in ft.partitions])
        for ft in req.topics]
    assert s.forgotten == [(ft.topic, bytes(ft.topic_id), list(ft.partitions)) for ft in req.forgotten_topics_data]


@pytest.mark.parametrize("tags", [False, True])
@pytest.mark.parametrize("version", range(12, 18))
def test_scan_reads_what_the_generated_decoder_reads(version, tags):
    for client_id in ("replica-2", None, ""):
        frame = api.encode_request(request(version, tags=tags), version, 77, client_id)[4:]
        scanned_as_decoded(frame)


def test_scan_reads_the_followers_packed_request():
    ask = encode_fetch_ask(2, 500, 1, 10 << 20, 0, 99, 4, {"t": [(0, 3, 100, 3, 0, 1 << 20), (1, 3, 7, 2, 0, 1 << 20)]},
                           {"old": [4]}, "r")
    scanned_as_decoded(api.encode_request(ask, 12, 5, "kafkafast-replica-fetcher")[4:])


@pytest.mark.parametrize("version", [12, 13, 15, 17])
def test_scan_refuses_what_the_decoder_refuses(version):
    frame = api.encode_request(request(version, tags=True), version, 77, "c")[4:]
    for cut in range(len(frame)):
        short = frame[:cut]
        try:
            api.decode_request(short)
        except Exception:
            assert scan_fetch(short) is None, cut
        else:
            scanned_as_decoded(short)
    if version == 12:  # invalid UTF-8 in a topic name (v12 only names topics)
        bad = bytearray(frame)
        bad[bad.index("tópico".encode()) + 1] = 0xFF
        with pytest.raises(Exception):
            api.decode_request(bytes(bad))
        assert scan_fetch(bytes(bad)) is None


def test_scan_answers_none_for_other_apis_and_versions():
    frame = api.encode_request(request(12, tags=False), 11, 1, "c")[4:]
    assert scan_fetch(frame) is None
    assert scan_fetch(b"\x00\x00\x00\x0c\x00\x00\x00\x01\x00\x00\x00") is None


def test_followers_incremental_stops_at_a_full_or_a_consumers_request():
    for version in (12, 14, 15, 17):
        req = request(version, tags=True)
        assert scan_fetch(api.encode_request(req, version, 1, "c")[4:], followers_incremental=True) is not None
        req.session_epoch = 0
        assert scan_fetch(api.encode_request(req, version, 1, "c")[4:], followers_incremental=True) is None
        req.session_epoch, req.session_id = 3, 0
        assert scan_fetch(api.encode_request(req, version, 1, "c")[4:], followers_incremental=True) is None
    req = request(12, tags=False)
    req.replica_id = -1
    assert scan_fetch(api.encode_request(req, 12, 1, "c")[4:], followers_incremental=True) is None
    assert scan_fetch(api.encode_request(req, 12, 1, "c")[4:]) is not None


@pytest.mark.parametrize("version", [12, 13, 15, 17])
def test_scan_agrees_with_the_decoder_on_corrupted_frames(version):
    """Bytes changed at random (seeded): the scan reads what the decoder reads, or refuses what it refuses."""
    import random
    rng = random.Random(version)
    frame = api.encode_request(request(version, tags=True), version, 77, "c")[4:]
    for _ in range(1500):
        bad = bytearray(frame)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(8, len(bad))] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        try:
            api.decode_request(bytes(bad))
        except Exception:
            assert scan_fetch(bytes(bad)) is None
        else:
            scanned_as_decoded(bytes(bad))
