"""Batch reads and writes through the `kafkafast` Spark data source, Spark local[2] against a
real kafkafast broker; the topic is filled and checked with confluent-kafka."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
from pyspark.sql import functions as F

from tests.integration.spark_fixtures import spark, spark_python_path  # noqa: F401 - module-scoped SparkSession fixture
from tests.integration.spark_topics import T0, check_query, consume_all, create_topic, fill

pytestmark = pytest.mark.timeout(300)

TOPIC = "clicks6"
PARTITIONS = 6
N = 60_000
PER_PARTITION = N // PARTITIONS


@pytest.fixture(scope="module")
def filled(module_broker):
    create_topic(module_broker.bootstrap, TOPIC, PARTITIONS)
    fill(module_broker.bootstrap, TOPIC, PARTITIONS, 0, N)
    return module_broker.bootstrap


def reader(spark, bootstrap, **options):  # noqa: F811
    r = spark.read.format("kafkafast").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def keys_of(df) -> set[tuple[int, int]]:
    return {(row.partition, row.offset) for row in df.select("partition", "offset").collect()}


def expected(start: dict[int, int], until: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p in range(PARTITIONS) for o in range(start[p], until[p])}


def test_batch_read_returns_every_record_once_with_one_task_per_partition(spark, filled):  # noqa: F811
    df = reader(spark, filled)
    assert df.rdd.getNumPartitions() == PARTITIONS
    df.createOrReplaceTempView("clicks")
    row = spark.sql(check_query("clicks", TOPIC, PARTITIONS)).collect()[0]
    assert (row.n, row.distinct_positions, row.correct, row.lo, row.hi) == (N, N, N, 0, PER_PARTITION - 1)


def test_min_partitions_splits_the_read_into_more_tasks(spark, filled):  # noqa: F811
    df = reader(spark, filled, minPartitions=15)
    # 6 equal ranges, 15 wanted: round(15/6) = round(2.5) = 3 tasks per partition
    assert df.rdd.getNumPartitions() == 18
    row = df.selectExpr("count(*) AS n", "count(DISTINCT partition, offset) AS d").collect()[0]
    assert (row.n, row.d) == (N, N)


def test_min_partitions_reads_one_kafka_partition_with_four_tasks(spark, module_broker):  # noqa: F811
    """Spark's minPartitions on a 1-partition topic: four tasks, each reading one contiguous
    quarter of the offsets, every record exactly once with its own key, value and timestamp."""
    topic, n = "single1", 10_000
    create_topic(module_broker.bootstrap, topic, 1)
    fill(module_broker.bootstrap, topic, 1, 0, n)
    df = (spark.read.format("kafkafast").option("kafka.bootstrap.servers", module_broker.bootstrap)
          .option("subscribe", topic).option("minPartitions", 4).load())
    assert df.rdd.getNumPartitions() == 4
    df.createOrReplaceTempView("single1")
    row = spark.sql(check_query("single1", topic, 1)).collect()[0]
    assert (row.n, row.distinct_positions, row.correct, row.lo, row.hi) == (n, n, n, 0, n - 1)
    tasks = df.selectExpr("spark_partition_id() AS task", "offset").groupBy("task").agg(
        F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count("*").alias("n")).orderBy("task").collect()
    assert [tuple(r) for r in tasks] == [(0, 0, 2_499, 2_500), (1, 2_500, 4_999, 2_500),
                                         (2, 5_000, 7_499, 2_500), (3, 7_500, 9_999, 2_500)]


def test_planning_and_task_body_do_not_load_pandas(filled):
    """What a Spark Python worker runs for this source (plan the read, read every range) works
    without importing pandas, which costs a fresh worker a quarter of a second or more."""
    code = textwrap.dedent(f"""
        import sys
        import pyspark.worker, pyspark.sql.worker.plan_data_source_read
        from pyspark_kafkafast.data_source import KafkaFastDataSource
        source = KafkaFastDataSource({{"kafka.bootstrap.servers": "{filled}", "subscribe": "{TOPIC}"}})
        reader = source.reader(source.schema())
        batches = [b for p in reader.partitions() for b in reader.read(p)]
        topics = {{t for b in batches for t in b.column("topic").unique().to_pylist()}}
        print(sum(b.num_rows for b in batches), sorted(topics), "pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=spark_python_path()),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == f"{N} ['{TOPIC}'] False"


def test_starting_and_ending_offsets_json_select_exactly_those_offsets(spark, filled):  # noqa: F811
    starting = {"0": 100, "1": -2, "2": 9_999, "3": 5_000, "4": 0, "5": -2}
    ending = {"0": 200, "1": 50, "2": -1, "3": 5_000, "4": 1, "5": -1}
    df = reader(spark, filled, startingOffsets=json.dumps({TOPIC: starting}),
                endingOffsets=json.dumps({TOPIC: ending}))
    start = {int(p): 0 if o == -2 else o for p, o in starting.items()}
    until = {int(p): PER_PARTITION if o == -1 else o for p, o in ending.items()}
    assert keys_of(df) == expected(start, until)
    assert df.count() == 100 + 50 + 1 + 0 + 1 + PER_PARTITION


def test_assign_reads_only_the_assigned_partitions(spark, filled):  # noqa: F811
    df = (spark.read.format("kafkafast").option("kafka.bootstrap.servers", filled)
          .option("assign", json.dumps({TOPIC: [1, 4]}))
          .option("endingOffsets", json.dumps({TOPIC: {"1": 10, "4": 20}})).load())
    assert keys_of(df) == {(1, o) for o in range(10)} | {(4, o) for o in range(20)}


def first_offset_at(p: int, ts: int) -> int:
    """Partition p offset o has timestamp T0 + o*6 + p: the first offset with timestamp >= ts."""
    return max(0, math.ceil((ts - T0 - p) / PARTITIONS))


def test_starting_and_ending_timestamps_select_exactly_the_records_in_the_time_window(spark, filled):  # noqa: F811
    lo, hi = T0 + 601, T0 + 1_234
    df = reader(spark, filled, startingTimestamp=str(lo), endingTimestamp=str(hi))
    assert keys_of(df) == expected({p: first_offset_at(p, lo) for p in range(PARTITIONS)},
                                   {p: first_offset_at(p, hi) for p in range(PARTITIONS)})
    stamps = [r.ms for r in df.selectExpr("unix_millis(timestamp) AS ms").collect()]
    assert min(stamps) == lo and max(stamps) == hi - 1 and len(stamps) == hi - lo


def test_offsets_by_timestamp_json_per_partition(spark, filled):  # noqa: F811
    starting = {str(p): T0 + 100 * p for p in range(PARTITIONS)}
    ending = {str(p): T0 + 100 * p + 60 for p in range(PARTITIONS)}
    ending["5"] = T0 + 10 * N  # past the last record: up to latest
    df = reader(spark, filled, startingOffsetsByTimestamp=json.dumps({TOPIC: starting}),
                endingOffsetsByTimestamp=json.dumps({TOPIC: ending}))
    start = {p: first_offset_at(p, T0 + 100 * p) for p in range(PARTITIONS)}
    until = {p: first_offset_at(p, T0 + 100 * p + 60) for p in range(PARTITIONS)}
    until[5] = PER_PARTITION
    assert keys_of(df) == expected(start, until)


def test_starting_timestamp_past_the_data_fails_unless_strategy_is_latest(spark, filled):  # noqa: F811
    late = str(T0 + 10 * N)
    with pytest.raises(Exception, match="No offset matched"):
        reader(spark, filled, startingTimestamp=late).count()
    assert reader(spark, filled, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest").count() == 0


def test_headers_are_read_with_include_headers(spark, filled):  # noqa: F811
    df = reader(spark, filled, includeHeaders="true",
                endingOffsets=json.dumps({TOPIC: {str(p): 3 for p in range(PARTITIONS)}}))
    rows = df.selectExpr("partition", "offset", "headers").collect()
    assert len(rows) == 18
    for r in rows:
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("seq", b"%d" % (r.offset * PARTITIONS + r.partition))]


def test_batch_write_lands_with_keys_partitions_and_headers(spark, module_broker):  # noqa: F811
    out = "spark-out"
    create_topic(module_broker.bootstrap, out, 4)
    df = spark.range(10_000).selectExpr(
        "concat('wk', id) AS key",
        "cast(concat('wv', id) AS binary) AS value",
        "cast(id % 4 AS int) AS partition",
        "array(named_struct('key', 'seq', 'value', cast(cast(id AS string) AS binary)),"
        "      named_struct('key', 'src', 'value', cast('spark' AS binary))) AS headers")
    (df.repartition(3).write.format("kafkafast").option("kafka.bootstrap.servers", module_broker.bootstrap)
     .option("topic", out).mode("append").save())
    got = consume_all(module_broker.bootstrap, out, 4)
    assert len(got) == 10_000
    seen = set()
    for partition, offset, key, value, headers in got:
        i = int(key[2:])
        assert key == b"wk%d" % i and value == b"wv%d" % i and partition == i % 4
        assert headers == [("seq", b"%d" % i), ("src", b"spark")]
        seen.add(i)
    assert seen == set(range(10_000))


def test_write_without_partition_places_equal_keys_together_and_topic_column_routes(spark, module_broker):  # noqa: F811
    a, b = "spark-route-a", "spark-route-b"
    create_topic(module_broker.bootstrap, a, 3)
    create_topic(module_broker.bootstrap, b, 3)
    df = spark.range(3_000).selectExpr(
        "CASE WHEN id % 2 = 0 THEN 'spark-route-a' ELSE 'spark-route-b' END AS topic",
        "concat('key', id % 10) AS key", "concat('value', id) AS value")
    df.write.format("kafkafast").option("kafka.bootstrap.servers", module_broker.bootstrap).mode("append").save()
    for topic, parity in ((a, 0), (b, 1)):
        got = consume_all(module_broker.bootstrap, topic, 3)
        assert sorted(int(v[5:]) for _, _, _, v, _ in got) == list(range(parity, 3_000, 2))
        partitions_of_key: dict[bytes, set[int]] = {}
        for partition, _, key, _, _ in got:
            partitions_of_key.setdefault(key, set()).add(partition)
        assert all(len(ps) == 1 for ps in partitions_of_key.values())


def test_write_without_value_column_is_rejected(spark, module_broker):  # noqa: F811
    with pytest.raises(Exception, match="value"):
        (spark.range(3).selectExpr("cast(id AS string) AS key").write.format("kafkafast")
         .option("kafka.bootstrap.servers", module_broker.bootstrap).option("topic", "x").mode("append").save())


def test_deleted_offsets_fail_the_read_or_are_skipped_per_fail_on_data_loss(spark, module_broker):  # noqa: F811
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = "spark-data-loss"
    create_topic(module_broker.bootstrap, topic, 1)
    fill(module_broker.bootstrap, topic, 1, 0, 100)
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, 40)]).values():
        fut.result(30)

    def read(fail: str):
        return (spark.read.format("kafkafast").option("kafka.bootstrap.servers", module_broker.bootstrap)
                .option("subscribe", topic).option("startingOffsets", json.dumps({topic: {"0": 10}}))
                .option("failOnDataLoss", fail).load())

    with pytest.raises(Exception, match="failOnDataLoss"):
        read("true").count()
    assert sorted(r.offset for r in read("false").select("offset").collect()) == list(range(40, 100))


# Save modes of batch writes, as Spark's Kafka sink: ErrorIfExists (the default) and Append append;
# Overwrite and Ignore are refused and nothing is written. The session has the package's jar on
# spark.jars, whose `kafkafast` provider gives the Python source these modes (spark/README.md).
def _writer(spark, bootstrap, topic, n=5):  # noqa: F811
    df = spark.range(n).selectExpr("cast(id AS string) AS key", "cast(id AS string) AS value")
    return df.repartition(3).write.format("kafkafast").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)


def test_save_modes_as_spark_kafka_sink(spark, module_broker):  # noqa: F811
    topic = "spark-save-modes"
    create_topic(module_broker.bootstrap, topic, 2)
    for mode in ("overwrite", "ignore"):
        with pytest.raises(Exception, match=f"Save mode {mode.capitalize()} not allowed for kafkafast. "
                                            "Allowed save modes are Append and ErrorIfExists"):
            _writer(spark, module_broker.bootstrap, topic).mode(mode).save()
    assert consume_all(module_broker.bootstrap, topic, 2) == []
    _writer(spark, module_broker.bootstrap, topic, 3_000).save()  # no mode: ErrorIfExists, appended
    values = sorted(int(v) for _, _, _, v, _ in consume_all(module_broker.bootstrap, topic, 2))
    assert values == list(range(3_000))
    _writer(spark, module_broker.bootstrap, topic).mode("errorifexists").save()
    _writer(spark, module_broker.bootstrap, topic).mode("append").save()
    values = sorted(int(v) for _, _, _, v, _ in consume_all(module_broker.bootstrap, topic, 2))
    assert values == sorted(list(range(3_000)) + 2 * list(range(5)))


# ------------------------------------------------------------------ the JVM columnar reader
def jvm_reader(spark, bootstrap, topic=TOPIC, **options):  # noqa: F811
    r = spark.read.format("kafkafast_arrow").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_jvm_columnar_reader_reads_every_record_once_with_the_python_sources_columns(spark, filled):  # noqa: F811
    """format kafkafast_arrow: one task per partition, the same rows (headers too) as the
    Python source, column batches (a columnar scan in the plan) of only the columns read."""
    df = jvm_reader(spark, filled, includeHeaders="true")
    assert df.schema == reader(spark, filled, includeHeaders="true").schema
    assert df.rdd.getNumPartitions() == PARTITIONS
    df.createOrReplaceTempView("clicks_jvm")
    row = spark.sql(check_query("clicks_jvm", TOPIC, PARTITIONS)).collect()[0]
    assert (row.n, row.distinct_positions, row.correct, row.lo, row.hi) == (N, N, N, 0, PER_PARTITION - 1)
    rows = df.where("offset < 3").collect()
    assert sorted(tuple(r) for r in rows) == sorted(
        tuple(r) for r in reader(spark, filled, includeHeaders="true").where("offset < 3").collect())
    for r in rows:
        i = r.offset * PARTITIONS + r.partition
        assert (bytes(r.key), bytes(r.value), r.timestampType) == (b"k%d" % i, b"v%d" % i, 0)
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("seq", b"%d" % i)]
    pruned = df.selectExpr("count(*) AS n", "sum(length(value)) AS b")
    got = pruned.collect()[0]
    plan = pruned._jdf.queryExecution().executedPlan().toString()  # the final adaptive plan, once run
    assert "BatchScan kafkafast_arrow[value#" in plan and "ColumnarToRow" in plan, plan
    assert (got.n, got.b) == (N, sum(len(b"v%d" % i) for i in range(N)))
    assert jvm_reader(spark, filled, minPartitions="15").rdd.getNumPartitions() == 18
    assert jvm_reader(spark, filled, minPartitions="15").count() == N


def test_jvm_columnar_reader_null_keys_and_offset_gaps(spark, module_broker):  # noqa: F811
    """Null keys and the offsets transaction markers take: rows as the Python source reads them."""
    from confluent_kafka import Producer

    topic = "jvm-gaps"
    create_topic(module_broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "transactional.id": "jvm-gaps"})
    p.init_transactions(30)
    for t in range(2):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=b"t%d-%d" % (t, i), key=None if i % 2 else b"k%d" % i, partition=0)
        p.commit_transaction(30)
    rows = jvm_reader(spark, module_broker.bootstrap, topic, **{"kafka.isolation.level": "read_committed"}) \
        .select("offset", "key", "value").orderBy("offset").collect()
    assert [r.offset for r in rows] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]  # 5 and 11: the commit markers
    assert [None if r.key is None else bytes(r.key) for r in rows][:5] == [b"k0", None, b"k2", None, b"k4"]
    assert [bytes(r.value) for r in rows][5:] == [b"t1-%d" % i for i in range(5)]


def test_jvm_columnar_reader_failures_are_the_queries_errors(spark, filled):  # noqa: F811
    """Planning against a broker that is not there fails the query with the reason; a read that
    fails after its stream began ends the stream at a batch boundary with an error trailer, which
    the JVM side turns into the task's error (never a short read taken as complete)."""
    import io
    import socket
    import struct

    from pyspark_kafkafast.arrow_pipe import ERROR, read

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    gone = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    with pytest.raises(Exception) as info:
        jvm_reader(spark, gone, **{"kafka.request.timeout.ms": "3000"}).count()
    assert "kafkafast_arrow" in str(info.value)
    out = io.BytesIO()
    read({"kafka.bootstrap.servers": gone, "subscribe": TOPIC, "kafka.request.timeout.ms": "2000"},
         [TOPIC, 0, 0, 10], ["value"], out)
    data = out.getvalue()
    at = data.rindex(ERROR)
    (length,) = struct.unpack(">I", data[at + 4:at + 8])
    assert length == len(data) - at - 8 and length > 0
