"""Parked acks=all produces on one connection (kafkafast/runtime/connection.py `_park`, issue
25), over real loopback TCP, counted in event-loop passes (a probe callback that runs once per
pass), not in time: the next queued request is dispatched in the pass its predecessor's
handler parked in, and a parked answer is written in the call that completes it, after every
earlier answer of the connection and in request order.

The broker is a stand-in that hands each acks=all produce back as a `LaterAnswer` the test
completes (the high-watermark move of broker/handlers/produce.py `ParkedProduce`), and answers
a Metadata request at once."""
from __future__ import annotations

import asyncio
import time

from kafkafast.protocol import api
from kafkafast.protocol._generated.metadata import MetadataRequest, MetadataResponse
from kafkafast.protocol._generated.produce import ProduceRequest, ProduceResponse
from kafkafast.protocol.later import LaterAnswer
from kafkafast.records.batch import encode_batch
from kafkafast.runtime import connection as C


class Passes:
    """Counts the loop's passes: a callback that schedules itself again runs once per pass."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.n = 0
        self.loop = loop
        self.on = True
        loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        if self.on:
            self.loop.call_soon(self._tick)


class Later(LaterAnswer):
    __slots__ = ("correlation_id", "deliver")

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id
        self.deliver = None

    def answer_later(self, deliver) -> None:
        self.deliver = deliver

    def complete(self) -> None:
        response = ProduceResponse(responses=[], throttle_time_ms=0, node_endpoints=[])
        self.deliver(api.encode_response(0, 8, self.correlation_id, response), 0.0)


class StandInBroker:
    """Dispatches as `Broker.dispatch` would hand answers to the connection: acks=all produces
    park when the connection asks for it (`parking`), anything else is answered at once."""

    def __init__(self, passes_of) -> None:
        self.passes_of = passes_of
        self.dispatched: dict[int, int] = {}  # correlation id -> the pass it was dispatched in
        self.parked: dict[int, Later] = {}

    async def handle_frame(self, frame, conn, *, internal=False):
        api_key, version, correlation_id = api.peek_api(frame)
        self.dispatched[correlation_id] = self.passes_of()
        if api_key == 0 and conn.parking:
            later = self.parked[correlation_id] = Later(correlation_id)
            return later
        return api.encode_response(api_key, version, correlation_id, MetadataResponse(
            throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[]))


def _produce_frame(correlation_id: int) -> bytes:
    batch = encode_batch([(int(time.time() * 1000), None, b"v", [])])
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return api.encode_request(req, 8, correlation_id, "probe")


def _metadata_frame(correlation_id: int) -> bytes:
    return api.encode_request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 1, correlation_id, "probe")


async def _read_answers(reader: asyncio.StreamReader, n: int) -> list[int]:
    """The correlation ids of the next `n` answers, in the order they came."""
    ids = []
    for _ in range(n):
        size = int.from_bytes(await reader.readexactly(4), "big")
        body = await reader.readexactly(size)
        ids.append(int.from_bytes(body[:4], "big"))
    return ids


async def _served(frames: bytes, script) -> tuple:
    loop = asyncio.get_running_loop()
    passes = Passes(loop)
    broker = StandInBroker(lambda: passes.n)
    made: asyncio.Future = loop.create_future()
    writes: list[int] = []  # the pass of each transport write

    def factory():
        conn = C.KafkaConnection(broker=broker, max_request_bytes=1 << 20)

        def probed_made(transport):
            C.KafkaConnection.connection_made(conn, transport)
            write = transport.write
            transport.write = lambda data: (writes.append(passes.n), write(data))[1]  # type: ignore[method-assign]
            made.done() or made.set_result(conn)
        conn.connection_made = probed_made  # type: ignore[method-assign]
        return conn

    server = await loop.create_server(factory, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        conn = await made
        writer.write(frames)  # in one write: read in one pass, queued together
        return await script(conn, broker, passes, writes, reader)
    finally:
        passes.on = False
        writer.close()
        server.close()


def test_the_next_produce_is_dispatched_in_the_pass_the_first_parked():
    async def script(conn, broker, passes, writes, reader):
        while len(broker.parked) < 2:
            await asyncio.sleep(0)
        return dict(broker.dispatched), len(conn.in_flight)

    dispatched, in_flight = asyncio.run(_served(_produce_frame(1) + _produce_frame(2), script))
    assert dispatched[2] == dispatched[1]  # no task, no future between: the same loop pass
    assert in_flight == 2


def test_a_parked_answer_is_written_in_the_call_that_completes_it_and_in_order():
    async def script(conn, broker, passes, writes, reader):
        while len(broker.dispatched) < 3:
            await asyncio.sleep(0)
        first, second = broker.parked[1], broker.parked[2]
        second.complete()  # ready first, but written only after the answer before it
        await asyncio.sleep(0)
        assert writes == [] and len(conn.in_flight) == 2
        completed_in = passes.n
        first.complete()  # both go out in this call
        assert len(writes) == 2 and set(writes) == {completed_in} and not conn.in_flight
        return await _read_answers(reader, 3), broker.dispatched

    ids, dispatched = asyncio.run(_served(_produce_frame(1) + _produce_frame(2) + _metadata_frame(3), script))
    assert ids == [1, 2, 3]  # the Metadata answer waited for the produces before it


def test_a_request_behind_a_parked_produce_is_answered_after_it():
    async def script(conn, broker, passes, writes, reader):
        while len(broker.dispatched) < 2:
            await asyncio.sleep(0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert writes == []  # the Metadata answer is held behind the parked produce
        broker.parked[1].complete()
        return await _read_answers(reader, 2)

    assert asyncio.run(_served(_produce_frame(1) + _metadata_frame(2), script)) == [1, 2]
