"""The matrix with kafka-python: see common.py. With "api_version" in the spec the client is
pinned to it ((0, 9): Produce v1 / Fetch v1, magic 0; (0, 10, 1): Produce v2 / Fetch v3, magic 1)."""
from __future__ import annotations

import time

from common import PARTITIONS, by_time_target, deadline, record, result, spec, version
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def main() -> None:
    s = spec()
    b, n, t0 = s["bootstrap"], s["n"], s["t0"]
    pinned = {"api_version": tuple(s["api_version"])} if s.get("api_version") else {}
    produced: dict = {}
    for codec, topic in s["topics"].items():
        p = KafkaProducer(bootstrap_servers=b, compression_type=None if codec == "none" else codec, linger_ms=20,
                          batch_size=4096, **pinned)
        futures = []
        for i in range(n):
            key, value, ts, part = record(codec, i, t0)
            futures.append(p.send(topic, key=key, value=value, partition=part, timestamp_ms=ts))
        p.flush(60)
        produced[codec] = [(md.partition, md.offset) for md in (f.get(30) for f in futures)]
        p.close()
    topics = list(s["topics"].values())
    c = KafkaConsumer(*topics, bootstrap_servers=b, group_id=s["group"], auto_offset_reset="earliest",
                      enable_auto_commit=False, **pinned)
    consumed: list = []
    end = deadline()
    while len(consumed) < n * len(topics) and time.monotonic() < end:
        for msgs in c.poll(1000).values():
            consumed += [[m.topic, m.partition, m.offset, m.key, m.value] for m in msgs]
    c.commit()
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    committed: dict = {}
    for tp in tps:
        committed.setdefault(tp.topic, {})[tp.partition] = c.committed(tp)
    earliest: dict = {}
    latest: dict = {}
    for tp, off in c.beginning_offsets(tps).items():
        earliest.setdefault(tp.topic, {})[tp.partition] = off
    for tp, off in c.end_offsets(tps).items():
        latest.setdefault(tp.topic, {})[tp.partition] = off
    target = by_time = None
    if not pinned or pinned["api_version"] >= (0, 10, 1):  # ListOffsets v0 has no timestamps
        target, by_time = by_time_target(s), {}
        for tp, ot in c.offsets_for_times({tp: target for tp in tps}).items():
            by_time.setdefault(tp.topic, {})[tp.partition] = None if ot is None else ot.offset
    c.close()
    result("kafka-python", version("kafka-python"), produced=produced, consumed=consumed, committed=committed,
           earliest=earliest, latest=latest, by_time=by_time, target=target)


if __name__ == "__main__":
    main()
