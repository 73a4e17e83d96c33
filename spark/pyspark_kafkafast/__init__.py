"""PySpark data source `kafkafast`: Spark's Kafka source and sink, as a Python data source.

    from pyspark_kafkafast import register
    register(spark)
    df = (spark.read.format("kafkafast")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

The package is named `pyspark_*` and exports `DefaultSource`, so Spark (4.0+) also finds and
registers it by itself when the driver's Python sees it as a directory on sys.path (a normal
install, or spark/ on PYTHONPATH; not a default `pip install -e`): see spark/README.md.

Modules, in the order data flows: `options` (parse), `planning` (offset ranges, pure),
`broker_calls` (the kafkafast client), `arrow_records` (client Arrow batches -> source schema), `readers`,
`share_group_reader` (streams through a share group, option shareGroup), `writers`, `data_source` (the
DataSource tying them together).
"""
from __future__ import annotations

from typing import Any

from pyspark_kafkafast.data_source import KafkaFastDataSource
from pyspark_kafkafast.jvm import jar_path  # the package's jar: format kafkafast_arrow, kafkafast's save modes

DefaultSource = KafkaFastDataSource


def register(spark: Any) -> None:
    """Registers the `kafkafast` format on a SparkSession."""
    spark.dataSource.register(KafkaFastDataSource)


__all__ = ["DefaultSource", "KafkaFastDataSource", "jar_path", "register"]
