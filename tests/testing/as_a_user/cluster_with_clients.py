"""The kafka_cluster fixture and kafkafast.testing.cluster() as a user meets them: real
clients against several brokers and Debian's ZooKeeper, brokers killed and started.

Run by tests/testing/test_plugin_as_user.py in a directory of its own (copied there as a
test_*.py file), with the plugin loaded only through its pytest11 entry point.
"""
import time

import pytest

N = 300


def read_all(bootstrap, topic, expected, timeout=60.0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    return got


def test_acks_all_producer_keeps_going_when_the_leader_is_killed(kafka_cluster):
    from confluent_kafka import Producer

    kafka_cluster.create_topic("orders", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    first_leader = kafka_cluster.leader("orders", 0)
    assert first_leader in (1, 2, 3) and sorted(kafka_cluster.isr("orders", 0)) == [1, 2, 3]
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000})
    failures = []
    sent = [f"order-{i}".encode() for i in range(N)]
    for i, value in enumerate(sent):
        producer.produce("orders", value=value, partition=0, on_delivery=lambda err, msg: err and failures.append(err))
        producer.poll(0)
        if i == N // 3:
            assert producer.flush(30) == 0  # a third is stored on all three replicas...
            kafka_cluster.kill(first_leader)  # ...then the leader dies without a clean shutdown
        time.sleep(0.002)
    assert producer.flush(60) == 0 and not failures, failures
    new_leader = kafka_cluster.wait_for_leader("orders", 0, not_on=first_leader)
    assert new_leader != first_leader and first_leader not in kafka_cluster.isr("orders", 0)
    # Every record once, in order, read from the follower that became leader.
    assert read_all(kafka_cluster.bootstrap_servers, "orders", N) == sent
    # The killed broker comes back on its port and data and catches up as a follower.
    kafka_cluster.start(first_leader)
    kafka_cluster.wait_for(lambda: sorted(kafka_cluster.isr("orders", 0)) == [1, 2, 3], 60, "the full ISR again")
    kafka_cluster.wait_for(lambda: [r.value for r in kafka_cluster.brokers[first_leader].records("orders")] == sent,
                           30, "the restarted replica holding every record")


@pytest.mark.kafka_cluster(brokers=2, settings={"num.partitions": "4"})
def test_marker_options_and_a_graceful_stop_moves_leadership_at_once(kafka_cluster):
    from kafka import KafkaAdminClient

    assert sorted(kafka_cluster.brokers) == [1, 2] and kafka_cluster.registered() == [1, 2]
    kafka_cluster.create_topic("t")  # num.partitions=4 from the marker, replication factor 2 (both brokers)
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers)
    [described] = admin.describe_topics(["t"])
    admin.close()
    assert len(described["partitions"]) == 4
    assert all(sorted(p["replica_nodes"]) == [1, 2] for p in described["partitions"]), described
    leader = kafka_cluster.leader("t", 0)
    kafka_cluster.stop(leader)  # a clean stop ends the broker's session: no session timeout to wait for
    assert kafka_cluster.wait_for_leader("t", 0, not_on=leader, timeout=5) == 3 - leader


def test_the_context_manager_outside_pytest_fixtures(tmp_path):
    from confluent_kafka import Producer

    from kafkafast.testing import cluster

    with cluster(str(tmp_path / "c"), brokers=2) as c:
        c.create_topic("events", replication_factor=2)
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        for i in range(10):
            p.produce("events", value=b"e%d" % i)
        assert p.flush(30) == 0
        # Both replicas hold the records, as the segment files of each broker show.
        for b in c.brokers.values():
            c.wait_for(lambda: len(b.records("events")) == 10, 30, "replicated records")
        zk_process = c.zookeeper.proc
        stopping = time.monotonic()
    # Every broker stops gracefully, the last one without waiting out its controlled-shutdown
    # retries (nobody is left to lead its partitions; 3 x 5 s with Kafka's default backoff).
    assert time.monotonic() - stopping < 8.0
    assert zk_process.poll() is not None  # ZooKeeper is gone with the cluster
    assert all(not b.running for b in c.brokers.values())
