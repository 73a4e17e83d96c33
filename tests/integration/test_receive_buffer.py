"""A connection's reused receive buffer (kafkafast/client/connection.py `ReceiveBuffer`, the
replica fetcher's) against a real broker: large Fetch answers land in one buffer, allocated
once, not per answer; an answer still viewed when the next arrives is left intact (the next
one gets a buffer of its own); and the in-place walk of a Fetch v12 answer
(kafkafast/protocol/fetch_walk.py) reads what the generated decoder reads, records as views
of the received bytes."""
from __future__ import annotations

import asyncio
import gc
import time

import pytest
import uvloop
from confluent_kafka import Producer

from kafkafast.client import admin
from kafkafast.client.connection import BrokerConnection, ReceiveBuffer
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol.api import decode_response
from kafkafast.protocol.fetch_walk import FETCH_WALK_VERSION, FetchAnswer

PARTITIONS = 3
PER_PARTITION = 300_000  # answers of ~900 KB: received into the large-frame buffer


def fetch(topic: str, offset: int, max_bytes: int) -> FetchRequest:
    F = FetchRequest
    return F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, forgotten_topics_data=[], rack_id="",
             topics=[F.FetchTopic(topic=topic, partitions=[
                 F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                  log_start_offset=-1, partition_max_bytes=max_bytes) for p in range(PARTITIONS)])])


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_large_answers_reuse_one_buffer_and_walk_as_the_decoder_reads(bootstrap: str, loop_factory) -> None:
    """(uvloop: the loop the brokers' fetchers run on)"""
    topic = f"rb-{time.monotonic_ns()}"
    admin.create_topics_sync(bootstrap, [(topic, PARTITIONS)])
    # batches of at most 64 KiB: a fetch of 150 KB per partition is then larger than the
    # connection's scratch buffer and smaller than the whole partition, whatever the batching
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none", "batch.size": 65536})
    for i in range(3 * PER_PARTITION // 1000):
        p.produce(topic, value=bytes([i % 256]) * 1000, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    host, port = bootstrap.split(",")[0].rsplit(":", 1)

    async def run() -> None:
        buf = ReceiveBuffer(cap=32 << 20)
        conn = await BrokerConnection(host, int(port), receive_buffer=buf).connect()
        try:
            first = await conn.send_frame(fetch(topic, 0, 2 * PER_PARTITION), version=FETCH_WALK_VERSION)
            _, decoded = decode_response(FetchRequest.API_KEY, FETCH_WALK_VERSION, first)
            assert len(first) > 3 * 200_000 and buf.allocations == 1
            answer = FetchAnswer(first)
            walked = list(answer.partitions())
            assert (answer.error_code, answer.session_id) == (decoded.error_code, decoded.session_id)
            expected = [(t.topic, pd.partition_index, pd.error_code, pd.high_watermark, pd.last_stable_offset,
                         pd.log_start_offset, bytes(pd.records)) for t in decoded.responses for pd in t.partitions]
            assert [(w.topic, w.partition, w.error_code, w.high_watermark, w.last_stable_offset, w.log_start_offset,
                     bytes(w.records)) for w in walked] == expected
            assert all(w.records.obj is first.obj for w in walked)  # views of the received bytes, no copies
            kept = bytes(first[4:])  # after the correlation id
            del first, decoded, answer, walked, expected
            gc.collect()  # no view of the first answer left in a reference cycle

            second = await conn.send_frame(fetch(topic, 0, 2 * PER_PARTITION), version=FETCH_WALK_VERSION)
            assert buf.allocations == 1 and bytes(second[4:]) == kept  # the same bytes, into the same buffer
            third = await conn.send_frame(fetch(topic, 0, PER_PARTITION // 2), version=FETCH_WALK_VERSION)
            # `second` is still viewed here; this answer is about half of each partition
            assert buf.allocations == 2 and second.obj is not third.obj
            assert bytes(second[4:]) == kept and len(third) < len(kept)
            del second, third
            for _ in range(3):
                frame = await conn.send_frame(fetch(topic, 0, 2 * PER_PARTITION), version=FETCH_WALK_VERSION)
                del frame
            assert buf.allocations == 2
        finally:
            conn.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run())
