"""The client connection's frame receiving (kafkafast/client/connection.py `_FrameProtocol`),
with and without a reused `ReceiveBuffer` (a replica fetcher's): frames arrive whole and
unchanged however the bytes are cut (a frame in many small pieces, several frames in one
read, a read that finds nothing); with the buffer, a read that starts a frame lands in it and
a large answer stays where it landed (no copy, no allocation per answer)."""
from __future__ import annotations

import random

import pytest

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
