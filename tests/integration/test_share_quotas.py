"""Client quotas on share groups: ShareFetch responses count against the consumer's
consumer_byte_rate as Fetch responses do (Kafka's fetch quota manager serves both), with
throttle_time_ms in the response and the connection muted that long; on a single process
and with 2 workers, where a ShareFetch arriving at a worker that does not own the group is
answered by the group's worker and counted where the client's connection is."""
from __future__ import annotations

import time
from contextlib import ExitStack

import pytest
from confluent_kafka import Producer

from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.share_fetch import ShareFetchRequest as F
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.integration.test_quotas import set_quota
from tests.integration.test_share_groups import QUIET, create_topic, new_group, set_group_configs, share_consumer
from tests.support.cli import kafkafast
from tests.support.raw_client import RawClient

RATE = 200_000  # bytes/s
VALUE = b"s" * 10_000
RECORDS = 120  # 1.2 MB: about 5 s at RATE (one window's worth goes at once)
MEMBERS = 8  # raw connections, so that with 2 workers some land on the worker not owning the group


@pytest.fixture(params=[0, 2], ids=["one-process", "2-workers"])
def qbroker(request, broker_factory):
    return broker_factory(workers=request.param, settings={"offsets.topic.num.partitions": "4"})


def topic_id(c: RawClient) -> bytes:
    return c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="sq")]), 12).topics[0].topic_id


def receive_all(bootstrap: str, client_id: str) -> tuple[float, list[float]]:
    """A new share group's consumer receives the whole topic, 100 kB per ShareFetch at most;
    (seconds taken, the throttle times in seconds librdkafka reported: also 0 when one ends)."""
    group = new_group()
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    throttles: list[float] = []
    c = share_consumer(bootstrap, group, "sq", **{"client.id": client_id, "fetch.max.bytes": 100_000,
                                                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    got = 0
    started = time.monotonic()
    try:
        while got < RECORDS and time.monotonic() < started + 20:
            got += sum(1 for m in c.poll(0.1) if m.error() is None)
    finally:
        c.close()
    assert got == RECORDS
    return time.monotonic() - started, throttles


def raw_throttles(port: int, bootstrap: str, tid: bytes) -> list[int]:
    """MEMBERS share consumers of one group (a raw connection each, client id raw-test) take
    three turns at a ShareFetch of two records; the largest throttle_time_ms each was given."""
    group = new_group()
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    throttles = [0] * MEMBERS
    with ExitStack() as stack:
        clients = [stack.enter_context(RawClient(port, timeout=30)) for _ in range(MEMBERS)]
        for i, c in enumerate(clients):
            hb = c.request(ShareGroupHeartbeatRequest(group_id=group, member_id=f"m{i}", member_epoch=0,
                                                      subscribed_topic_names=["sq"]), 1)
            assert hb.error_code == 0
        for epoch in range(3):
            for i, c in enumerate(clients):
                resp = c.request(F(group_id=group, member_id=f"m{i}", share_session_epoch=epoch, max_wait_ms=50,
                                   min_bytes=1, max_records=2, batch_size=2, topics=[F.FetchTopic(
                                       topic_id=tid, partitions=[F.FetchPartition(partition_index=0)])]), 1)
                assert resp.error_code == 0
                assert len(resp.responses[0].partitions[0].acquired_records) > 0
                throttles[i] = max(throttles[i], resp.throttle_time_ms)
    return throttles


def test_consumer_byte_rate_quota_throttles_share_fetch_as_it_does_fetch(qbroker):
    bs = qbroker.bootstrap
    create_topic(bs, "sq", 1)
    p = Producer({"bootstrap.servers": bs, "batch.num.messages": 1, **QUIET})  # a batch per record
    for _ in range(RECORDS):
        p.produce("sq", VALUE, partition=0)
    assert p.flush(20) == 0
    with RawClient(qbroker.port) as c:
        tid = topic_id(c)

    free, free_throttles = receive_all(bs, "share-free")
    assert free < 2.0 and free_throttles == []

    for client_id in ("share-held", "raw-test"):  # raw-test: RawClient's client id
        set_quota(qbroker.port, client_id, "consumer_byte_rate", RATE)
    held, throttles = receive_all(bs, "share-held")
    # 1.2 MB at 200 kB/s, less the first window's burst: about 5 s.
    assert held >= 3.0, (held, throttles)
    assert max(throttles, default=0) > 0  # librdkafka reports the responses' throttle_time_ms
    # Every member is throttled, those whose ShareFetch another worker answered too.
    per_member = raw_throttles(qbroker.port, bs, tid)
    assert all(t > 0 for t in per_member), per_member


def test_request_percentage_does_not_count_a_share_fetch_waiting_for_records(broker):
    """As for Fetch: the 1.5 s a ShareFetch waits for records to arrive is not handler time
    (30 times a 50 ms/s quota)."""
    bs = broker.bootstrap
    create_topic(bs, "sq", 1)
    group = new_group()
    with RawClient(broker.port) as c:
        tid = topic_id(c)
        assert c.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m", member_epoch=0,
                                                    subscribed_topic_names=["sq"]), 1).error_code == 0

        def fetch(epoch: int, wait_ms: int):
            return c.request(F(group_id=group, member_id="m", share_session_epoch=epoch, max_wait_ms=wait_ms,
                               min_bytes=1, max_records=5, batch_size=5, topics=[F.FetchTopic(
                                   topic_id=tid, partitions=[F.FetchPartition(partition_index=0)])]), 1)

        assert fetch(0, 0).error_code == 0  # opens the share session, initializes the share-partition
        # Set by the CLI (another client id): only the ShareFetch is measured against it.
        kafkafast("configs", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "raw-test",
                  "--alter", "--add-config", "request_percentage=5")
        started = time.monotonic()
        idle = fetch(1, 1500)
        assert time.monotonic() - started >= 1.4  # it did wait
        assert (idle.error_code, idle.responses, idle.throttle_time_ms) == (0, [], 0)
