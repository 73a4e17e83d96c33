"""A kafka-python group consumer that joins its group knowing its topics' partitions.

kafka-python 3.0 (seen with 3.0.12) can lose an assignment: a consumer that joins before it has
metadata of its topics is assigned nothing ("No partition metadata for topic"), and rejoins once
the metadata shows the partitions. When a `poll()` returns (its timeout ends) while that second
JoinGroup/SyncGroup is under way, the next `poll()` no longer sees a reason to rejoin (the new
assignment was computed from the same metadata it now has) and never applies the assignment the
broker returned: the consumer stays without partitions until something else makes it rejoin
(minutes). The broker answered every request right; the debug log shows the SyncGroup answer
with the partitions and no "Updated partition assignment" after it.

Asking for the topics' partitions before subscribing makes the first assignment the right one,
so a lost result of a later rejoin leaves the consumer with the same partitions."""
from __future__ import annotations

import time
from typing import Any

from kafka import KafkaConsumer


def group_consumer(topics: list[str], *, timeout: float = 30.0, **config: Any) -> KafkaConsumer:
    """A KafkaConsumer (`config`: its options, group_id among them) subscribed to `topics` once
    its metadata holds each topic's partitions (within `timeout` seconds)."""
    consumer = KafkaConsumer(**config)
    deadline = time.monotonic() + timeout
    try:
        for topic in topics:
            while not consumer.partitions_for_topic(topic):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kafka-python found no partitions of {topic!r} within {timeout}s")
                time.sleep(0.05)
        consumer.subscribe(topics)
    except BaseException:
        consumer.close()
        raise
    return consumer
