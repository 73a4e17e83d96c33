"""Spark read throughput of the `kafkafast` data source: records/s for topics of 1, 2, 4
and 8 partitions (one Spark task per partition), next to the kafkafast client reading
one partition in-process with the same Arrow conversion (the per-task ceiling).

    python perf/spark_bench.py            # 2,000,000 records of 100 bytes per topic
    python perf/spark_bench.py --tiny     # CI smoke: 20,000 records, 1 and 2 partitions

Every topic holds the same records, so the partition count only changes how many Spark
tasks share the read. The query is `SELECT count(*), sum(length(value))`, which makes
every task decode and hand over every record. Spark runs `--master` (local[2] by default:
with 8 partitions only 2 tasks run at a time). Results go to `<out>.json` and `<out>.md`
(default perf/results/spark_bench, or perf/results/spark_bench_tiny with --tiny).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
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


def spark_session(master: str):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(SPARK_DIR), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from pyspark_kafkafast import register

    spark = (SparkSession.builder.master(master).appName("kafkafast-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_read(spark, bootstrap: str, topic: str) -> tuple[float, int, int]:
    """(seconds, records, tasks) for one full read of the topic."""
    df = (spark.read.format("kafkafast").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    t0 = time.perf_counter()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    return time.perf_counter() - t0, row.n, df.rdd.getNumPartitions()


def client_read(bootstrap: str, topic: str) -> tuple[float, int]:
    """The same work without Spark: one partition read with the kafkafast client into Arrow."""
    from kafkafast.client import lowlevel
    from pyspark_kafkafast.arrow_records import records_to_batch
    from pyspark_kafkafast.broker_calls import read_range
    from pyspark_kafkafast.planning import OffsetRange
    from pyspark_kafkafast.schema import arrow_schema, source_schema

    end = lowlevel.list_offsets_sync(bootstrap, [(topic, 0)], lowlevel.LATEST)[(topic, 0)][0]
    schema = arrow_schema(source_schema(False))
    n = 0
    t0 = time.perf_counter()
    for records in read_range(bootstrap, OffsetRange(topic, 0, 0, end), fail_on_data_loss=True,
                              max_bytes=8 * 1024 * 1024, timeout_ms=60000):
        n += records_to_batch(topic, 0, records, schema).num_rows
    return time.perf_counter() - t0, n


def markdown(res: dict) -> str:
    lines = [
        "# Spark read throughput (`kafkafast` data source)",
        "",
        f"{res['records']:,} records of {res['value_bytes']} bytes per topic; Spark `{res['master']}`; "
        f"best of {res['repeats']} reads after one warm-up; query `count(*), sum(length(value))`.",
        f"Machine: {res['machine']['cpus']} CPUs ({res['machine']['cpu']}), Python {res['machine']['python']}, "
        f"pyspark {res['machine']['pyspark']}, pyarrow {res['machine']['pyarrow']}.",
        "",
        "| partitions | Spark tasks | seconds | records/s | vs 1 partition |",
        "|---:|---:|---:|---:|---:|",
    ]
    base = res["spark"][0]["records_per_s"] if res["spark"] else None
    for r in res["spark"]:
        lines.append(f"| {r['partitions']} | {r['tasks']} | {r['seconds']:.2f} | {r['records_per_s']:,.0f} | "
                     f"{r['records_per_s'] / base:.2f}x |")
    c = res["client_one_partition"]
    lines += [
        "",
        f"Client alone (one partition, same Arrow conversion, no Spark): {c['records_per_s']:,.0f} records/s "
        f"({c['seconds']:.2f} s).",
        "",
        "Scaling: a topic of P partitions is read by P Spark tasks, each reading its own range from the",
        "partition leader, and at most as many tasks run at once as Spark has cores. Here the broker,",
        "Spark's JVM and its Python workers share the machine's cores with the tasks, so tasks beyond",
        "one add less than a task's worth, and tasks beyond the core count add nothing (their start-up",
        "costs show instead). The gap between one task and the client alone is Spark's own cost per",
        "query and per task (planning, handing Arrow batches from the Python worker to the JVM). The",
        "numbers compare configurations on a shared machine; they are not a ceiling.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CI smoke run: few records, 1 and 2 partitions")
    ap.add_argument("--bootstrap", help="use a running broker instead of starting one")
    ap.add_argument("--records", type=int)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", default=None, help="comma list (default 1,2,4,8)")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workers", type=int, default=1, help="broker worker processes when starting one")
    ap.add_argument("--out", help="output path without suffix")
    args = ap.parse_args(argv)
    records = args.records or (20_000 if args.tiny else 2_000_000)
    partitions = [int(p) for p in (args.partitions or ("1,2" if args.tiny else "1,2,4,8")).split(",")]
    repeats = args.repeats or (1 if args.tiny else 3)
    out = Path(args.out or REPO / "perf" / "results" / ("spark_bench_tiny" if args.tiny else "spark_bench"))

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
        for p in partitions:
            topic = f"spark-bench-{run}-p{p}"
            if broker is not None:
                broker.create_topic(topic, p)
            else:
                from kafkafast.client.admin import create_topics_sync
                create_topics_sync(bootstrap, [(topic, p)])
            fill(bootstrap, topic, p, records, args.value_bytes)
            topics[p] = topic
        spark = spark_session(args.master)
        results = []
        for p in partitions:
            spark_read(spark, bootstrap, topics[p])  # warm-up: Python workers, JIT, page cache
            runs = [spark_read(spark, bootstrap, topics[p]) for _ in range(repeats)]
            secs, n, tasks = min(runs)
            assert n == records, (n, records)
            assert tasks == p, (tasks, p)
            results.append({"partitions": p, "tasks": tasks, "seconds": secs, "records_per_s": n / secs,
                            "all_seconds": [r[0] for r in runs]})
            print(f"{p} partition(s): {n / secs:,.0f} records/s ({secs:.2f} s)", flush=True)
        client_runs = [client_read(bootstrap, topics[partitions[0]]) for _ in range(repeats)]
        c_secs, c_n = min(client_runs)
        import pyarrow
        import pyspark
        res = {
            "records": records, "value_bytes": args.value_bytes, "master": args.master, "repeats": repeats,
            "tiny": args.tiny,
            "machine": {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                        "python": platform.python_version(), "pyspark": pyspark.__version__,
                        "pyarrow": pyarrow.__version__},
            "spark": results,
            "client_one_partition": {"records": c_n, "seconds": c_secs,
                                     "records_per_s": c_n / c_secs},
            "scaling_vs_1_partition": {r["partitions"]: r["records_per_s"] / results[0]["records_per_s"]
                                       for r in results},
            "median_seconds": {r["partitions"]: statistics.median(r["all_seconds"]) for r in results},
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(res))
        print(markdown(res))
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
