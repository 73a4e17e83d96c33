"""`KafkaFastDataSource`: the `kafkafast` format for spark.read/readStream/write/writeStream."""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pyspark_kafkafast.options import KafkaFastOptionError, parse_sink_options, parse_source_options
from pyspark_kafkafast.schema import source_schema


class KafkaFastDataSource(DataSource):
    """Reads and writes Kafka topics with the schema and options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "kafkafast"

    def _include_headers(self) -> bool:
        raw = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(raw).strip().lower() == "true"

    def schema(self) -> StructType:
        return source_schema(self._include_headers())

    def _check_schema(self, schema: StructType) -> None:
        if schema != source_schema(self._include_headers()):
            raise KafkaFastOptionError("kafkafast source has a fixed schema and cannot be set with a custom one")

    def reader(self, schema: StructType) -> DataSourceReader:
        from pyspark_kafkafast.readers import KafkaFastBatchReader
        self._check_schema(schema)
        return KafkaFastBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark_kafkafast.readers import KafkaFastStreamReader
        from pyspark_kafkafast.share_group_reader import ShareGroupStreamReader
        self._check_schema(schema)
        opts = parse_source_options(self.options, streaming=True)
        if opts.share_group is not None:
            return ShareGroupStreamReader(opts, schema)
        return KafkaFastStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pyspark_kafkafast.writers import KafkaFastBatchWriter
        if overwrite:  # a topic cannot be truncated and rewritten; Spark's Kafka sink refuses it too
            raise KafkaFastOptionError("save mode Overwrite is not allowed for kafkafast: records are only ever "
                                       "appended to a topic; use mode(\"append\")")
        return KafkaFastBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark_kafkafast.writers import KafkaFastStreamWriter
        return KafkaFastStreamWriter(parse_sink_options(self.options), schema)
