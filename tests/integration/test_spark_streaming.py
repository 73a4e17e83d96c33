"""Structured Streaming through the `kafkafast` data source: micro-batches limited by
maxOffsetsPerTrigger, stop and restart from the checkpoint with exactly-once output,
partitions added while stopped, a streaming write, and streams read through a share group
(shareGroup): each record once, accepted at the commit, released when a batch fails."""
from __future__ import annotations

import time

import pytest

from kafkafast.client.share_consumer import ShareConsumer
from tests.integration.spark_fixtures import spark  # noqa: F401 - module-scoped SparkSession fixture
from tests.integration.spark_topics import (
    add_partitions,
    check_query,
    consume_all,
    create_topic,
    fill,
    share_group_from_earliest,
)
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(300)


def stream(spark, bootstrap, topic, **options):  # noqa: F811
    r = (spark.readStream.format("kafkafast").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def wait_for_rows(query, rows: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(batch_sizes(query)) < rows:
        assert query.isActive, query.exception()
        assert time.monotonic() < deadline, f"only {sum(batch_sizes(query))} rows after {timeout}s"
        time.sleep(0.2)


def test_stream_limits_batches_and_resumes_from_its_checkpoint_exactly_once(spark, module_broker, tmp_path):  # noqa: F811
    bootstrap, topic = module_broker.bootstrap, "stream4"
    create_topic(bootstrap, topic, 4)
    fill(bootstrap, topic, 4, 0, 4_000)  # 1,000 per partition
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(**trigger):
        df = stream(spark, bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=1_000)
        return (df.selectExpr("partition", "offset", "cast(value AS string) AS v").writeStream.format("parquet")
                .option("path", out).option("checkpointLocation", checkpoint).trigger(**trigger).start())

    first = start(processingTime="0 seconds")
    try:
        wait_for_rows(first, 2_000)
    finally:
        first.stop()
    sizes = batch_sizes(first)
    # equal backlogs: the limit is split 250 / 250 / 250 / 250
    assert len(sizes) >= 2 and all(s == 1_000 for s in sizes), sizes

    # while stopped: 2,000 more records, and two new partitions with 100 records each
    fill(bootstrap, topic, 4, 4_000, 2_000)
    add_partitions(bootstrap, topic, 6)
    fill(bootstrap, topic, 6, 6_000, 600, only_partitions={4, 5})
    total = 6_000 + 200

    second = start(availableNow=True)
    assert second.awaitTermination(180)
    assert second.exception() is None
    more = batch_sizes(second)
    assert all(s <= 1_000 for s in more), more
    assert sum(sizes) + sum(more) >= total  # a batch cut short by stop() runs again

    rows = spark.read.parquet(out).collect()
    assert len(rows) == total
    assert len({(r.partition, r.offset) for r in rows}) == total
    expected = {f"v{i}" for i in range(6_000)} | {f"v{i}" for i in range(6_000, 6_600) if i % 6 in (4, 5)}
    assert {r.v for r in rows} == expected


def test_stream_min_partitions_splits_each_micro_batch_of_one_kafka_partition(spark, module_broker, tmp_path):  # noqa: F811
    """minPartitions in streaming: each micro-batch of a 1-partition topic (maxOffsetsPerTrigger
    4,000) is read by four tasks of 1,000 contiguous offsets; every record lands once."""
    bootstrap, topic = module_broker.bootstrap, "stream-single"
    create_topic(bootstrap, topic, 1)
    fill(bootstrap, topic, 1, 0, 8_000)
    q = (stream(spark, bootstrap, topic, startingOffsets="earliest", minPartitions=4, maxOffsetsPerTrigger=4_000)
         .selectExpr("offset", "cast(value AS string) AS v", "spark_partition_id() AS task")
         .writeStream.format("memory").queryName("single_split")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    assert q.exception() is None
    assert batch_sizes(q) == [4_000, 4_000]
    rows = spark.sql("SELECT offset, v, task FROM single_split").collect()
    assert sorted(r.offset for r in rows) == list(range(8_000))
    assert all(r.v == f"v{r.offset}" for r in rows)
    # offsets [1000k, 1000k + 1000) of each batch are one task's range
    assert {(r.offset // 1_000, r.task) for r in rows} == {(k, k % 4) for k in range(8)}


def test_stream_starts_at_latest_by_default(spark, module_broker, tmp_path):  # noqa: F811
    bootstrap, topic = module_broker.bootstrap, "stream-latest"
    create_topic(bootstrap, topic, 2)
    fill(bootstrap, topic, 2, 0, 100)
    q = (stream(spark, bootstrap, topic).selectExpr("cast(value AS string) AS v").writeStream.format("memory")
         .queryName("latest_only").option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        deadline = time.monotonic() + 60
        while not q.recentProgress and time.monotonic() < deadline:  # the first (empty) batch fixes the start
            time.sleep(0.2)
        fill(bootstrap, topic, 2, 100, 50)
        wait_for_rows(q, 50)
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(r.v for r in spark.sql("SELECT v FROM latest_only").collect()) == sorted(
        f"v{i}" for i in range(100, 150))


def test_stream_write_copies_a_topic(spark, module_broker, tmp_path):  # noqa: F811
    bootstrap, source, sink = module_broker.bootstrap, "copy-from", "copy-to"
    create_topic(bootstrap, source, 3)
    create_topic(bootstrap, sink, 3)
    fill(bootstrap, source, 3, 0, 3_000)
    q = (stream(spark, bootstrap, source, startingOffsets="earliest", includeHeaders="true")
         .selectExpr("key", "value", "partition", "headers").writeStream.format("kafkafast")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    assert q.exception() is None
    got = consume_all(bootstrap, sink, 3)
    assert len(got) == 3_000
    for partition, _, key, value, headers in got:
        i = int(key[1:])
        assert value == b"v%d" % i and partition == i % 3 and headers == [("seq", b"%d" % i)]


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):
    """A broker whose share groups lock acquired records for 5 minutes: a micro-batch must end
    within the lock (spark/README.md), and on a loaded machine one can outlast Kafka's 30 s."""
    b = BrokerProcess(tmp_path_factory.mktemp("share-broker") / "data", settings={
        "group.share.record.lock.duration.ms": "300000", "group.share.max.record.lock.duration.ms": "300000"}).start()
    yield b
    b.kill()


def share_stream(spark, bootstrap, topic, group, **options):  # noqa: F811
    return stream(spark, bootstrap, topic, shareGroup=group, **options).selectExpr(
        "*", "spark_partition_id() AS task")


def test_share_group_stream_reads_each_record_once_over_more_tasks_than_partitions(spark, share_broker, tmp_path):  # noqa: F811
    """shareGroup: 400 records of a 2-partition topic read by 4 tasks per micro-batch, each
    record once; the records are accepted when the batch commits, so a second query of the
    same group gets only the 10 records produced after the first one stopped."""
    bootstrap, topic, group = share_broker.bootstrap, "share2", "spark-share"
    create_topic(bootstrap, topic, 2)
    share_group_from_earliest(bootstrap, group)
    fill(bootstrap, topic, 2, 0, 400)

    def run(name, step):
        q = (share_stream(spark, bootstrap, topic, group, minPartitions=4).writeStream.format("memory")
             .queryName(name).option("checkpointLocation", str(tmp_path / step)).trigger(availableNow=True).start())
        assert q.awaitTermination(60)
        assert q.exception() is None
        return spark.sql(f"SELECT * FROM {name}")

    first = run("share_first", "ck1")
    first.createOrReplaceTempView("share_first_view")
    row = spark.sql(check_query("share_first_view", topic, 2)).collect()[0]
    assert (row.n, row.distinct_positions, row.correct) == (400, 400, 400)
    assert {r.task for r in first.select("task").distinct().collect()} == {0, 1, 2, 3}

    fill(bootstrap, topic, 2, 400, 10)
    second = run("share_second", "ck2")
    assert sorted(r.v for r in second.selectExpr("cast(value AS string) AS v").collect()) == sorted(
        f"v{i}" for i in range(400, 410))


def test_share_group_stream_failed_batch_releases_its_records(spark, share_broker, tmp_path):  # noqa: F811
    """A micro-batch whose sink fails stops the query without accepting its records: the group
    delivers every one of them again, with delivery count 2."""
    bootstrap, topic, group = share_broker.bootstrap, "share-fail", "spark-share-fail"
    create_topic(bootstrap, topic, 2)
    share_group_from_earliest(bootstrap, group)
    fill(bootstrap, topic, 2, 0, 200)

    def fail(df, batch_id):
        assert df.count() > 0
        raise RuntimeError("sink down")

    q = (share_stream(spark, bootstrap, topic, group).writeStream.foreachBatch(fail)
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    with pytest.raises(Exception, match="sink down"):
        q.awaitTermination(60)

    counts: dict[bytes, int] = {}
    with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group) as c:
        deadline = time.monotonic() + 45
        while len(counts) < 200 and time.monotonic() < deadline:
            for r in c.poll(timeout_ms=500):
                counts[r.value] = r.delivery_count
    assert set(counts) == {b"v%d" % i for i in range(200)}
    assert set(counts.values()) == {2}
