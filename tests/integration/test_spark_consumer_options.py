"""Spark's Kafka consumer options the `kafkafast` source honours as spark-sql-kafka does, run
through the source's own driver and task code against a real broker (no Spark session):
`kafkaConsumer.pollTimeoutMs` bounds a task's wait for records of its range,
`fetchOffset.numRetries` / `fetchOffset.retryIntervalMs` retry a planning call that fails
with a retriable error; every other option is refused by name, never accepted and left
unused."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark"))

from pyspark_kafkafast.options import KafkaFastOptionError, parse_sink_options, parse_source_options  # noqa: E402
from pyspark_kafkafast.planning import OffsetRange  # noqa: E402
from pyspark_kafkafast.readers import KafkaFastBatchReader, read_offset_range  # noqa: E402
from pyspark_kafkafast.schema import arrow_schema, source_schema  # noqa: E402
from tests.integration.spark_topics import create_topic, fill  # noqa: E402
from tests.support.broker_process import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_poll_timeout_bounds_the_wait_for_records_of_the_range(module_broker):
    """A range past the end of the partition (records that never come): the task fails after
    kafkaConsumer.pollTimeoutMs, not after the 60 s default."""
    create_topic(module_broker.bootstrap, "poll-timeout", 1)
    fill(module_broker.bootstrap, "poll-timeout", 1, 0, 10)
    opts = parse_source_options({"kafka.bootstrap.servers": module_broker.bootstrap, "subscribe": "poll-timeout",
                                 "kafkaConsumer.pollTimeoutMs": "1500"}, streaming=False)
    schema = arrow_schema(source_schema(False))
    started = time.monotonic()
    with pytest.raises(Exception, match="offset 10 not reached"):
        sum(b.num_rows for b in read_offset_range(opts, schema, OffsetRange("poll-timeout", 0, 0, 20)))
    assert 1.4 < time.monotonic() - started < 15
    assert sum(b.num_rows for b in read_offset_range(opts, schema, OffsetRange("poll-timeout", 0, 0, 10))) == 10


def test_fetch_offset_retries_make_numretries_attempts_retry_interval_apart():
    gone = f"127.0.0.1:{free_port()}"
    base = {"kafka.bootstrap.servers": gone, "subscribe": "t", "kafka.request.timeout.ms": "2000"}
    for retries, interval, least in (("1", "0", 0.0), ("3", "700", 1.4)):
        opts = parse_source_options({**base, "fetchOffset.numRetries": retries,
                                     "fetchOffset.retryIntervalMs": interval}, streaming=False)
        started = time.monotonic()
        with pytest.raises(Exception, match="NETWORK_EXCEPTION"):
            KafkaFastBatchReader(opts, source_schema(False)).partitions()
        took = time.monotonic() - started
        assert least <= took < least + 10, (retries, took)
    with pytest.raises(KafkaFastOptionError, match="fetchOffset.numRetries must be"):
        parse_source_options({**base, "fetchOffset.numRetries": "three"}, streaming=False)


@pytest.mark.parametrize("option", ["kafka.group.id", "groupIdPrefix", "kafka.max.poll.records",
                                    "kafka.fetch.min.bytes", "kafka.key.serializer", "startingOffset"])
def test_options_the_source_would_not_use_are_refused_by_name(option):
    with pytest.raises(KafkaFastOptionError, match=option):
        parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", option: "x"}, streaming=False)


@pytest.mark.parametrize("option", ["kafka.group.id", "kafka.max.request.size", "kafka.retries", "topics"])
def test_options_the_sink_would_not_use_are_refused_by_name(option):
    with pytest.raises(KafkaFastOptionError, match=option):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", option: "x"})
