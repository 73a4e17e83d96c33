"""`ReceiveBuffer` sizing (kafkafast/client/connection.py): grown to the largest frame, a frame
above the cap in a buffer of its own, and given back after a window of smaller frames."""
from __future__ import annotations

from kafkafast.client.connection import ReceiveBuffer


def test_grows_once_keeps_its_size_and_leaves_frames_above_the_cap_alone() -> None:
    rb = ReceiveBuffer(cap=1 << 20)
    for size in (100_000, 300_000, 200_000, 300_000):
        view = rb.frame(size)
        assert len(view) == size
        del view
    assert (rb.allocations, rb.capacity) == (2, 300_004)  # (room for a size prefix)
    big = rb.frame(2 << 20)
    assert len(big) == 2 << 20 and rb.capacity == 300_004 and rb.allocations == 3


def test_a_burst_is_given_back_after_a_window_of_small_frames() -> None:
    rb = ReceiveBuffer(cap=64 << 20)
    view = rb.frame(8 << 20)
    del view
    for _ in range(2 * ReceiveBuffer.SHRINK_WINDOW):
        view = rb.frame(100_000)
        del view
    assert rb.capacity == 200_000
