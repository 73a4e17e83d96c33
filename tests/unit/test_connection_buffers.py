"""The broker connection's receive buffers (kafkafast/runtime/connection.py): frames are
received whole and unchanged however the bytes arrive; a large frame's buffer is reused for
the next one only when nothing views it; spare buffers are bounded per connection and per
process, and given back when the connection goes."""
from __future__ import annotations

import asyncio
import random

import pytest

from kafkafast.runtime import connection as C


def _conn() -> C.KafkaConnection:
    conn = C.KafkaConnection(broker=None, max_request_bytes=100 << 20)
    conn.wakeup = asyncio.Event()
    return conn


def _feed(conn: C.KafkaConnection, data: bytes, rng: random.Random) -> None:
    """Delivers `data` as a socket would: in reads of random sizes into get_buffer()."""
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data) - pos, rng.choice([1, 3, 4, 100, 5000, 70000, 1 << 20]))
        buf[:n] = data[pos:pos + n]
        del buf
        conn.buffer_updated(n)
        pos += n


@pytest.fixture(autouse=True)
def _fresh_pool():
    saved = C.KafkaConnection.spare_pool_bytes
    C.KafkaConnection.spare_pool_bytes = 0
    yield
    C.KafkaConnection.spare_pool_bytes = saved


def test_frames_of_every_size_arrive_whole_in_any_read_pattern() -> None:
    rng = random.Random(3)
    conn = _conn()
    bodies = [rng.randbytes(n) for n in (8, 100, C.SMALL_FRAME, C.SMALL_FRAME + 1, 40_000, 1_000_000, 12, 3 << 20)]
    _feed(conn, b"".join(len(b).to_bytes(4, "big") + b for b in bodies), rng)
    assert [bytes(f) for f in conn.queue] == bodies


def test_a_large_frame_buffer_is_reused_only_when_nothing_views_it() -> None:
    rng = random.Random(5)
    conn = _conn()
    first = rng.randbytes(500_000)
    _feed(conn, len(first).to_bytes(4, "big") + first, rng)
    frame = conn.queue.popleft()
    held = memoryview(frame)[10:20]  # a handler still holds a view: the buffer must not be reused
    conn._recycle(frame)
    assert conn._spares == [] and C.KafkaConnection.spare_pool_bytes == 0
    held.release()
    buf = frame.obj if isinstance(frame, memoryview) else frame
    conn._recycle(frame)
    assert conn._spares == [buf] and C.KafkaConnection.spare_pool_bytes == len(buf)
    second = rng.randbytes(300_000)  # smaller: received into the spare
    _feed(conn, len(second).to_bytes(4, "big") + second, rng)
    got = conn.queue.popleft()
    assert bytes(got) == second and got.obj is buf and conn._spares == []
    assert C.KafkaConnection.spare_pool_bytes == 0


def test_spare_buffers_are_bounded_per_connection_and_per_process_and_freed_on_close() -> None:
    conns = [_conn() for _ in range(30)]
    for conn in conns:
        for _ in range(6):
            conn._recycle(bytearray(1 << 20))
    per_conn = [sum(len(b) for b in c._spares) for c in conns]
    assert max(len(c._spares) for c in conns) == C.SPARE_BUFFERS and max(per_conn) <= C.SPARE_BYTES
    assert sum(per_conn) == C.KafkaConnection.spare_pool_bytes <= C.SPARE_POOL_BYTES
    assert sum(per_conn) > C.SPARE_POOL_BYTES - (1 << 20)  # the pool is used up to its bound
    for conn in conns:
        conn.connection_lost(None)
    assert C.KafkaConnection.spare_pool_bytes == 0
    conns[0]._recycle(bytearray(1 << 20))  # a closed connection keeps nothing
    assert conns[0]._spares == [] and C.KafkaConnection.spare_pool_bytes == 0


def test_full_spares_keep_the_largest_buffers_and_frames_take_the_smallest_that_fits() -> None:
    rng = random.Random(7)
    conn = _conn()
    small = [bytearray(20_000 + i) for i in range(C.SPARE_BUFFERS)]  # small frames fill the spares first
    for b in small:
        conn._recycle(b)
    big = bytearray(900_000)
    conn._recycle(big)  # a produce-sized buffer still gets kept: it replaces the smallest
    assert len(conn._spares) == C.SPARE_BUFFERS and any(s is big for s in conn._spares)
    assert not any(s is small[0] for s in conn._spares)
    assert C.KafkaConnection.spare_pool_bytes == sum(len(s) for s in conn._spares)
    conn._recycle(bytearray(10_000))  # smaller than every spare: not kept
    assert C.KafkaConnection.spare_pool_bytes == sum(len(s) for s in conn._spares)
    body = rng.randbytes(20_000)  # fits the small spares: the big one stays for the next large frame
    _feed(conn, len(body).to_bytes(4, "big") + body, rng)
    got = conn.queue.popleft()
    assert bytes(got) == body and any(s is big for s in conn._spares)
    body = rng.randbytes(800_000)  # received straight into the big spare
    _feed(conn, len(body).to_bytes(4, "big") + body, rng)
    got = conn.queue.popleft()
    assert bytes(got) == body and got.obj is big
