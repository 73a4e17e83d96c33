"""Spark read throughput of the `kafkafast` data source, and where its time goes.

    python perf/spark_bench.py            # 2,000,000 records of 100 bytes per topic
    python perf/spark_bench.py --tiny     # CI smoke: 20,000 records, 1 and 2 partitions, no cluster
    python perf/spark_bench.py --partitions 1 --no-cluster --repeats 1 --out /tmp/sb
                                          # quick iteration on the 1-partition rows (2,000,000 records)

Three parts, side by side in one run:

1. Decode alone (no Spark, no sockets, one thread): the record sets a fetch of the
   1-partition topic returned, turned into Arrow batches in the source schema, by
   - `arrow`: the compiled arrow_decode twin (`kafkafast.client.arrow`, the path in use), and
   - `per-record`: the previous path kept here as the baseline: ConsumerRecord objects
     (`decode_fetched`), one Python list per column, then Arrow.
2. One partition, split by stage: fetch only (raw record sets), fetch + Arrow decode
   (`lowlevel.read_arrow`), + conversion to the source schema (the task body without
   Spark), the batches written as the Python worker hands them to the JVM (an Arrow IPC
   stream into a buffered socket file, the other end drained by a thread), and the full
   Spark query. Read through Spark in turn (A B C D ...), after warm-up rounds of the same
   (a fresh JVM's first reads are several times slower on a busy machine):
   - the default read, one task (the row issue 18's target is about),
   - the same with `minPartitions=2` (two tasks, each reading half of the partition),
   - the previous per-record task body (baseline),
   - an in-memory Python source of the same schema and row count that yields a prepared
     batch over and over (no broker, fetch or decode): Spark's own cost per query and row.
   Plus the same query over an empty partition, for kafkafast and the in-memory source:
   the fixed cost of a query.
3. Spark reads of topics with 1, 2, 4 and 8 partitions (one task each) on `local[2]` and
   on a standalone cluster (master + 2 workers of 1 core, `tests/integration/
   spark_cluster.py`), query `SELECT count(*), sum(length(value))`.

Results go to `<out>.json`, `<out>.md` and `<out>.png` (default perf/results/spark_bench,
or perf/results/spark_bench_tiny with --tiny).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPARK_DIR = REPO / "spark"
sys.path[:0] = [str(REPO), str(SPARK_DIR)]


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "compression.type": "none", "queue.buffering.max.messages": 500_000})
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


# ------------------------------------------------------------------ the baseline path
def per_record_batch(topic: str, partition: int, records, schema):
    """The previous conversion (until the arrow_decode twin): one Python list per column
    over ConsumerRecords, then Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(records)
    ts_ms = pa.array([r.timestamp for r in records], pa.int64())
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([r.offset for r in records], pa.int64()),
        pc.multiply(ts_ms, 1000).cast(schema.field("timestamp").type),
        pa.array([r.timestamp_type for r in records], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def per_record_source():
    """The `kafkafast_per_record` format: the kafkafast source with its task body replaced
    by the previous per-record path, so Spark reads both ways in one run."""
    from kafkafast.client import lowlevel
    from pyspark_kafkafast.data_source import KafkaFastDataSource
    from pyspark_kafkafast.options import DEFAULT_MAX_RECORDS_PER_BATCH, parse_source_options
    from pyspark_kafkafast.readers import KafkaFastBatchReader, OffsetRangePartition

    class PerRecordReader(KafkaFastBatchReader):
        def read(self, partition):
            if isinstance(partition, OffsetRangePartition):
                r = partition.offset_range
                for records in lowlevel.fetch_range_sync(self.opts.bootstrap, r.topic, r.partition, r.start, r.until,
                                                         max_bytes=self.opts.fetch_max_bytes):
                    for i in range(0, len(records), DEFAULT_MAX_RECORDS_PER_BATCH):
                        yield per_record_batch(r.topic, r.partition, records[i:i + DEFAULT_MAX_RECORDS_PER_BATCH],
                                               self.arrow_schema)

    class PerRecordSource(KafkaFastDataSource):
        @classmethod
        def name(cls) -> str:
            return "kafkafast_per_record"

        def reader(self, schema):
            self._check_schema(schema)
            return PerRecordReader(parse_source_options(self.options, streaming=False), schema)

    return PerRecordSource


def in_memory_source(records: int, value_bytes: int):
    """The `kafkafast_in_memory` format: the source schema with the same row count and sizes,
    but its task yields one prepared 10,000-row batch over and over (no broker, no fetch, no
    decode, no planning round trips). Its query time is what Spark itself costs per query and
    per row: planning and task launch, the Arrow hand-off from the Python worker, the JVM's
    conversion of every Arrow row to an UnsafeRow, and the aggregation."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pyspark_kafkafast.options import DEFAULT_MAX_RECORDS_PER_BATCH
    from pyspark_kafkafast.schema import source_schema

    class InMemoryReader(DataSourceReader):
        def __init__(self, topic: str, rows: int) -> None:
            self.topic, self.rows = topic, rows

        def partitions(self):
            return [InputPartition(0)]

        def read(self, partition):
            import pyarrow as pa

            from pyspark_kafkafast.schema import arrow_schema
            schema = arrow_schema(source_schema(False))
            n = DEFAULT_MAX_RECORDS_PER_BATCH
            batch = pa.RecordBatch.from_arrays([
                pa.array([b"%d" % i for i in range(n)], pa.binary()),
                pa.array([b"x" * value_bytes] * n, pa.binary()),
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(0, pa.int32()), n),
                pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(schema.field("timestamp").type),
                pa.array([0] * n, pa.int32()),
            ], schema=schema)
            left = self.rows
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class InMemorySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafkafast_in_memory"

        def schema(self):
            return source_schema(False)

        def reader(self, schema):
            return InMemoryReader(self.options["subscribe"], int(self.options.get("records", records)))

    return InMemorySource


# ------------------------------------------------------------------ 1. decode alone
def fetched_record_sets(bootstrap: str, topic: str, end: int, max_bytes: int = 8 * 1024 * 1024) -> tuple[list, float]:
    """The raw record sets of partition 0, [0, end), as Fetch returned them, and the time."""
    from kafkafast.client import lowlevel
    from kafkafast.client.cluster import Cluster
    from kafkafast.client.records import fetched_next_offset

    async def run() -> list:
        cluster = Cluster(bootstrap, metadata_max_age_ms=0, allow_auto_topic_creation=False)
        cluster.add_topics([topic])
        await cluster.start()
        try:
            def raw(buf, offset, aborted):
                return [buf], fetched_next_offset(buf, offset)
            return [s async for sets in lowlevel._fetch_loop(
                cluster, topic, 0, 0, end, raw, max_bytes=max_bytes, max_wait_ms=500, isolation_level=0,
                timeout_ms=60000) for s in sets]
        finally:
            await cluster.close()
    t0 = time.perf_counter()
    sets = asyncio.run(run())
    return sets, time.perf_counter() - t0


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def decode_alone(record_sets: list, topic: str, repeats: int) -> dict:
    from kafkafast import native
    from kafkafast.client import arrow
    from kafkafast.client.records import decode_fetched
    from pyspark_kafkafast.arrow_records import to_source_batch
    from pyspark_kafkafast.options import DEFAULT_MAX_RECORDS_PER_BATCH
    from pyspark_kafkafast.schema import arrow_schema, source_schema

    schema = arrow_schema(source_schema(False))
    ends = [arrow.decode_fetched_arrow(arrow.ArrowColumns(False), s, 0) for s in record_sets]
    starts = [0] + ends[:-1]
    n = ends[-1]
    columns = arrow.ArrowColumns(False)
    task_columns = arrow.ArrowColumns(False, "us")  # as the Spark task decodes: Spark's microseconds
    scratch = arrow.DecompressBuffer()

    def new_path() -> int:
        rows = 0
        for buf, start in zip(record_sets, starts):
            arrow.decode_fetched_arrow(task_columns, buf, start, scratch=scratch)
            for b in arrow.record_batches(task_columns, DEFAULT_MAX_RECORDS_PER_BATCH):
                rows += to_source_batch(topic, 0, b, schema).num_rows
        assert rows == n, (rows, n)
        return rows

    def decode_only() -> None:
        for buf, start in zip(record_sets, starts):
            arrow.decode_fetched_arrow(columns, buf, start, scratch=scratch)
            for _ in arrow.record_batches(columns, DEFAULT_MAX_RECORDS_PER_BATCH):
                pass

    def old_path() -> int:
        rows = 0
        for buf, start in zip(record_sets, starts):
            records, _ = decode_fetched(buf, topic, 0, start)
            for i in range(0, len(records), DEFAULT_MAX_RECORDS_PER_BATCH):
                rows += per_record_batch(topic, 0, records[i:i + DEFAULT_MAX_RECORDS_PER_BATCH], schema).num_rows
        assert rows == n, (rows, n)
        return rows

    new_path()
    old_path()
    t_new, t_decode, t_old = best_of(new_path, repeats), best_of(decode_only, repeats), best_of(old_path, repeats)
    return {"records": n, "twin": native.native_status()["arrow_decode"],
            "arrow_seconds": t_new, "arrow_records_per_s": n / t_new,
            "arrow_decode_only_seconds": t_decode, "arrow_decode_only_records_per_s": n / t_decode,
            "per_record_seconds": t_old, "per_record_records_per_s": n / t_old, "speedup": t_old / t_new}


# ------------------------------------------------------------------ 2. stages of one partition
def stages(bootstrap: str, topic: str, end: int, repeats: int) -> dict:
    import pyarrow as pa

    from kafkafast.client import lowlevel
    from pyspark_kafkafast.arrow_records import to_source_batch
    from pyspark_kafkafast.options import DEFAULT_MAX_RECORDS_PER_BATCH
    from pyspark_kafkafast.schema import arrow_schema, source_schema

    schema = arrow_schema(source_schema(False))

    def fetch_only() -> None:
        fetched_record_sets(bootstrap, topic, end)

    def read_arrow() -> None:
        for _ in lowlevel.read_arrow(bootstrap, topic, 0, 0, end, include_headers=False, max_bytes=8 * 1024 * 1024,
                                     max_records=DEFAULT_MAX_RECORDS_PER_BATCH):
            pass

    def task_body(keep: list | None = None) -> None:
        for b in lowlevel.read_arrow(bootstrap, topic, 0, 0, end, include_headers=False, max_bytes=8 * 1024 * 1024,
                                     max_records=DEFAULT_MAX_RECORDS_PER_BATCH, timestamp_unit="us"):
            batch = to_source_batch(topic, 0, b, schema)
            if keep is not None:
                keep.append(batch)

    batches: list = []

    def hand_off() -> None:
        """What Spark's Python worker does with the batches: an Arrow IPC stream written to
        its buffered socket file (pyspark's ArrowStreamSerializer); a thread drains the other
        end of the socket in the JVM's place."""
        a, b = socket.socketpair()

        def drain() -> None:
            buf = bytearray(1 << 20)
            while b.recv_into(buf):
                pass
        t = threading.Thread(target=drain)
        t.start()
        try:
            with a.makefile("wb", 65536) as f, pa.ipc.new_stream(f, schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
        finally:
            a.close()
            t.join()
            b.close()

    result = {"fetch_seconds": best_of(fetch_only, repeats), "read_arrow_seconds": best_of(read_arrow, repeats),
              "task_body_seconds": best_of(task_body, repeats)}
    task_body(batches)
    result.update(ipc_seconds=best_of(hand_off, repeats), records=end)
    return result


# ------------------------------------------------------------------ 3. Spark
def spark_local_session(master: str):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(SPARK_DIR), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from pyspark_kafkafast import register
    from pyspark_kafkafast.jvm import jar_path

    spark = (SparkSession.builder.master(master).appName("kafkafast-spark-bench")
             .config("spark.jars", jar_path())  # the JVM columnar reader, format kafkafast_arrow
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_read(spark, bootstrap: str, topic: str, fmt: str = "kafkafast", **options: str) -> tuple[float, int, int]:
    """(seconds, records, tasks) for one full read of the topic."""
    r = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    df = r.load()
    t0 = time.perf_counter()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    return time.perf_counter() - t0, row.n, df.rdd.getNumPartitions()


def warm_up(spark, bootstrap: str, topic: str, formats: list[str], reads: int) -> None:
    """Reads before measuring: Python workers started, page cache filled, and above all the
    JVMs' JIT compilers given time (on a busy machine the first reads of a fresh JVM run
    several times slower than later ones)."""
    for _ in range(reads):
        for fmt in formats:
            spark_read(spark, bootstrap, topic, fmt)


def summary(p: int, runs: list[tuple[float, int, int]], records: int, label: str, tasks_expected: int | None = None) -> dict:
    secs, n, tasks = min(runs)
    assert n == records, (n, records)
    assert tasks == (tasks_expected or p), (tasks, p, tasks_expected)
    print(f"{label}: {p} partition(s), {tasks} task(s): {n / secs:,.0f} records/s ({secs:.2f} s)", flush=True)
    return {"partitions": p, "tasks": tasks, "seconds": secs, "records_per_s": n / secs,
            "all_seconds": [r[0] for r in runs], "median_seconds": statistics.median(r[0] for r in runs)}


def spark_reads(spark, bootstrap: str, topics: dict[int, str], records: int, repeats: int, label: str,
                fmt: str = "kafkafast") -> list[dict]:
    results = []
    for p, topic in topics.items():
        spark_read(spark, bootstrap, topic, fmt)  # warm-up of this topic's tasks
        results.append(summary(p, [spark_read(spark, bootstrap, topic, fmt) for _ in range(repeats)], records,
                               f"{label} {fmt}"))
    return results


# The reads of the 1-partition topic compared in turn: (format, options, tasks).
ONE_PARTITION_READS = {
    "arrow": ("kafkafast", {}, 1),
    "per_record": ("kafkafast_per_record", {}, 1),
    "min_partitions_2": ("kafkafast", {"minPartitions": "2"}, 2),
    "in_memory": ("kafkafast_in_memory", {}, 1),
    "jvm_columnar": ("kafkafast_arrow", {}, 1),
}


def paired_reads(spark, bootstrap: str, topic: str, records: int, repeats: int, label: str) -> dict[str, dict]:
    """One partition read by the arrow path, the per-record path, the arrow path split in two
    tasks (minPartitions=2), the in-memory source and the JVM columnar reader in turn
    (A B C D E A B C D E ...), so all meet the same JIT state and the same neighbours' load."""
    runs: dict[str, list] = {name: [] for name in ONE_PARTITION_READS}
    for _ in range(repeats):
        for name, (fmt, options, _) in ONE_PARTITION_READS.items():
            runs[name].append(spark_read(spark, bootstrap, topic, fmt, **options))
    return {name: summary(1, runs[name], records, f"{label} {name}", tasks_expected=tasks)
            for name, (_, _, tasks) in ONE_PARTITION_READS.items()}


def cluster_reads(bootstrap: str, topics: dict[int, str], records: int, repeats: int) -> tuple[list, list]:
    from pyspark_kafkafast import register
    from tests.integration.spark_cluster import StandaloneCluster, cluster_session, package_archive, wait_executors

    root = Path(tempfile.mkdtemp(prefix="spark-bench-cluster-"))
    cluster = StandaloneCluster(root, workers=2).start()
    try:
        spark = cluster_session(cluster, package_archive(root), "kafkafast-spark-bench-cluster")
        register(spark)
        try:
            wait_executors(spark, 2)
            warm_up(spark, bootstrap, topics[min(topics)], ["kafkafast", "kafkafast_arrow"], 3)
            return (spark_reads(spark, bootstrap, topics, records, repeats, "cluster"),
                    spark_reads(spark, bootstrap, topics, records, repeats, "cluster", "kafkafast_arrow"))
        finally:
            spark.stop()
    finally:
        cluster.stop()


# ------------------------------------------------------------------ report
BASELINE_SPARK_1P = 1_294_588  # records/s, 1 partition, local[2], before this path (perf/results history)


def markdown(res: dict) -> str:
    m = res["machine"]
    d = res["decode"]
    lines = [
        "# Spark read throughput (`kafkafast` data source)",
        "",
        f"{res['records']:,} records of {res['value_bytes']} bytes per topic; best of {res['repeats']}; Spark query "
        "`count(*), sum(length(value))`, after warm-up reads (3 rounds of the five 1-partition reads below, "
        "3 reads on the cluster, then one per topic).",
        f"Machine: {m['cpus']} CPUs ({m['cpu']}), Python {m['python']}, pyspark {m['pyspark']}, pyarrow {m['pyarrow']}; "
        f"load average {m['loadavg_start']} at the start, {m['loadavg_end']} at the end.",
    ]
    if res.get("shared_machine_note"):
        lines += ["", res["shared_machine_note"]]
    lines += [
        "",
        "## Decode alone (one thread, no Spark, no sockets)",
        "",
        f"The {d['records']:,} records of the 1-partition topic as Fetch returned them, into Arrow batches of the",
        "source schema (10,000 rows each).",
        "",
        "| path | seconds | records/s |",
        "|---|---:|---:|",
        f"| per-record (ConsumerRecords, lists, then Arrow: the previous path) | {d['per_record_seconds']:.3f} | "
        f"{d['per_record_records_per_s']:,.0f} |",
        f"| arrow_decode ({d['twin']}) + source schema | {d['arrow_seconds']:.3f} | {d['arrow_records_per_s']:,.0f} |",
        f"| arrow_decode ({d['twin']}) alone | {d['arrow_decode_only_seconds']:.3f} | "
        f"{d['arrow_decode_only_records_per_s']:,.0f} |",
        "",
        f"Speed-up of the source-schema path: **{d['speedup']:.1f}x**. Targets of issue 18: at least 10,000,000 "
        f"records/s on one core ({'met' if d['arrow_records_per_s'] >= 10_000_000 else 'not met'}) and at least 5x "
        f"the per-record path ({'met' if d['speedup'] >= 5 else 'not met'}).",
    ]
    s = res["stages"]
    spark1 = next((r for r in res["spark"] if r["partitions"] == 1), None)
    lines += [
        "",
        "## One partition: where the time goes",
        "",
        "| stage | seconds (cumulative) | records/s |",
        "|---|---:|---:|",
        f"| fetch only (raw record sets from the broker) | {s['fetch_seconds']:.3f} | "
        f"{s['records'] / s['fetch_seconds']:,.0f} |",
        f"| + Arrow decode (`lowlevel.read_arrow`) | {s['read_arrow_seconds']:.3f} | "
        f"{s['records'] / s['read_arrow_seconds']:,.0f} |",
        f"| + source schema (the Spark task body without Spark) | {s['task_body_seconds']:.3f} | "
        f"{s['records'] / s['task_body_seconds']:,.0f} |",
        f"| Arrow IPC stream of those batches into a socket, as the Python worker hands them to the JVM, alone | "
        f"{s['ipc_seconds']:.3f} | |",
    ]
    old = res.get("spark_per_record_one_partition")
    split = res.get("spark_one_partition_min_partitions_2")
    mem = res.get("spark_in_memory_one_partition")
    if spark1:
        fixed = res["spark_empty_query_seconds"]
        net = s["records"] / max(spark1["seconds"] - fixed, 1e-9)
        lines += [f"| Spark query, local[2], 1 task (the default; the row issue 18's target is about) | "
                  f"{spark1['seconds']:.3f} | {spark1['records_per_s']:,.0f} |"]
        if split:
            lines += [f"| Spark query, local[2], `minPartitions=2`: 2 tasks, each reading half of the partition | "
                      f"{split['seconds']:.3f} | {split['records_per_s']:,.0f} |"]
        if old:
            lines += [f"| Spark query, local[2], previous per-record task body (baseline) | {old['seconds']:.3f} | "
                      f"{old['records_per_s']:,.0f} |"]
        if mem:
            lines += [f"| Spark query, local[2], in-memory Python source: same schema and rows, no broker, fetch "
                      f"or decode (Spark's own cost) | {mem['seconds']:.3f} | {mem['records_per_s']:,.0f} |"]
        jvm = res.get("spark_jvm_columnar_one_partition")
        if jvm:
            lines += [f"| Spark query, local[2], 1 task, JVM columnar reader (`kafkafast_arrow`: column pruning, "
                      f"Arrow column batches from the same fetch and decoder) | {jvm['seconds']:.3f} | "
                      f"{jvm['records_per_s']:,.0f} |"]
        lines += [f"| the same query over an empty partition: kafkafast | {fixed:.3f} | |"]
        if jvm:
            lines += [f"| the same query over an empty partition: kafkafast_arrow | "
                      f"{res['spark_jvm_columnar_empty_query_seconds']:.3f} | |"]
        if "spark_in_memory_empty_query_seconds" in res:
            lines += [f"| the same query over an empty partition: in-memory source | "
                      f"{res['spark_in_memory_empty_query_seconds']:.3f} | |"]
        lines += [
            "",
            f"Records/s of the default query without the fixed cost of an empty read: {net:,.0f}."
            + (f" Spark read of one partition versus the per-record path in the same run: "
               f"**{old['seconds'] / spark1['seconds']:.2f}x**" if old else "")
            + f"; versus the {BASELINE_SPARK_1P:,} records/s recorded before this path on a quiet machine: "
            f"{spark1['records_per_s'] / BASELINE_SPARK_1P:.2f}x for the Python data source (`kafkafast`, 1 task), "
            "which Spark's row path for Python data sources bounds (below)."
            + (f" Issue 18's target, a Spark read of one partition by one task at 2x that baseline, is "
               f"{'met' if jvm['records_per_s'] >= 2 * BASELINE_SPARK_1P else 'not met'} in this run by the JVM "
               f"columnar reader (`kafkafast_arrow`): **{jvm['records_per_s']:,.0f} records/s, "
               f"{jvm['records_per_s'] / BASELINE_SPARK_1P:.2f}x** that baseline, "
               f"{jvm['records_per_s'] / spark1['records_per_s']:.2f}x the Python data source in the same run."
               if jvm else "")
            + (f" With `minPartitions=2` the same partition reads at "
               f"{split['records_per_s'] / BASELINE_SPARK_1P:.2f}x that baseline; that is an option a user sets, "
               "not the default the target is about." if split else ""),
        ]
        if mem:
            fixed_mem = res.get("spark_in_memory_empty_query_seconds", 0.0)
            spark_rows = mem["seconds"] - fixed_mem
            ours_rows = spark1["seconds"] - fixed
            lines += [
                "",
                "### Where Spark's time goes",
                "",
                f"- Fixed cost per query: {fixed:.3f} s over an empty kafkafast partition, {fixed_mem:.3f} s over the "
                f"empty in-memory source. The in-memory figure is Spark's own (analysis, planning through two "
                "Python planner round trips, one task per stage for the scan and the final aggregate); the "
                f"difference ({fixed - fixed_mem:+.3f} s) is what kafkafast's planning (`partitions()`: one broker "
                "session for metadata and the earliest/latest offsets) and task start add, within run-to-run "
                "noise when it is this small or negative.",
                f"- Per-row cost of Spark alone: the in-memory query minus its empty run, {spark_rows:.3f} s for "
                f"{s['records']:,} rows ({s['records'] / max(spark_rows, 1e-9):,.0f} rows/s): the Arrow hand-off "
                "from the Python worker, the JVM's conversion of each row, aggregation. The kafkafast query minus "
                f"its empty run: {ours_rows:.3f} s. The task body without Spark takes "
                f"{s['task_body_seconds']:.3f} s, but the Python worker produces batches while the JVM consumes "
                "them, so with the two on different cores the query is bounded by the slower side, the JVM.",
                "- On the JVM side Spark 4.3 converts every column of every row: Python data sources have no "
                "projection pushdown (`PythonScanBuilder` implements only `SupportsPushDownFilters`) and no "
                "columnar scan (`PythonPartitionReaderFactory.supportColumnarReads` is false), so each Arrow row "
                "(key, value, topic, partition, offset, timestamp, timestampType) is copied into an `UnsafeRow` "
                "whatever the query reads. A JFR profile of the executor during such reads (taken once by hand, "
                "not by this script) put about 40% of the task thread in that generated projection, about 12% in "
                "Arrow's buffer bounds checks (off with the JVM property "
                "`-Darrow.enable_unsafe_memory_access=true`), about 5% in per-row task metrics, the rest in the "
                "aggregation and the Arrow stream reader.",
                "- So one task's throughput is capped by Spark's per-row conversion, not by fetch or decode; a "
                "large partition is read faster by splitting it over more tasks (`minPartitions`, as with Spark's "
                "Kafka source) when cores are free.",
            ]
            if jvm:
                fixed_jvm = res["spark_jvm_columnar_empty_query_seconds"]
                jvm_rows = jvm["seconds"] - fixed_jvm
                lines += [
                    f"- The JVM columnar reader (`kafkafast_arrow`) removes that conversion: Spark asks for the "
                    f"`value` column only and reads it from the Arrow vectors in place (`ArrowColumnVector`, "
                    f"`ColumnarToRow` in the plan). Its query minus its empty run ({fixed_jvm:.3f} s: planning through "
                    f"the JVM's Python process, no Python worker round trips) takes {jvm_rows:.3f} s for "
                    f"{s['records']:,} rows ({s['records'] / max(jvm_rows, 1e-9):,.0f} rows/s) against "
                    f"{ours_rows:.3f} s for the Python source; the task body without Spark (fetch, decode, source "
                    f"schema) takes {s['task_body_seconds']:.3f} s of it, the rest is the Arrow stream of one column "
                    "into the JVM and Spark's aggregation over its rows.",
                ]
    lines += [
        "",
        "## Spark reads by partition count",
        "",
        "| partitions | tasks | local[2] records/s | standalone cluster (2 workers x 1 core) records/s "
        "| local[2] `kafkafast_arrow` records/s | cluster `kafkafast_arrow` records/s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]

    def by_partitions(key: str) -> dict:
        return {r["partitions"]: r for r in res.get(key, [])}

    cluster, jvm_local, jvm_cluster = by_partitions("cluster"), by_partitions("spark_jvm_columnar"), \
        by_partitions("cluster_jvm_columnar")

    def cell(table: dict, p: int) -> str:
        return "" if p not in table else format(table[p]["records_per_s"], ",.0f")

    for r in res["spark"]:
        p = r["partitions"]
        lines.append(f"| {p} | {r['tasks']} | {r['records_per_s']:,.0f} | {cell(cluster, p)} | {cell(jvm_local, p)} "
                     f"| {cell(jvm_cluster, p)} |")
    lines += [
        "",
        "A topic of P partitions is read by P Spark tasks, each reading its own range from the",
        "partition leader; at most as many run at once as there are cores (2 in both set-ups). The",
        "broker, Spark's JVMs and the Python workers share the machine's 2 cores with the tasks, so a",
        "second task adds less than a task's worth and tasks beyond the core count add nothing but",
        "their start-up. On the standalone cluster each executor is its own JVM and the driver talks",
        "to it over loopback RPC: per-task scheduling and result costs are higher than in local mode.",
        "The numbers compare configurations in one run on a shared machine; they are not ceilings.",
    ]
    return "\n".join(lines) + "\n"


def chart(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    d = res["decode"]
    a.bar(["per-record\n(previous)", "arrow_decode\n+ schema", "arrow_decode\nalone"],
          [d["per_record_records_per_s"] / 1e6, d["arrow_records_per_s"] / 1e6,
           d["arrow_decode_only_records_per_s"] / 1e6], color=["#999", "#1f77b4", "#4c9be8"])
    a.set_ylabel("M records/s (one thread)")
    a.set_title(f"Decode {res['value_bytes']} B records into Arrow")
    parts = [r["partitions"] for r in res["spark"]]
    x = range(len(parts))
    b.bar([i - 0.2 for i in x], [r["records_per_s"] / 1e6 for r in res["spark"]], 0.4, label="local[2]")
    if res.get("cluster"):
        b.bar([i + 0.2 for i in x], [r["records_per_s"] / 1e6 for r in res["cluster"]], 0.4,
              label="standalone, 2 workers")
    if res.get("spark_per_record_one_partition"):
        b.axhline(res["spark_per_record_one_partition"]["records_per_s"] / 1e6, color="#999", ls="--",
                  label="1 partition, per-record path")
    if res.get("spark_one_partition_min_partitions_2"):
        b.axhline(res["spark_one_partition_min_partitions_2"]["records_per_s"] / 1e6, color="#2ca02c", ls=":",
                  label="1 partition, minPartitions=2")
    if res.get("spark_in_memory_one_partition"):
        b.axhline(res["spark_in_memory_one_partition"]["records_per_s"] / 1e6, color="#d62728", ls="-.",
                  label="in-memory source, 1 task")
    b.set_xticks(list(x), [str(p) for p in parts])
    b.set_xlabel("partitions (= tasks)")
    b.set_ylabel("M records/s")
    b.set_title("Spark read")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CI smoke run: few records, 1 and 2 partitions, no cluster")
    ap.add_argument("--bootstrap", help="use a running broker instead of starting one")
    ap.add_argument("--records", type=int)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", default=None, help="comma list (default 1,2,4,8)")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-cluster", action="store_true", help="skip the standalone-cluster reads")
    ap.add_argument("--workers", type=int, default=1, help="broker worker processes when starting one")
    ap.add_argument("--note", default="", help="a sentence for the report (e.g. about machine load)")
    ap.add_argument("--out", help="output path without suffix")
    args = ap.parse_args(argv)
    records = args.records or (20_000 if args.tiny else 2_000_000)
    partitions = [int(p) for p in (args.partitions or ("1,2" if args.tiny else "1,2,4,8")).split(",")]
    repeats = args.repeats or (1 if args.tiny else 3)
    with_cluster = not (args.tiny or args.no_cluster)
    out = Path(args.out or REPO / "perf" / "results" / ("spark_bench_tiny" if args.tiny else "spark_bench"))
    load_start = os.getloadavg()

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from perf.brokers import Kafkafast

        broker = Kafkafast(Path(tempfile.mkdtemp(prefix="spark-bench-")), workers=args.workers)
        broker.start()
        bootstrap = broker.bootstrap
    spark = None
    try:
        run = int(time.time())
        topics = {}
        for p in sorted(set(partitions) | {1}):
            topic = f"spark-bench-{run}-p{p}"
            if broker is not None:
                broker.create_topic(topic, p)
            else:
                from kafkafast.client.admin import create_topics_sync
                create_topics_sync(bootstrap, [(topic, p)])
            fill(bootstrap, topic, p, records, args.value_bytes)
            topics[p] = topic
        one = topics[1]
        empty = f"spark-bench-{run}-empty"
        if broker is not None:
            broker.create_topic(empty, 1)
        else:
            from kafkafast.client.admin import create_topics_sync
            create_topics_sync(bootstrap, [(empty, 1)])
        sets, _ = fetched_record_sets(bootstrap, one, records)
        decode = decode_alone(sets, one, max(repeats, 3))
        del sets
        print(f"decode alone: arrow {decode['arrow_records_per_s']:,.0f}/s, per-record "
              f"{decode['per_record_records_per_s']:,.0f}/s ({decode['speedup']:.1f}x)", flush=True)
        stage = stages(bootstrap, one, records, repeats)
        read_topics = {p: topics[p] for p in sorted(set(partitions) | {1})}
        spark = spark_local_session(args.master)
        spark.dataSource.register(per_record_source())
        spark.dataSource.register(in_memory_source(records, args.value_bytes))
        if not args.tiny:  # the smoke run checks that every read works, not its speed
            paired_reads(spark, bootstrap, one, records, 3, "warm-up")
        one_partition = paired_reads(spark, bootstrap, one, records, repeats, args.master)
        arrow_one, per_record = one_partition["arrow"], one_partition["per_record"]
        results = [arrow_one] + spark_reads(spark, bootstrap, {p: t for p, t in read_topics.items() if p != 1},
                                            records, repeats, args.master)
        fixed = min(spark_read(spark, bootstrap, empty)[0] for _ in range(repeats + 1))
        results_jvm = [one_partition["jvm_columnar"]] + spark_reads(
            spark, bootstrap, {p: t for p, t in read_topics.items() if p != 1}, records, repeats, args.master,
            "kafkafast_arrow")
        fixed_jvm = min(spark_read(spark, bootstrap, empty, "kafkafast_arrow")[0] for _ in range(repeats + 1))
        fixed_in_memory = min(spark_read(spark, bootstrap, empty, "kafkafast_in_memory", records="0")[0]
                              for _ in range(repeats + 1))
        spark.stop()
        spark = None
        cluster, cluster_jvm = cluster_reads(bootstrap, read_topics, records, repeats) if with_cluster else ([], [])
        import pyarrow
        import pyspark
        res = {
            "records": records, "value_bytes": args.value_bytes, "master": args.master, "repeats": repeats,
            "tiny": args.tiny,
            "machine": {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                        "python": platform.python_version(), "pyspark": pyspark.__version__,
                        "pyarrow": pyarrow.__version__, "loadavg_start": round(load_start[0], 1),
                        "loadavg_end": round(os.getloadavg()[0], 1)},
            "shared_machine_note": args.note,
            "decode": decode,
            "stages": stage,
            "spark": results,
            "spark_per_record_one_partition": per_record,
            "spark_empty_query_seconds": fixed,
            "spark_in_memory_empty_query_seconds": fixed_in_memory,
            "spark_one_partition_min_partitions_2": one_partition["min_partitions_2"],
            "spark_in_memory_one_partition": one_partition["in_memory"],
            "spark_jvm_columnar_one_partition": one_partition["jvm_columnar"],
            "spark_jvm_columnar_empty_query_seconds": fixed_jvm,
            "cluster": cluster,
            "spark_jvm_columnar": results_jvm,
            "cluster_jvm_columnar": cluster_jvm,
            "client_one_partition": {"records": records, "seconds": stage["task_body_seconds"],
                                     "records_per_s": records / stage["task_body_seconds"]},
            "scaling_vs_1_partition": {r["partitions"]: r["records_per_s"] / results[0]["records_per_s"]
                                       for r in results},
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(res))
        chart(res, out.with_suffix(".png"))
        print(markdown(res))
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
