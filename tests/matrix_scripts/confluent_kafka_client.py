"""The matrix with confluent-kafka (librdkafka): see common.py."""
from __future__ import annotations

import time

from common import PARTITIONS, by_time_target, deadline, record, result, spec, version
from confluent_kafka import Consumer, Producer, TopicPartition


def main() -> None:
    s = spec()
    b, n, t0 = s["bootstrap"], s["n"], s["t0"]
    produced: dict = {}
    for codec, topic in s["topics"].items():
        got: dict = {}
        p = Producer({"bootstrap.servers": b, "compression.type": codec, "linger.ms": 20,
                      "batch.num.messages": 100})
        for i in range(n):
            key, value, ts, part = record(codec, i, t0)
            p.produce(topic, value=value, key=key, partition=part, timestamp=ts,
                      on_delivery=lambda err, msg, i=i: got.__setitem__(i, err or (msg.partition(), msg.offset())))
        assert p.flush(60) == 0, "undelivered records"
        produced[codec] = [got[i] for i in range(n)]
        assert all(isinstance(x, tuple) for x in produced[codec]), [x for x in got.values() if not isinstance(x, tuple)]
    topics = list(s["topics"].values())
    c = Consumer({"bootstrap.servers": b, "group.id": s["group"], "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(topics)
    consumed: list = []
    end = deadline()
    while len(consumed) < n * len(topics) and time.monotonic() < end:
        for m in c.consume(1000, 1.0):
            assert m.error() is None, m.error()
            consumed.append([m.topic(), m.partition(), m.offset(), m.key(), m.value()])
    c.commit(asynchronous=False)
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    committed: dict = {}
    for tp in c.committed(tps, timeout=10):
        committed.setdefault(tp.topic, {})[tp.partition] = tp.offset
    earliest: dict = {}
    latest: dict = {}
    for tp in tps:
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        earliest.setdefault(tp.topic, {})[tp.partition] = lo
        latest.setdefault(tp.topic, {})[tp.partition] = hi
    target = by_time_target(s)
    by_time: dict = {}
    for tp in c.offsets_for_times([TopicPartition(t, p, target) for t in topics for p in range(PARTITIONS)], timeout=10):
        by_time.setdefault(tp.topic, {})[tp.partition] = tp.offset
    c.close()
    result("confluent-kafka", version("confluent-kafka"), produced=produced, consumed=consumed, committed=committed,
           earliest=earliest, latest=latest, by_time=by_time, target=target)


if __name__ == "__main__":
    main()
