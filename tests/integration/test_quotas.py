"""Client quotas enforced by throttling, on a single node and a 3-broker cluster (the `kafka`
fixture: each broker enforces a quota on what it serves, as Kafka's, so a test sets it through
the leader it measures): a producer whose client-id has a 1 MB/s producer_byte_rate quota is
held to it within 10% over 12 s, while a producer without a quota running at the same time is
not; a consumer's fetch quota throttles its reads and reports throttle_time_ms; a
request_percentage quota counts handler time, not a fetch waiting for data. With --workers 3
the producer quota is broker-wide (four connections held to it together over 20 s). That a
quota set through one broker reaches the others through ZooKeeper is
tests/cluster/test_controller.py's."""
from __future__ import annotations

import threading
import time

import pytest

from kafkafast.protocol._generated.alter_client_quotas import AlterClientQuotasRequest as AQ
from kafkafast.protocol._generated.describe_client_quotas import DescribeClientQuotasRequest as DQ
from tests.support.raw_client import RawClient

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

QUOTA = 1_000_000  # bytes/s
SECONDS = 12
# Four connections' requests sent before their first throttle are a larger share of a short run
# (+7% over 12 s on a busy machine, +2% over 20 s).
SECONDS_FOUR_CONNECTIONS = 20
VALUE = b"q" * 10_000
ADMIN = "quota-admin"  # the client id that sets the quotas


def set_quota(port: int, client_id: str, key: str, value: float) -> None:
    """Set through the broker at `port`, returns once that broker describes it (a cluster's
    brokers take it from ZooKeeper a moment later). Sent as a client of its own: the broker's
    time on these (a ZooKeeper write in a cluster) counts against the sender's
    request_percentage, not the measured client's."""
    with RawClient(port, client_id=ADMIN) as c:
        resp = c.request(AQ(entries=[AQ.EntryData(entity=[AQ.EntityData(entity_type="client-id", entity_name=client_id)],
                                                  ops=[AQ.OpData(key=key, value=value)])]), 1)
    assert resp.entries[0].error_code == 0
    deadline = time.monotonic() + 15
    while True:
        with RawClient(port, client_id=ADMIN) as c:
            resp = c.request(DQ(components=[DQ.ComponentData(entity_type="client-id", match_type=0, match=client_id)],
                                strict=False), 1)
        if (key, value) in [(v.key, v.value) for e in resp.entries or [] for v in e.values]:
            return
        assert time.monotonic() < deadline, f"{key}={value} of {client_id} not described"
        time.sleep(0.1)


def run_producer(bootstrap: str, client_id: str, topic: str, stop: float, out: dict, throttles: list) -> None:
    acked = [0]

    def on_delivery(err, msg):
        if err is None:
            acked[0] += len(msg.value())

    p = ck.Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                     "batch.size": 100_000, "queue.buffering.max.kbytes": 4096, "acks": 1,
                     "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    start = time.monotonic()
    while time.monotonic() < stop:
        try:
            p.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
            continue
        p.poll(0)
    out["acked_at_stop"] = acked[0]
    out["seconds"] = time.monotonic() - start
    p.purge()  # what is still queued is not measured: a throttled client would take seconds to send it
    p.flush(30)


def test_producer_byte_rate_quota_holds_one_client_and_not_another(kafka):
    for topic in ("quota-slow", "quota-fast"):
        kafka.create_topic(topic, 1)
    set_quota(kafka.leader_port("quota-slow", 0), "slow", "producer_byte_rate", QUOTA)
    stop = time.monotonic() + SECONDS
    slow, fast, slow_throttles, fast_throttles = {}, {}, [], []
    threads = [threading.Thread(target=run_producer, args=(kafka.bootstrap, "slow", "quota-slow", stop, slow,
                                                           slow_throttles)),
               threading.Thread(target=run_producer, args=(kafka.bootstrap, "fast", "quota-fast", stop, fast,
                                                           fast_throttles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    slow_rate = slow["acked_at_stop"] / slow["seconds"]
    fast_rate = fast["acked_at_stop"] / fast["seconds"]
    assert 0.9 * QUOTA <= slow_rate <= 1.1 * QUOTA, slow_rate
    assert any(t > 0 for t in slow_throttles)  # the broker told the client, as librdkafka reports it
    assert not any(t > 0 for t in fast_throttles)
    assert fast_rate > 2 * QUOTA, fast_rate  # not held to the other client's quota


def test_consumer_byte_rate_quota_throttles_fetch_and_mutes_the_connection(kafka):
    from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
    from kafkafast.protocol._generated.fetch import FetchRequest

    kafka.create_topic("quota-read", 1)
    p = ck.Producer({"bootstrap.servers": kafka.bootstrap})
    for _ in range(100):
        p.produce("quota-read", VALUE, partition=0)
    assert p.flush(20) == 0
    leader = kafka.leader_port("quota-read", 0)
    set_quota(leader, "raw-test", "consumer_byte_rate", 200_000)  # RawClient's client id

    def fetch(c):
        return c.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 21, session_epoch=-1,
                                      topics=[FetchRequest.FetchTopic(topic="quota-read", partitions=[
                                          FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                      partition_max_bytes=1 << 21)])],
                                      forgotten_topics_data=[], rack_id=""), 12)

    with RawClient(leader) as c:
        first = fetch(c)
        assert len(first.responses[0].partitions[0].records) > 900_000
        # ~1 MB against 200 kB/s over a 1 s window: (5 - 1) * 1 s, give or take the clock
        assert 3000 <= first.throttle_time_ms <= 11_000
        started = time.monotonic()
        c.request(ApiVersionsRequest(), 0)  # read only once the throttle time has passed
        assert time.monotonic() - started >= first.throttle_time_ms / 1000.0 * 0.9


def test_request_percentage_counts_handler_time_but_not_a_fetch_waiting_for_data(kafka):
    from kafkafast.protocol._generated.fetch import FetchRequest
    from kafkafast.protocol._generated.metadata import MetadataRequest

    kafka.create_topic("quota-cpu", 1)
    leader = kafka.leader_port("quota-cpu", 0)
    # 10 ms of handler time per second, for a client id with no requests before (the window
    # holds the last 11 s, this module's other tests' raw requests too)
    set_quota(leader, "cpu-test", "request_percentage", 1.0)
    with RawClient(leader, client_id="cpu-test") as c:
        idle = c.request(FetchRequest(replica_id=-1, max_wait_ms=1500, min_bytes=1, max_bytes=1 << 20,
                                      session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="quota-cpu", partitions=[
                                          FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                      partition_max_bytes=1 << 20)])],
                                      forgotten_topics_data=[], rack_id=""), 12)
        # Parked time counted would be 150 times the quota: the cap, 11 s. The fetch's own handler time
        # is a few ms, more on a loaded machine (wall time, other connections' work included).
        assert idle.throttle_time_ms < 3000
        throttles = []  # until the first throttle: a fast machine spends well under 10 ms on 300 of them
        for _ in range(5000):
            throttles.append(c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                       12).throttle_time_ms)
            if throttles[-1] > 0:
                break
    assert max(throttles) > 0


def test_producer_byte_rate_quota_is_broker_wide_with_workers(broker_factory):
    """With --workers 3 the quota holds for the client-id across the broker: four producers
    with the same client.id (four connections, spread over the workers by SO_REUSEPORT) are
    held to 1 MB/s together, not 1 MB/s per worker, while another client is not slowed."""
    broker = broker_factory(workers=3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for fut in admin.create_topics([NewTopic("quota-slow", 3, 1), NewTopic("quota-fast", 1, 1)]).values():
        fut.result(10)
    set_quota(broker.port, "slow", "producer_byte_rate", QUOTA)
    stop = time.monotonic() + SECONDS_FOUR_CONNECTIONS
    slow = [{} for _ in range(4)]
    fast, slow_throttles, fast_throttles = {}, [], []
    threads = [threading.Thread(target=run_producer, args=(broker.bootstrap, "slow", "quota-slow", stop, out,
                                                           slow_throttles)) for out in slow]
    threads.append(threading.Thread(target=run_producer, args=(broker.bootstrap, "fast", "quota-fast", stop, fast,
                                                               fast_throttles)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    slow_rate = sum(out["acked_at_stop"] for out in slow) / max(out["seconds"] for out in slow)
    fast_rate = fast["acked_at_stop"] / fast["seconds"]
    assert 0.9 * QUOTA <= slow_rate <= 1.1 * QUOTA, slow_rate
    assert any(t > 0 for t in slow_throttles)
    assert not any(t > 0 for t in fast_throttles)
    assert fast_rate > 2 * QUOTA, fast_rate
