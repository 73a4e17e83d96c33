"""perf/rdkafka_tools.py reads rdkafka_performance's producer summary (lines captured from
librdkafka 2.0.2's examples/rdkafka_performance) and its per-message latency file."""
from __future__ import annotations

import pytest

from perf import rdkafka_tools

OUTPUT = """% Sending 20000 messages of size 1024 bytes
% 20000 messages produced (20480000 bytes), 0 delivered (offset 0, 0 failed) in 241175ms: 0 msgs/s and 0.00 MB/s, 0 produce failures, 20000 in queue, no compression
% ERROR CALLBACK: rdkafka#producer-1: Local: Broker transport failure: 127.0.0.1:19192/bootstrap: Connect failed
% 20000 messages produced (20480000 bytes), 19000 delivered (offset -1001, 1000 failed) in 326ms: 61205 msgs/s and 62.67 MB/s, 0 produce failures, 0 in queue, no compression
"""


def test_the_last_summary_line_is_read() -> None:
    assert rdkafka_tools.parse_summary(OUTPUT) == {
        "msgs": 20000, "bytes": 20480000, "delivered": 19000, "failed": 1000, "ms": 326, "msgs_per_s": 61205,
        "produce_failures": 0, "in_queue": 0, "mb_per_s": 62.67}


def test_output_without_a_summary_is_an_error() -> None:
    with pytest.raises(ValueError, match="no producer summary"):
        rdkafka_tools.parse_summary("% Sending 10 messages of size 1024 bytes\n")


def test_latency_percentiles_are_in_ms() -> None:
    p = rdkafka_tools.percentiles(list(range(1000, 101000, 1000)))  # 1..100 ms
    assert (p["p50_ms"], p["p99_ms"], p["max_ms"], p["samples"]) == (51.0, 100.0, 100.0, 100)
