"""Clickstream pipeline on the `kafkafast` Spark data source, in one command:

    python spark/examples/clickstream.py --bootstrap 127.0.0.1:9092

1. generate: a Spark batch job writes `--events` click events (JSON: user, page, ts) to the
   topic `<prefix>-clicks`, spread over the last few minutes of event time;
2. count:    a Structured Streaming job reads the clicks, counts events per page per minute
   of event time and writes the counts to `<prefix>-page-counts` in append mode: a minute
   is written once the watermark (latest event time - 1 minute) has passed its end. The
   generator ends with a marker event one minute after the last click (as later traffic
   would), which closes the last minute. The job is stopped once it has caught up;
3. report:   a Spark batch job reads the counts back and prints a table.

The two topics are recreated at the start (--keep-topics to append instead). Start a broker
first with `bash run.sh broker`.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SPARK_DIR = HERE.parents[1]
REPO = HERE.parents[2]
MARKER_PAGE = "(end of generated clicks)"


def spark_session():
    # Spark's Python workers import the data source and the kafkafast client: make both
    # importable for every process the JVM starts (not needed once the repo is pip-installed).
    paths = [str(SPARK_DIR), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sys.path[:0] = [str(SPARK_DIR), str(REPO)]
    from pyspark.sql import SparkSession

    from pyspark_kafkafast import register

    spark = (SparkSession.builder.master("local[2]").appName("kafkafast-clickstream")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def recreate_topics(bootstrap: str, topics: list[tuple[str, int]], keep: bool) -> None:
    from kafkafast.client.admin import create_topics_sync, delete_topics_sync

    if not keep:
        delete_topics_sync(bootstrap, [name for name, _ in topics], missing_ok=True)
    create_topics_sync(bootstrap, topics, exist_ok=True)


def generate_clicks(spark, bootstrap: str, topic: str, events: int, minutes: int) -> None:
    now_minute = int(time.time() // 60) * 60 * 1000
    start = now_minute - minutes * 60_000
    span = minutes * 60_000
    clicks = spark.range(events).selectExpr(
        "concat('user-', cast(pmod(hash(id), 500) AS string)) AS user",
        # a skewed page mix: home and search get most clicks
        "element_at(array('home', 'home', 'home', 'search', 'search', 'product', 'product', 'cart', 'checkout'),"
        "           cast(pmod(hash(id, 'page'), 9) + 1 AS int)) AS page",
        f"{start} + cast(id * {span} / {events} AS bigint) AS ts")
    marker = spark.sql(f"SELECT '-' AS user, '{MARKER_PAGE}' AS page, {start + span + 60_000} AS ts")
    clicks = clicks.unionByName(marker)
    (clicks.selectExpr("user AS key", "to_json(struct(user, page, ts)) AS value")
     .write.format("kafkafast").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("kafka.compression.type", "lz4").mode("append").save())


def count_per_page_per_minute(spark, bootstrap: str, clicks_topic: str, counts_topic: str, checkpoint: str) -> int:
    from pyspark.sql import functions as F

    clicks = (spark.readStream.format("kafkafast").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", clicks_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "20000").load())
    events = (clicks.select(F.from_json(F.col("value").cast("string"), "user STRING, page STRING, ts LONG").alias("e"))
              .select("e.*").withColumn("event_time", F.timestamp_millis("ts")))
    # The marker is counted like a page (a filter here would be pushed below the watermark
    # and hide the marker from it) and left out of the report.
    counts = (events.withWatermark("event_time", "1 minute")
              .groupBy(F.window("event_time", "1 minute"), "page").count())
    out = counts.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("page", F.col("window.start").alias("minute"), "count")).alias("value"))
    query = (out.writeStream.format("kafkafast").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", counts_topic).option("checkpointLocation", checkpoint)
             .outputMode("append").trigger(processingTime="1 second").start())
    try:
        query.processAllAvailable()
        # Minutes closed by the last batch's watermark are written by the following batch,
        # which has no new input: wait for it before stopping.
        caught_up = query.lastProgress["batchId"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            progress = query.lastProgress
            if progress["batchId"] > caught_up and progress["numInputRows"] == 0:
                break
            time.sleep(0.5)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(query.exception())
    return len([p for p in query.recentProgress if p["numInputRows"] > 0])


def report(spark, bootstrap: str, counts_topic: str):
    from pyspark.sql import functions as F

    counts = (spark.read.format("kafkafast").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", counts_topic).load()
              .select(F.from_json(F.col("value").cast("string"), "page STRING, minute TIMESTAMP, count LONG")
                      .alias("c"))
              .select("c.*").where(F.col("page") != MARKER_PAGE))
    return counts.groupBy("minute").pivot("page").sum("count").orderBy("minute").na.fill(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--prefix", default="clickstream")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--minutes", type=int, default=5)
    ap.add_argument("--checkpoint", default=None, help="streaming checkpoint dir (default: a fresh temp dir)")
    ap.add_argument("--keep-topics", action="store_true")
    args = ap.parse_args(argv)
    clicks_topic, counts_topic = f"{args.prefix}-clicks", f"{args.prefix}-page-counts"

    recreate_topics(args.bootstrap, [(clicks_topic, 3), (counts_topic, 1)], args.keep_topics)
    spark = spark_session()
    try:
        t0 = time.monotonic()
        generate_clicks(spark, args.bootstrap, clicks_topic, args.events, args.minutes)
        print(f"generated {args.events} clicks into {clicks_topic} in {time.monotonic() - t0:.1f}s")
        checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="clickstream-checkpoint-")
        t0 = time.monotonic()
        batches = count_per_page_per_minute(spark, args.bootstrap, clicks_topic, counts_topic, checkpoint)
        print(f"streaming count: {batches} micro-batches into {counts_topic} in {time.monotonic() - t0:.1f}s")
        table = report(spark, args.bootstrap, counts_topic)
        print("clicks per page per minute:")
        table.show(truncate=False)
        total = table.drop("minute").groupBy().sum().collect()[0]
        print(f"total clicks counted: {sum(v or 0 for v in total)}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
