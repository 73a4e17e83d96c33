"""The client connection's frame receiving (kafkafast/client/connection.py `_FrameProtocol`),
with and without a reused `ReceiveBuffer` (a replica fetcher's): frames arrive whole and
unchanged however the bytes are cut (a frame in many small pieces, several frames in one
read, a read that finds nothing); with the buffer, a read that starts a frame lands in it and
a large answer stays where it landed (no copy, no allocation per answer)."""
from __future__ import annotations

import asyncio
import random
import socket
import threading
import time

import pytest
import uvloop

from kafkafast.client import connection as C


class _Frames:
    """Stands in for the BrokerConnection the protocol hands frames to."""

    def __init__(self) -> None:
        self.frames: list = []

    def _on_frame(self, frame) -> None:
        self.frames.append(frame)

    def _on_lost(self, exc) -> None:
        pass


def _framed(bodies: list[bytes]) -> bytes:
    return b"".join(len(b).to_bytes(4, "big") + b for b in bodies)


def _feed(proto: C._FrameProtocol, data: bytes, reads) -> int:
    """Delivers `data` as a transport does: each read into get_buffer(), `reads()` bytes at
    most, sometimes a read that finds nothing (get_buffer without buffer_updated). Returns the
    number of reads."""
    pos = count = 0
    while pos < len(data):
        buf = proto.get_buffer(-1)
        n = min(len(buf), len(data) - pos, reads())
        if n == 0:
            del buf
            continue
        buf[:n] = data[pos:pos + n]
        del buf
        proto.buffer_updated(n)
        pos += n
        count += 1
    return count


@pytest.mark.parametrize("reuse", [False, True], ids=["own-buffers", "receive-buffer"])
@pytest.mark.parametrize("seed", range(4))
def test_frames_arrive_whole_in_any_read_pattern(reuse: bool, seed: int) -> None:
    rng = random.Random(seed)
    sizes = (4, 100, C._SMALL_FRAME, C._SMALL_FRAME + 1, 40_000, 700_000, 12, 3 << 20, 300_000, 1_100_000, 8)
    bodies = [rng.randbytes(n) for n in sizes]
    conn = _Frames()
    proto = C._FrameProtocol(conn, C.ReceiveBuffer(cap=2 << 20) if reuse else None)  # type: ignore[arg-type]
    got = []

    def take(frame) -> None:  # a consumer that is done with each frame before the next (the fetcher)
        got.append(bytes(frame))

    conn._on_frame = take  # type: ignore[method-assign]
    _feed(proto, _framed(bodies), lambda: rng.choice([0, 1, 3, 4, 7, 100, 5000, 70_000, 1 << 20, 8 << 20]))
    assert got == bodies


def test_a_frame_in_many_small_pieces_and_several_frames_in_one_read() -> None:
    rb = C.ReceiveBuffer(cap=8 << 20)
    conn = _Frames()
    proto = C._FrameProtocol(conn, rb)  # type: ignore[arg-type]
    big = random.Random(1).randbytes(600_000)
    _feed(proto, _framed([big]), lambda: 997)  # a large frame 997 bytes at a time
    assert bytes(conn.frames.pop()) == big
    smalls = [b"a" * 10, b"b" * 2000, b"c" * 30_000]
    _feed(proto, _framed(smalls + [big] + smalls), lambda: 10 << 20)  # all of it in one read
    assert [bytes(f) for f in conn.frames] == smalls + [big] + smalls


def test_a_large_answer_lands_in_the_receive_buffer_in_one_read_and_stays_there() -> None:
    rb = C.ReceiveBuffer(cap=8 << 20)
    conn = _Frames()
    proto = C._FrameProtocol(conn, rb)  # type: ignore[arg-type]
    rng = random.Random(2)
    first = rng.randbytes(1_200_000)
    _feed(proto, _framed([first]), lambda: 10 << 20)  # the first grows the buffer (through _scratch)
    assert bytes(conn.frames.pop()) == first and rb.allocations == 1
    for _ in range(5):
        answer = rng.randbytes(rng.randrange(900_000, 1_100_000))
        reads = _feed(proto, _framed([answer]), lambda: 10 << 20)
        frame = conn.frames.pop()
        assert reads == 1 and bytes(frame) == answer
        assert frame.obj is rb._buf  # a view of the reused buffer: no copy, no allocation
        del frame
    assert rb.allocations == 1
    # an answer still viewed when the next arrives: the next lands elsewhere, both intact
    a, b = rng.randbytes(950_000), rng.randbytes(960_000)
    _feed(proto, _framed([a]), lambda: 10 << 20)
    held = conn.frames.pop()
    _feed(proto, _framed([b]), lambda: 10 << 20)
    assert bytes(held) == a and bytes(conn.frames.pop()) == b and rb.allocations == 2


def test_an_answer_larger_than_the_buffer_grows_it_and_a_read_that_finds_nothing_keeps_nothing() -> None:
    rb = C.ReceiveBuffer(cap=16 << 20)
    conn = _Frames()
    proto = C._FrameProtocol(conn, rb)  # type: ignore[arg-type]
    rng = random.Random(4)
    small, large = rng.randbytes(500_000), rng.randbytes(3_000_000)
    _feed(proto, _framed([small]), lambda: 10 << 20)
    conn.frames.clear()
    proto.get_buffer(-1)  # a read that found nothing: the landing lent to it is not kept
    _feed(proto, _framed([large]), lambda: 10 << 20)
    assert bytes(conn.frames.pop()) == large and rb.capacity >= len(large)
    _feed(proto, _framed([small]), lambda: 10 << 20)
    frame = conn.frames.pop()
    assert bytes(frame) == small and frame.obj is rb._buf


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_the_rest_of_a_large_frame_sent_in_pieces_is_read_once_it_is_all_there(loop_factory) -> None:
    """Over loopback TCP: a 1 MB frame sent as 16 pieces some milliseconds apart wakes the loop
    for its first piece and then once for the rest (SO_RCVLOWAT), not for every piece, and is
    received whole; the socket wakes for every byte again afterwards."""
    body = random.Random(6).randbytes(1 << 20)
    data = _framed([body])
    piece = len(data) // 16 + 1
    small = b"after the large one"

    def serve(listener: socket.socket) -> None:
        peer, _ = listener.accept()
        with peer:
            for i in range(0, len(data), piece):
                peer.sendall(data[i:i + piece])
                time.sleep(0.004)
            peer.recv(1)  # the client has the frame
            peer.sendall(_framed([small]))
            peer.recv(1)

    async def run() -> tuple[int, list[bytes], int]:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        server = threading.Thread(target=serve, args=(listener,), daemon=True)
        server.start()
        conn = _Frames()
        got: asyncio.Queue = asyncio.Queue()
        conn._on_frame = lambda f: got.put_nowait(bytes(f))  # type: ignore[method-assign]
        reads = [0]

        class Counting(C._FrameProtocol):
            def buffer_updated(self, nbytes: int) -> None:
                reads[0] += 1
                super().buffer_updated(nbytes)

        rb = C.ReceiveBuffer(cap=4 << 20)
        transport, proto = await loop.create_connection(lambda: Counting(conn, rb), *listener.getsockname())
        try:
            frames = [await asyncio.wait_for(got.get(), 10)]
            large_reads = reads[0]
            sock = transport.get_extra_info("socket")
            lowat = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
            transport.write(b"k")
            frames.append(await asyncio.wait_for(got.get(), 10))
            transport.write(b"k")
            return large_reads, frames, lowat
        finally:
            transport.close()
            listener.close()
            server.join(5)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        large_reads, frames, lowat = runner.run(run())
    assert frames == [body, small] and lowat == 1
    assert large_reads <= 4  # 16 pieces: read as they come, they take 16 reads
