"""The matrix with aiokafka: see common.py."""
from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from common import PARTITIONS, by_time_target, deadline, record, result, spec, version


async def main() -> None:
    s = spec()
    b, n, t0 = s["bootstrap"], s["n"], s["t0"]
    produced: dict = {}
    for codec, topic in s["topics"].items():
        p = AIOKafkaProducer(bootstrap_servers=b, compression_type=None if codec == "none" else codec, linger_ms=20,
                             max_batch_size=4096)
        await p.start()
        futures = []
        for i in range(n):
            key, value, ts, part = record(codec, i, t0)
            futures.append(await p.send(topic, key=key, value=value, partition=part, timestamp_ms=ts))
        produced[codec] = [(md.partition, md.offset) for md in await asyncio.gather(*futures)]
        await p.stop()
    topics = list(s["topics"].values())
    c = AIOKafkaConsumer(*topics, bootstrap_servers=b, group_id=s["group"], auto_offset_reset="earliest",
                         enable_auto_commit=False)
    await c.start()
    consumed: list = []
    end = deadline()
    while len(consumed) < n * len(topics) and time.monotonic() < end:
        for msgs in (await c.getmany(timeout_ms=1000)).values():
            consumed += [[m.topic, m.partition, m.offset, m.key, m.value] for m in msgs]
    await c.commit()
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    committed: dict = {}
    for tp in tps:
        committed.setdefault(tp.topic, {})[tp.partition] = await c.committed(tp)
    earliest: dict = {}
    latest: dict = {}
    for tp, off in (await c.beginning_offsets(tps)).items():
        earliest.setdefault(tp.topic, {})[tp.partition] = off
    for tp, off in (await c.end_offsets(tps)).items():
        latest.setdefault(tp.topic, {})[tp.partition] = off
    target, by_time = by_time_target(s), {}
    for tp, ot in (await c.offsets_for_times({tp: target for tp in tps})).items():
        by_time.setdefault(tp.topic, {})[tp.partition] = None if ot is None else ot.offset
    await c.stop()
    result("aiokafka", version("aiokafka"), produced=produced, consumed=consumed, committed=committed,
           earliest=earliest, latest=latest, by_time=by_time, target=target)


if __name__ == "__main__":
    asyncio.run(main())
