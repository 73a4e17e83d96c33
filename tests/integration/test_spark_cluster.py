"""The `kafkafast` source and sink on a Spark standalone cluster (master + two workers of
1 core each, started from the pyspark package by `spark_cluster.StandaloneCluster`), with
kafkafast and pyspark_kafkafast shipped to the executors as an archive (`spark.archives`)
and the format found by Spark's own discovery of `pyspark_*` packages (no register()).

One cluster and one session for the module; the topic is filled and checked with
confluent-kafka.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.integration.spark_cluster import (
    ARCHIVE_ALIAS,
    REPO,
    StandaloneCluster,
    cluster_session,
    package_archive,
    wait_executors,
)
from tests.integration.spark_fixtures import stop_shared_spark_session
from tests.integration.spark_topics import check_query, consume_all, create_topic, fill

pytestmark = pytest.mark.timeout(400)

TOPIC = "cluster6"
PARTITIONS = 6
N = 60_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-cluster")
    c = StandaloneCluster(root, workers=2).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def spark(cluster, tmp_path_factory):
    # The driver finds pyspark_kafkafast as an installed package (its directory on the
    # driver's Python path, which is what `pip install kafkafast` gives); executors get
    # only the archive.
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
        [str(REPO / "spark"), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    sys.path[:0] = [p for p in (str(REPO / "spark"),) if p not in sys.path]
    archive = package_archive(tmp_path_factory.mktemp("archive"))
    stop_shared_spark_session()  # one SparkContext per process: the shared local one would be returned
    session = cluster_session(cluster, archive)
    wait_executors(session, 2)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def filled(module_broker):
    create_topic(module_broker.bootstrap, TOPIC, PARTITIONS)
    fill(module_broker.bootstrap, TOPIC, PARTITIONS, 0, N)
    return module_broker.bootstrap


def test_six_partitions_read_by_six_tasks_on_executors_exactly_once(spark, cluster, filled):
    df = (spark.read.format("kafkafast").option("kafka.bootstrap.servers", filled).option("subscribe", TOPIC)
          .option("includeHeaders", "true").option("maxRecordsPerBatch", "3000").load())
    assert df.rdd.getNumPartitions() == PARTITIONS
    df.createOrReplaceTempView("cluster_records")
    row = spark.sql(check_query("cluster_records", TOPIC, PARTITIONS, headers=True)).collect()[0]
    assert (row.n, row.distinct_positions, row.correct, row.lo, row.hi) == (N, N, N, 0, N // PARTITIONS - 1)

    def where_tasks_ran(it):  # nested, so cloudpickle ships it by value
        """Runs inside a task: where it ran, and which kafkafast it imported."""
        import os as _os

        import pyspark_kafkafast

        from kafkafast import native
        rows = sum(1 for _ in it)
        yield (_os.getcwd(), _os.getpid(), pyspark_kafkafast.__file__, native.native_status()["arrow_decode"], rows)

    tasks = df.select("offset").rdd.mapPartitions(where_tasks_ran).collect()
    assert len(tasks) == PARTITIONS and sum(t[4] for t in tasks) == N
    workers = [str(d) for d in cluster.worker_dirs]
    executors = set()
    for cwd, pid, package, decoder, _ in tasks:
        # an executor's work dir is <worker work dir>/<app id>/<executor id>
        assert pid != os.getpid()
        assert any(cwd.startswith(w + os.sep) for w in workers), cwd
        assert Path(cwd).name.isdigit(), cwd
        assert package.startswith(os.path.join(cwd, ARCHIVE_ALIAS)), package  # from the shipped archive
        assert decoder == "cython"
        executors.add(cwd)
    assert len(executors) == 2, executors  # both workers' executors read

    # the JVM columnar reader on the executors: its Python process found the shipped archive
    jvm = (spark.read.format("kafkafast_arrow").option("kafka.bootstrap.servers", filled).option("subscribe", TOPIC)
           .option("includeHeaders", "true").load())
    assert jvm.rdd.getNumPartitions() == PARTITIONS
    jvm.createOrReplaceTempView("cluster_records_jvm")
    row = spark.sql(check_query("cluster_records_jvm", TOPIC, PARTITIONS, headers=True)).collect()[0]
    assert (row.n, row.distinct_positions, row.correct, row.lo, row.hi) == (N, N, N, 0, N // PARTITIONS - 1)


def stream_query(spark, bootstrap, topic, out, checkpoint, **trigger):
    df = (spark.readStream.format("kafkafast").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 1_000).load())
    return (df.selectExpr("partition", "offset", "cast(value AS string) AS v").writeStream.format("parquet")
            .option("path", out).option("checkpointLocation", checkpoint).trigger(**trigger).start())


def test_stream_stopped_and_restarted_from_its_checkpoint_exactly_once(spark, module_broker, tmp_path):
    bootstrap, topic = module_broker.bootstrap, "cluster-stream"
    create_topic(bootstrap, topic, 4)
    fill(bootstrap, topic, 4, 0, 4_000)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    first = stream_query(spark, bootstrap, topic, out, checkpoint, processingTime="0 seconds")
    try:
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] for p in first.recentProgress) < 2_000:
            assert first.isActive, first.exception()
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        first.stop()
    fill(bootstrap, topic, 4, 4_000, 2_000)  # while stopped
    second = stream_query(spark, bootstrap, topic, out, checkpoint, availableNow=True)
    assert second.awaitTermination(180)
    assert second.exception() is None
    rows = spark.read.parquet(out).collect()
    assert len(rows) == 6_000
    assert len({(r.partition, r.offset) for r in rows}) == 6_000
    assert {r.v for r in rows} == {f"v{i}" for i in range(6_000)}
    assert all(r.v == f"v{r.offset * 4 + r.partition}" for r in rows)


def test_dataframe_write_through_the_cluster_lands_every_row(spark, module_broker):
    bootstrap, topic = module_broker.bootstrap, "cluster-write"
    create_topic(bootstrap, topic, 3)
    n = 20_000
    df = spark.range(n, numPartitions=4).selectExpr(
        "cast(id AS string) AS key", "concat('w', cast(id AS string)) AS value", "cast(id % 3 AS int) AS partition",
        "array(named_struct('key', 'id', 'value', cast(cast(id AS string) AS binary))) AS headers")
    # Spark's default save mode (the jar's `kafkafast` provider, over the source found by discovery)
    df.write.format("kafkafast").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    got = consume_all(bootstrap, topic, 3)
    assert len(got) == n
    assert sorted(int(k) for _, _, k, _, _ in got) == list(range(n))
    for partition, _, key, value, headers in got:
        i = int(key)
        assert value == b"w%d" % i and partition == i % 3 and headers == [("id", b"%d" % i)]
