"""The DataFrame schema of the source and the columns the sink accepts.

The read schema is exactly that of Spark's built-in Kafka source; `headers` is present only
with `includeHeaders=true`. Arrow types are derived from the Spark types with Spark's own
converter, so batches pass the schema check of the Python data source runner unchanged.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def source_schema(include_headers: bool) -> StructType:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


# ------------------------------------------------------------------ sink columns
SINK_COLUMNS = ("topic", "key", "value", "partition", "headers")


def _is_string_or_binary(t: DataType) -> bool:
    return isinstance(t, (StringType, BinaryType))


def validate_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's KafkaWriter.validateQuery: value required; key string/binary; topic string
    unless the topic option is set; partition int; headers array<struct<key string, value binary>>."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise ValueError("Required attribute 'value' not found")
    if not _is_string_or_binary(types["value"]):
        raise ValueError(f"value attribute type must be a string or binary, got {types['value'].simpleString()}")
    if "key" in types and not _is_string_or_binary(types["key"]):
        raise ValueError(f"key attribute type must be a string or binary, got {types['key'].simpleString()}")
    if topic_option is None:
        if "topic" not in types:
            raise ValueError("topic option required when no 'topic' attribute is present. "
                             "Use the topic option for setting a topic.")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise ValueError(f"topic attribute type must be a string, got {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise ValueError(f"partition attribute type must be an int, got {types['partition'].simpleString()}")
    if "headers" in types:
        t = types["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise ValueError("headers attribute type must be array<struct<key:string,value:binary>>, "
                             f"got {t.simpleString()}")
