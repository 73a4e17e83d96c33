"""The `kafkafast` Spark data source reads a replicated topic from the three-broker cluster
after a leader change (Spark local[2])."""
from __future__ import annotations

import pytest

from tests.integration.spark_fixtures import spark  # noqa: F401 - module-scoped SparkSession fixture
from tests.integration.spark_topics import fill

pytestmark = pytest.mark.timeout(300)

TOPIC = "spark-replicated"
PARTITIONS = 3
N = 3000


def test_spark_batch_read_after_a_leader_change(cluster, spark):  # noqa: F811
    cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    fill(cluster.bootstrap, TOPIC, PARTITIONS, 0, N)
    leader = cluster.leader(TOPIC, 0)
    victim = cluster.brokers[leader]
    assert victim.stop() == 0
    try:
        cluster.wait_for(lambda: cluster.leader(TOPIC, 0) not in (-1, leader), 20, "a new leader")
        df = (spark.read.format("kafkafast").option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("subscribe", TOPIC).load())
        rows = df.select("partition", "offset").collect()
        assert sorted((r.partition, r.offset) for r in rows) == sorted(
            (p, o) for p in range(PARTITIONS) for o in range(N // PARTITIONS))
    finally:
        victim.start(timeout=60)
