"""Exactly-once streaming writes of the `kafkafast` sink (`exactlyOnce=true`): each task's
rows go out in a Kafka transaction that the driver commits after the micro-batch succeeded.

The crash windows of a driver are recreated from the outside, as they would be left behind:
- died after the Kafka commit but before Spark's commit log: the batch's commit file is
  removed from the checkpoint; the restarted query replays the batch and must add nothing;
- died after the tasks prepared their transactions but before the commit: a task's
  transaction of the next batch is prepared and left open by a producer of its own (same
  transactional id, same batch id); the restarted query must fence and abort it and write
  the batch once.
A read_committed consumer (confluent-kafka) then sees every input row exactly once; a
read_uncommitted one also sees the aborted rows, so the check can tell.
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tests.integration.spark_fixtures import spark  # noqa: F401 - module-scoped SparkSession fixture
from tests.integration.spark_topics import create_topic, fill

pytestmark = pytest.mark.timeout(400)


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of `topic` a consumer with `isolation` level sees, up to the end it reports."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-check-{isolation}", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[bytes] = []
        done: set[int] = set()
        deadline = time.monotonic() + 30
        while len(done) < partitions and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # partition EOF (the LSO under read_committed)
                    done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            out.append(msg.value())
        assert len(done) == partitions, f"only partitions {done} reached their end"
        return out
    finally:
        c.close()


def run_query(spark, bootstrap: str, source: str, sink: str, checkpoint: str) -> None:  # noqa: F811
    """The query until every record available now is written (Trigger.AvailableNow)."""
    df = (spark.readStream.format("kafkafast").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 400)
          .load())
    query = (df.selectExpr("key", "value", "partition").writeStream.format("kafkafast")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", sink).option("exactlyOnce", "true")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(240), "the query did not finish"
    assert query.exception() is None, query.exception()


def test_streaming_write_is_exactly_once_across_driver_crash_windows(spark, module_broker, tmp_path):  # noqa: F811
    from pyspark_kafkafast.options import parse_sink_options
    from pyspark_kafkafast.writers import last_committed_batch, produce_transaction

    bootstrap = module_broker.bootstrap
    source, sink = "eos-in", "eos-out"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 2)
    fill(bootstrap, source, 2, 0, 800)
    checkpoint = str(tmp_path / "checkpoint")

    run_query(spark, bootstrap, source, sink, checkpoint)
    expected = sorted(b"v%d" % i for i in range(800))
    assert sorted(read_values(bootstrap, sink, 2, "read_committed")) == expected
    commits = sorted((p for p in Path(checkpoint, "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last_batch = int(commits[-1].name)
    assert last_batch >= 1  # 800 rows at 400 per trigger: the last batch has one before it
    query_id = json.loads(Path(checkpoint, "metadata").read_text())["id"]

    # Window 1: the Kafka transactions of the last batch committed, Spark's commit log not written.
    commits[-1].unlink()
    Path(checkpoint, "commits", f".{last_batch}.crc").unlink(missing_ok=True)
    run_query(spark, bootstrap, source, sink, checkpoint)
    assert Path(checkpoint, "commits", str(last_batch)).exists()  # the batch was replayed ...
    assert sorted(read_values(bootstrap, sink, 2, "read_committed")) == expected  # ... and added nothing

    # Window 2: the next batch's task of partition 0 prepared its transaction, the driver died.
    opts = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": sink, "exactlyOnce": "true",
                               "kafka.transaction.timeout.ms": "120000"})
    transactional_id = f"kafkafast-spark-{query_id}-0"
    assert asyncio.run(last_committed_batch(opts, transactional_id)) == last_batch
    ghost = pa.RecordBatch.from_pydict({"value": [b"ghost-%d" % i for i in range(50)],
                                        "partition": pa.array([0] * 50, pa.int32())})
    prepared = asyncio.run(produce_transaction(opts, iter([ghost]), transactional_id, last_batch + 1))
    assert prepared.records == 50 and prepared.producer_id >= 0
    fill(bootstrap, source, 2, 800, 400)
    run_query(spark, bootstrap, source, sink, checkpoint)

    expected = sorted(b"v%d" % i for i in range(1_200))
    assert sorted(read_values(bootstrap, sink, 2, "read_committed")) == expected
    assert asyncio.run(last_committed_batch(opts, transactional_id)) == last_batch + 1
    uncommitted = read_values(bootstrap, sink, 2, "read_uncommitted")
    assert sum(v.startswith(b"ghost-") for v in uncommitted) == 50  # written, then aborted by the fencing
