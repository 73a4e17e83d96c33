"""A connection's answer writing over real loopback TCP (kafkafast/runtime/connection.py
`_send`): an answer holding file regions is sent corked (its small parts ride in the records'
segments) and uncorked at its end, byte for byte as framed."""
from __future__ import annotations

import asyncio
import os
import socket

from kafkafast.protocol.primitives import FileRegion
from kafkafast.runtime import connection as C


async def _answered(tmp_path, parts_of) -> tuple[bytes, int, bool]:
    """Serves one KafkaConnection on loopback, has it send `parts_of(fd)`, reads the bytes at
    the client: (bytes read, TCP_CORK of the server socket afterwards, whether it corked)."""
    data = os.urandom(300_000)
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    loop = asyncio.get_running_loop()
    made: asyncio.Future = loop.create_future()

    def factory():
        conn = C.KafkaConnection(broker=None, max_request_bytes=1 << 20)
        loop.call_soon(lambda: made.done() or made.set_result(conn))
        return conn

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        conn = await made
        parts, expected = parts_of(fd, data)
        await conn._send(parts)
        got = await reader.readexactly(len(expected))
        assert got == expected
        corked_sock = conn._cork_sock
        cork = corked_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) if corked_sock is not None else 0
        return got, cork, corked_sock is not None
    finally:
        writer.close()
        server.close()
        os.close(fd)


def _regions(fd: int, data: bytes):
    head, mid, tail = b"\x00\x00\x01\x00head", b"partition-2", b"\x00\x00"
    parts = [bytearray(head), FileRegion(fd, 0, 100_000), mid, FileRegion(fd, 100_000, 150_000), tail]
    return parts, head + data[:100_000] + mid + data[100_000:250_000] + tail


def test_an_answer_with_file_regions_is_sent_whole_and_uncorked_at_its_end(tmp_path):
    got, cork, corked = asyncio.run(_answered(tmp_path, _regions))
    assert corked and cork == 0


def test_an_answer_of_bytes_only_is_not_corked(tmp_path):
    got, cork, corked = asyncio.run(_answered(tmp_path, lambda fd, data: ([b"abc", b"def"], b"abcdef")))
    assert not corked
