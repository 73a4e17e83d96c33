"""Followers fetch in incremental fetch sessions (KIP-227): counted on the leaders' side, a
steady follower Fetch names no partition, one whose log end moved names it, and
replication stays complete (acks=all with min.insync.replicas=3). Cluster only: a single node
has no followers (consumers' fetch sessions are tests/integration/test_fetch_sessions.py's)."""
from __future__ import annotations

import confluent_kafka as ck
import pytest

from tests.cluster.test_rolling import MetricsCluster
from tests.integration.test_metrics import scrape, value

SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
REQUESTS = "kafkafast_fetch_session_incremental_requests_total"
NAMED = "kafkafast_fetch_session_incremental_partitions_total"


@pytest.fixture(scope="module", params=[0, 2], ids=["workers0", "workers2"])
def sessions_cluster(tmp_path_factory, request):
    c = MetricsCluster(tmp_path_factory.mktemp(f"fsess-w{request.param}"), workers=request.param)
    try:
        yield c.start()
    finally:
        c.close()


def follower_counts(c: MetricsCluster) -> dict[int, tuple[float, float, float]]:
    """{broker: (sessions cached, incremental follower fetches, partitions they named)}."""
    out = {}
    for b, port in c.metrics_ports.items():
        m = scrape(port)
        out[b] = (value(m, SESSIONS), value(m, REQUESTS, follower="true"), value(m, NAMED, follower="true"))
    return out


def test_followers_fetch_incrementally_and_replicate_everything(sessions_cluster):
    c = sessions_cluster
    c.create_topic("fs", 6, 3, {"min.insync.replicas": "3"})
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(600):
        p.produce("fs", b"v%d" % i, partition=i % 6)
    assert p.flush(30) == 0

    # Every broker leads partitions of "fs" followed by the two others: each follower's fetcher
    # keeps a session there (a client session would not be a follower's: no consumer runs yet).
    c.wait_for(lambda: all(s >= 2 and r > 0 for s, r, _ in follower_counts(c).values()), 30,
               "follower fetch sessions on every broker")
    before = follower_counts(c)
    c.wait_for(lambda: all(now[1] >= before[b][1] + 6 for b, now in follower_counts(c).items()), 30,
               "more incremental follower fetches")
    steady = follower_counts(c)
    assert {b: steady[b][2] - before[b][2] for b in steady} == {b: 0 for b in steady}, \
        "a steady follower fetch named partitions"

    for i in range(20):
        p.produce("fs", b"late%d" % i, partition=2)
    assert p.flush(30) == 0  # acks=all, min.insync.replicas=3: both followers have them
    leader = c.leader("fs", 2)
    # The acks=all answer can leave the leader before its counters are flushed (a parked produce is
    # answered inside the follower Fetch that moves the high watermark; counts are added after the
    # loop's pass): wait for both followers' naming fetches to be counted.
    c.wait_for(lambda: follower_counts(c)[leader][2] - steady[leader][2] >= 2, 10,
               "the followers naming the partition whose log end moved")
    assert all(len(c.partition_state("fs", i)["isr"]) == 3 for i in range(6))

    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "fs-readers",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([ck.TopicPartition("fs", i, 0) for i in range(6)])
        got: list[bytes] = []
        deadline_polls = 300
        while len(got) < 620 and deadline_polls:
            deadline_polls -= 1
            got += [m.value() for m in consumer.consume(200, 0.2) if not m.error()]
    finally:
        consumer.close()
    assert sorted(got) == sorted([b"v%d" % i for i in range(600)] + [b"late%d" % i for i in range(20)])
