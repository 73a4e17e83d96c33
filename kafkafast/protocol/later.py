"""An answer that comes later, without a coroutine waiting for it (issue 25).

A handler may return a `LaterAnswer` instead of its response when the connection asked for
one (`parking` set on it: an acks=all Produce on a client connection, runtime/connection.py):
the request is done with its work and only waits for something another request does (the
follower Fetch that moves a high watermark). `Broker.dispatch` hands it to the connection as
it is; the connection calls `answer_later(deliver)` at once and goes on with its next
request in the same loop pass, and the answer's parts reach `deliver` in the very call that
completes it (the high-watermark move), not one loop pass later as a resumed coroutine's
would. `deliver(parts, remote_s)`: the encoded response and the seconds it waited.
"""
from __future__ import annotations

from typing import Callable


class LaterAnswer:
    """A marker base (a plain class: `isinstance` against it runs on every request's answer,
    Broker.dispatch). A subclass defines `answer_later(deliver)`, which calls `deliver`
    exactly once, with the encoded answer, when it is known (maybe at once)."""
    __slots__ = ()

    answer_later: Callable[[Callable[[list | None, float], None]], None]
