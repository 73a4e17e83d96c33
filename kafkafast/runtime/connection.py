"""One client connection: framing, in-order request processing, response writing.

Framing: a 4-byte big-endian size, then the request. A size below 8 or above
`socket.request.max.bytes` closes the connection at once. Requests on one connection are
handled one at a time, in order, as Kafka does (responses must come back in request
order); reading pauses while MAX_QUEUED frames wait. One exception (issue 25): an acks=all
Produce whose appends are done parks (its handler returns a `LaterAnswer`, `_park`) and the
connection handles its next requests in the same loop pass while it waits for replication,
up to MAX_IN_FLIGHT of them; its answer is written in the call that completes it (the
high-watermark move) once every earlier answer is (`_flush`), and the next request starts
only after the appends of the one before. With fault injection or client quotas the produce
runs as a task of its own instead (`_start_produce`, the handler calling `appended()`), with
the same order (see docs/ARCHITECTURE.md).

Receiving (a BufferedProtocol): the socket is read into a per-connection scratch buffer,
from which frames up to SMALL_FRAME bytes are cut out. A larger frame (a produce request)
is received straight into a buffer of its own, which is handed to the handler as it is:
the record bytes are copied only from the kernel into it and from it into the log. Memory
is never sized by the size field alone: a new frame buffer starts small and grows (by
doubling) only as bytes arrive. A frame buffer that nothing references any more once its
request is answered is kept (up to SPARE_BUFFERS and SPARE_BYTES per connection, and
SPARE_POOL_BYTES for all connections of the process together) and the next large frame
that fits is received into it directly (the smallest spare that fits; when the spares are
full, a larger buffer replaces the smallest), so steady produce traffic allocates nothing.

Responses are lists of parts. Byte parts go through the transport; a FileRegion part is
sent with os.sendfile straight from the segment file on plaintext sockets: the transport
is drained first (so framing stays in order), then the region is pushed with sendfile,
waiting for writability on a duplicate of the socket's fd when the kernel buffer is full; an
answer holding regions is written corked (TCP_CORK, cleared at its end), so its small byte
parts ride in the regions' full segments instead of going out as a segment each.
On TLS connections the region is read with os.preadv into a reused TLS_CHUNK buffer and
written through the SSL transport (which encrypts it at once into its own buffer; the
buffer is reused only when the transport kept no view of it).

Security (connections of a configured listener, `listener` set): each has a
`SecuritySession` (kafkafast/security): the TLS client certificate's principal, the SASL
exchange, and the gate (`security.gate.screen`) that lets only the SASL APIs through
before authentication and caps such requests at 512 KiB. A failed authentication is
answered, then the connection is closed after `connection.failed.authentication.delay.ms`.
Limits (`runtime/limits.py`): a client connection comes with its `Admission` from the
listener's Acceptor (max.connections, per-IP caps, counted broker-wide), registers for the
idle sweep once made and gives the admission back when lost; on a SASL listener it stays
"pending" (capped, timed out) until authenticated; `queued.max.requests` /
`queued.max.request.bytes` bound the frames waiting in all connections of the process
together: a connection that queues past them stops reading until the total falls again.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from typing import Any, Callable

from kafkafast.protocol.errors import CloseConnection
from kafkafast.protocol.later import LaterAnswer
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol.primitives import FileRegion
from kafkafast.security.context import security_of
from kafkafast.security.gate import new_session, screen
from kafkafast.security.sasl import PRE_AUTH_MAX_BYTES

log = logging.getLogger("kafkafast.connection")

MAX_QUEUED = 32
MAX_IN_FLIGHT = 5  # acks=all produces of a connection in progress at once (librdkafka's max.in.flight)
TLS_CHUNK = 256 * 1024  # fetch bytes read per step on TLS connections
SMALL_FRAME = 8 * 1024  # frames up to this size are cut out of the scratch buffer
SCRATCH = 2 * SMALL_FRAME
SPARE_BUFFERS = 4  # large-frame buffers kept per connection for reuse (5 produce requests in flight)...
SPARE_BYTES = 8 << 20  # ...up to this many bytes in all...
SPARE_POOL_BYTES = 64 << 20  # ...and all connections of a process together up to this many
_SIZE = int.from_bytes


def _acks_all_produce(frame: bytearray | memoryview) -> bool:
    """Whether `frame` is a Produce request that may wait for replication: acks=-1 (or a
    header it cannot read quickly, which the handler then reads). Header: api key, version,
    correlation id, client id (int16 size), v9+ tagged fields; body v3+: transactional id."""
    if frame[0] != 0 or frame[1] != 0 or len(frame) < 16:
        return False
    try:
        return _acks_field_is_all(frame)
    except IndexError:  # a short frame: the handler answers it
        return True


def _acks_field_is_all(frame: bytearray | memoryview) -> bool:
    version = _SIZE(frame[2:4], "big")
    pos = 10 + max(_SIZE(frame[8:10], "big", signed=True), 0)
    if version >= 9:
        if frame[pos] != 0:  # tagged fields in the header
            return True
        pos += 1
        size = frame[pos]  # compact nullable string: size + 1, a one-byte varint below 128
        if size >= 0x80:
            return True
        pos += 1 + max(size - 1, 0)
    elif version >= 3:
        pos += 2 + max(_SIZE(frame[pos:pos + 2], "big", signed=True), 0)
    return pos + 2 > len(frame) or frame[pos:pos + 2] == b"\xff\xff"


class KafkaConnection(asyncio.BufferedProtocol):
    spare_pool_bytes = 0  # bytes held in spare frame buffers by all connections of this process
    queued_total = 0  # frames waiting in all connections of this process...
    queued_bytes = 0  # ...and their bytes (queued.max.requests / queued.max.request.bytes)
    queue_limits = (500, -1)
    held_back: set = set()  # connections paused because the process-wide queue is full

    def __init__(self, broker: Any, max_request_bytes: int, *, internal: bool = False,
                 tracker: set | None = None, listener: Any = None, limits: Any = None) -> None:
        self.broker = broker
        self.max_request = max_request_bytes
        self.internal = internal
        # acks=all produces overlap their replication waits (below) where replicas may lag: a
        # broker whose every replica is its own (its control plane's `lone_replicas`) has its
        # high watermark at the log end once the append is done, and answers them in line
        control = getattr(broker, "control", None)  # (a test's stand-in broker has none)
        self.overlap_produces = not internal and not getattr(control, "lone_replicas", False)
        self.tracker = tracker
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(SCRATCH)
        self._view = memoryview(self._scratch)
        self._start = 0  # unconsumed bytes of the scratch buffer: [_start, _end)
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being received: _got of _frame_size bytes
        self._frame_size = 0
        self._got = 0
        self._spares: list[bytearray] = []
        self.queue: deque[bytearray | memoryview] = deque()
        self.arrivals: deque[float] = deque()  # with metrics on: when each queued frame was wholly read
        self._auth_counted = False  # this connection's authentication is in the metrics
        self.wakeup: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.closing = False
        self.paused = False
        self.busy = False  # sets `handling`: a request's handler runs (`busy` also counts waiting answers)
        self._appended: asyncio.Future | None = None  # set by `appended()` (see _start_produce)
        self.in_flight: deque[asyncio.Future] = deque()  # answers of acks=all produces still waiting, in order
        self.parking = False  # the request being dispatched may answer later (`LaterAnswer`, see _park)
        self._parked: dict[asyncio.Future, _Parked] = {}  # the in_flight entries of parked produces
        self.throttled_until = 0.0  # monotonic time before which no request is read (client quotas)
        self.peer = None
        self._drain_waiter: asyncio.Future | None = None
        self._write_paused = False
        self._dup_fd = -1
        # plaintext TCP: answers with file regions are corked, through a socket object of our own
        # on a duplicate of the fd (the transport's socket object makes one for every call)
        self._tcp = False
        self._cork_sock: socket.socket | None = None
        # kafkafast.testing: faults applied at the edge, on client connections only
        self.test_control = None if internal else getattr(broker, "test_control", None)
        self.listener = listener  # kafkafast.security.listeners.ListenerSpec (None: internal)
        self.limits = limits
        self.session: Any = None
        self.admission: Any = None  # runtime.limits.Admission: this connection's share of the limits
        self.last_active = 0.0
        self.activity = 0  # this worker's activity sequence number at the last byte in or out (limits: LRU order)
        self._tls_buf: bytearray | None = None
        # what ends with this connection, by its owner's key (the share sessions opened on it)
        self.on_lost: dict[Any, Callable[[], None]] = {}

    @property
    def busy(self) -> bool:
        """A request is being handled or answered (the idle sweep and shutdown wait for it)."""
        return self.handling or bool(self.in_flight)

    @busy.setter
    def busy(self, value: bool) -> None:
        self.handling = value

    # -- asyncio.BufferedProtocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.listener is None or not self.listener.tls:
                    self._tcp = True
            except OSError:
                pass
        self.wakeup = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.last_active = loop.time()
        if self.admission is not None:  # admitted by the listener's Acceptor (runtime/limits.py)
            self.limits.connected(self, self.admission)
        if self.listener is not None:
            if self.listener.tls and not self.listener.sasl:
                self._count_authentication(True)  # the TLS handshake is done: Kafka counts SSL here
            try:
                self.session = new_session(self.listener, transport, self.peer)
            except ValueError as exc:  # no principal mapping rule matches the certificate
                log.info("closing %s: %s", self.peer, exc)
                self.closing = True
                transport.abort()  # type: ignore[attr-defined]
                return
            if not self.session.authenticated:
                self.max_request = min(self.max_request, PRE_AUTH_MAX_BYTES)
        self.task = loop.create_task(self._process())
        if self.tracker is not None:
            self.tracker.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._got:min(len(frame), self._frame_size)]
        if self._end == SCRATCH:  # move the partial frame to the front
            n = self._end - self._start
            self._scratch[:n] = self._view[self._start:self._end]
            self._start, self._end = 0, n
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.closing:
            return
        if self.limits is not None:
            self.last_active, self.activity = self.limits.touch()
        frame = self._frame
        if frame is not None:
            self._got += nbytes
            if self._got == self._frame_size:
                self._frame = None
                self._queue_frame(memoryview(frame)[:self._frame_size] if len(frame) > self._frame_size else frame)
            elif self._got == len(frame):  # grow as the bytes arrive, never ahead of them
                bigger = bytearray(min(self._frame_size, 2 * len(frame)))
                bigger[:self._got] = frame
                self._frame = bigger
            return
        self._end += nbytes
        view = self._view
        while self._end - self._start >= 4:
            start = self._start
            size = _SIZE(view[start:start + 4], "big", signed=True)
            if size < (8 if self.session is None or not self.session.raw_tokens else 0) or size > self.max_request:
                log.info("closing %s: request size %d outside [8, %d]", self.peer, size, self.max_request)
                self.abort()
                return
            have = self._end - start - 4
            if size > SMALL_FRAME and have < size:
                self._start_large_frame(size, view[start + 4:self._end])
                self._start = self._end = 0
                break
            if have < size:
                break
            self._start = start + 4 + size
            self._queue_frame(bytearray(view[start + 4:start + 4 + size]))
            if self.closing:
                return
        if self._start == self._end:
            self._start = self._end = 0

    def _start_large_frame(self, size: int, head: memoryview) -> None:
        """Receives the rest of a frame of `size` bytes (`head` already here) into a spare
        buffer that fits, else into a new one that starts at twice what is here."""
        frame = None
        fits = [i for i, spare in enumerate(self._spares) if len(spare) >= size]
        if fits:  # the smallest that fits: the larger spares stay for larger frames
            frame = self._spares.pop(min(fits, key=lambda i: len(self._spares[i])))
            KafkaConnection.spare_pool_bytes -= len(frame)
        if frame is None:
            frame = bytearray(min(size, 2 * max(len(head), SMALL_FRAME)))
        frame[:len(head)] = head
        self._frame, self._frame_size, self._got = frame, size, len(head)

    def _queue_frame(self, frame: bytearray | memoryview) -> None:
        self.queue.append(frame)
        self.wakeup.set()  # type: ignore[union-attr]
        if self.internal:  # forwarded requests: bounded by the requesting worker
            if len(self.queue) >= MAX_QUEUED and not self.paused:
                self.paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            return
        if request_metrics.active:  # client requests' queue time (InternalConnection keeps no arrivals)
            self.arrivals.append(request_metrics.clock())
        cls = KafkaConnection
        cls.queued_total += 1
        cls.queued_bytes += len(frame)
        max_requests, max_bytes = cls.queue_limits
        if not self.paused and (len(self.queue) >= MAX_QUEUED or cls.queued_total >= max_requests
                                or 0 < max_bytes <= cls.queued_bytes):
            self.paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
            if len(self.queue) < MAX_QUEUED:
                cls.held_back.add(self)

    def _dequeued(self, frame: bytearray | memoryview) -> None:
        cls = KafkaConnection
        cls.queued_total -= 1
        cls.queued_bytes -= len(frame)
        if self.paused and len(self.queue) < MAX_QUEUED // 2 and self not in cls.held_back:
            self.paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        max_requests, max_bytes = cls.queue_limits
        if cls.held_back and cls.queued_total < max_requests // 2 + 1 and (max_bytes <= 0 or 2 * cls.queued_bytes < max_bytes):
            for conn in list(cls.held_back):
                cls.held_back.discard(conn)
                if conn.paused and not conn.closing and len(conn.queue) < MAX_QUEUED // 2:
                    conn.paused = False
                    conn.transport.resume_reading()  # type: ignore[union-attr]

    def _recycle(self, frame: bytearray | memoryview) -> None:
        """Keeps a large frame's buffer for the next large frame, if nothing else holds a
        view of it (a forwarded copy still being written, say); otherwise lets it go."""
        if self.closing or len(frame) <= SMALL_FRAME:
            return
        buf = frame.obj if isinstance(frame, memoryview) else frame
        if not isinstance(buf, bytearray):
            return
        spares = self._spares
        evict = None
        if len(spares) >= SPARE_BUFFERS:  # full: this one replaces the smallest spare if it is larger
            evict = min(spares, key=len)
            if len(evict) >= len(buf):
                return
        freed = len(evict) if evict is not None else 0
        if (len(buf) + sum(len(b) for b in spares) - freed > SPARE_BYTES
                or KafkaConnection.spare_pool_bytes + len(buf) - freed > SPARE_POOL_BYTES):
            return
        try:
            if isinstance(frame, memoryview):
                frame.release()
            buf.append(0)  # resizing fails while any view of the buffer is alive
        except BufferError:
            return
        buf.pop()
        if evict is not None:
            spares.remove(evict)  # bytearrays compare by value: the first equal one goes, the same size
        spares.append(buf)
        KafkaConnection.spare_pool_bytes += len(buf) - freed

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._drop_queue()
        KafkaConnection.held_back.discard(self)
        if self.admission is not None:
            self.limits.release(self.admission)
        KafkaConnection.spare_pool_bytes -= sum(len(b) for b in self._spares)
        self._spares.clear()
        if self.wakeup is not None:
            self.wakeup.set()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError())
        if self.task is not None and not self.busy:
            self.task.cancel()
        if self._dup_fd >= 0:
            os.close(self._dup_fd)
            self._dup_fd = -1
        if self._cork_sock is not None:
            self._cork_sock.close()
            self._cork_sock = None
        if self.tracker is not None:
            self.tracker.discard(self)
        lost, self.on_lost = self.on_lost, {}
        for ended in lost.values():
            try:
                ended()
            except Exception:  # noqa: BLE001 - one owner's failure must not skip the others
                log.exception("ending state bound to a closed connection failed")

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    # -- processing -----------------------------------------------------------------------
    def abort(self) -> None:
        self.closing = True
        self._drop_queue()
        if self.transport is not None:
            self.transport.close()

    def _drop_queue(self) -> None:
        cls = KafkaConnection
        for frame in self.queue if not self.internal else ():
            cls.queued_total -= 1
            cls.queued_bytes -= len(frame)
        self.queue.clear()
        self.arrivals.clear()

    async def _process(self) -> None:
        try:
            while not self.closing:
                if self.throttled_until:  # a client quota was exceeded: read nothing until then
                    delay, self.throttled_until = self.throttled_until - time.monotonic(), 0.0
                    if delay > 0:
                        await asyncio.sleep(delay)
                    continue
                if not self.queue:
                    self.wakeup.clear()  # type: ignore[union-attr]
                    await self.wakeup.wait()  # type: ignore[union-attr]
                    continue
                frame = self.queue.popleft()
                arrived = self.arrivals.popleft() if self.arrivals else None
                self._dequeued(frame)
                self.handling = True
                started = request_metrics.begin() if request_metrics.active else 0.0
                overlapped = False
                try:
                    parts = screen(self, frame) if self.session is not None else None
                    if parts is None:
                        if self.overlap_produces and _acks_all_produce(frame):
                            if self.test_control is None and not self._quotas_active():
                                self.parking = True
                                try:
                                    parts = await self._dispatch(frame)
                                finally:
                                    self.parking = False
                                if isinstance(parts, LaterAnswer):
                                    overlapped = self._park(parts, frame, started, arrived)
                                    parts = None
                            else:
                                overlapped = await self._start_produce(frame, started, arrived)
                        else:
                            parts = await self._dispatch(frame)
                    if self.admission is not None and self.admission.pending and self.session.authenticated:
                        self.limits.setup_done(self.admission)  # SASL done: no longer a pending connection
                except CloseConnection as exc:
                    await self._earlier_answers()
                    log.info("closing %s: %s", self.peer, exc)
                    if self.session is not None and not self.session.authenticated:
                        self._count_authentication(False)
                    self.abort()
                    return
                except Exception:
                    await self._earlier_answers()
                    log.exception("request from %s failed; closing the connection", self.peer)
                    self.abort()
                    return
                finally:
                    self.handling = False
                if overlapped:  # answered by its own task (appended, maybe waiting for replication): read on
                    while len(self.in_flight) >= MAX_IN_FLIGHT and not self.closing:
                        await asyncio.wait((self.in_flight[0],))
                    del frame
                    continue
                handled = request_metrics.clock()
                if self.in_flight:
                    await self._earlier_answers()
                if parts is not None and not self.closing:
                    await self._send(parts)
                sent = request_metrics.clock()
                if request_metrics.active:
                    request_metrics.observe(frame, parts, started, arrived, handled, sent)
                    if (not self._auth_counted and self.session is not None and self.session.authenticated
                            and self.listener.sasl):
                        self._count_authentication(True)  # a SASL exchange just ended
                parts = None
                if self.session is not None and self.session.failed:
                    self._count_authentication(False)
                    await self._close_failed_auth()
                    return
                self._recycle(frame)
                del frame
        except (asyncio.CancelledError, ConnectionError):
            pass

    # -- acks=all produces: the replication wait overlaps the next requests -----------------
    async def _start_produce(self, frame: bytearray | memoryview, started: float, arrived: float | None) -> bool:
        """Starts an acks=all Produce as a task of its own (`_produce`: handled, then answered
        after every earlier answer) and returns once its appends are done (the handler calls
        `appended()` before its replication wait) or it ended: True (it is in `in_flight`)."""
        loop = asyncio.get_running_loop()
        gate = self._appended = loop.create_future()
        earlier = self.in_flight[-1] if self.in_flight else None
        task = loop.create_task(self._produce(earlier, frame, started, arrived))
        self.in_flight.append(task)
        task.add_done_callback(self._answered)
        task.add_done_callback(lambda _t: gate.done() or gate.set_result(None))
        try:
            await gate
        finally:
            self._appended = None
        return True

    def appended(self) -> None:
        """The current request's appends are done: the connection may handle the next one
        while this one waits (the produce handler, before its acks=all replication wait)."""
        gate = self._appended
        if gate is not None and not gate.done():
            gate.set_result(None)

    def _answered(self, answer: asyncio.Task) -> None:
        self.in_flight.remove(answer)
        if self._parked:
            self._flush()

    def _quotas_active(self) -> bool:
        quotas = getattr(self.broker, "quotas", None)  # (a test's stand-in broker has none)
        return quotas is not None and quotas.active()

    def _park(self, later: LaterAnswer, frame: Any, started: float, arrived: float | None) -> bool:
        """An acks=all produce whose appends are done and whose handler returned a
        `LaterAnswer` (broker/handlers/produce.py `ParkedProduce`): it joins `in_flight`, and
        the connection goes on with its next request in this same loop pass (no task, no
        future to resume). Its answer comes in the call that completes it (the follower
        Fetch's high-watermark move) and is written in that call too, once every earlier
        answer is (`_flush`). True (it is in `in_flight`)."""
        slot = asyncio.get_running_loop().create_future()
        parked = self._parked[slot] = _Parked(frame, started, arrived)
        self.in_flight.append(slot)

        def deliver(parts: list | None, remote_s: float) -> None:
            parked.parts, parked.remote_s, parked.ready = parts, remote_s, True
            parked.handled = request_metrics.clock()
            self._flush()

        later.answer_later(deliver)
        return True

    def _flush(self) -> None:
        """Writes the parked answers that are ready and follow only written ones, in order
        (produce answers are bytes: written at once, the transport buffers what the socket
        does not take yet)."""
        in_flight, parked_answers = self.in_flight, self._parked
        i = 0
        while i < len(in_flight):
            slot = in_flight[i]
            if slot.done():  # a task answered already (`_answered` removes it)
                i += 1
                continue
            parked = parked_answers.get(slot)
            if parked is None or not parked.ready:
                return
            del in_flight[i]
            del parked_answers[slot]
            parts = parked.parts
            if parts is None:
                log.error("a parked produce from %s failed; closing the connection", self.peer)
                self.abort()
            elif not self.closing:
                t = self.transport
                for part in parts:
                    t.write(part)  # type: ignore[union-attr]
                if self.limits is not None:
                    self.last_active, self.activity = self.limits.touch()
            if request_metrics.active:
                request_metrics.observe(parked.frame, parts, parked.started, parked.arrived, parked.handled,
                                        request_metrics.clock(), remote_s=parked.remote_s)
            parked.parts = None
            self._recycle(parked.frame)
            parked.frame = None
            slot.set_result(None)

    async def _earlier_answers(self) -> None:
        """Until every request still in progress is answered (or dropped with the connection)."""
        if self.in_flight:
            await asyncio.wait((self.in_flight[-1],))

    async def _produce(self, earlier: asyncio.Future | None, frame: Any, started: float, arrived: float | None) -> None:
        """An acks=all Produce handled and answered in one task: the answer is written in the
        step that ends the handler's wait (the pass after the follower Fetch that moved the high
        watermark), once `earlier` (the answer before it on this connection) is written."""
        try:
            try:
                parts = await self._dispatch(frame)
                failed = None
            except CloseConnection as exc:
                parts, failed = None, exc
            except Exception as exc:  # noqa: BLE001 - logged below, after the earlier answers
                parts, failed = None, exc
            handled = request_metrics.clock()
            if earlier is not None and not earlier.done():  # the earlier answers are written first
                await earlier
            if failed is not None:
                if isinstance(failed, CloseConnection):
                    log.info("closing %s: %s", self.peer, failed)
                else:
                    log.error("request from %s failed; closing the connection", self.peer, exc_info=failed)
                self.abort()
                return
            if parts is not None and not self.closing:
                await self._send(parts)
            if request_metrics.active:
                request_metrics.observe(frame, parts, started, arrived, handled, request_metrics.clock())
            parts = None
            self._recycle(frame)
        except (asyncio.CancelledError, ConnectionError):
            pass

    def _dispatch(self, frame: bytearray | memoryview) -> Any:
        if self.test_control is not None:
            return self.test_control.handle_frame(frame, self)
        return self.broker.handle_frame(frame, self, internal=self.internal)

    def _count_authentication(self, ok: bool) -> None:
        """Kafka's successful-/failed-authentication-total of the listener, once per connection:
        SSL at the end of the TLS handshake, SASL at the end of the exchange, PLAINTEXT never
        (Kafka's PLAINTEXT channel is ready from the start). Failed TLS handshakes are counted
        by the listener's Acceptor (runtime/limits.py), which sees them."""
        if request_metrics.active and not self._auth_counted and self.listener is not None:
            self._auth_counted = True
            request_metrics.authentication(self.listener.name, ok)

    async def _close_failed_auth(self) -> None:
        await asyncio.sleep(security_of(self.broker).failed_auth_delay)
        log.info("closing %s: SASL authentication failed", self.peer)
        self.abort()

    async def _send(self, parts: list) -> None:
        t = self.transport
        cork = self._corked() if self._tcp and len(parts) > 1 and any(type(p) is FileRegion for p in parts) else None
        try:
            for part in parts:
                if isinstance(part, FileRegion):
                    if self.listener is not None and self.listener.tls:
                        await self._send_region_tls(part)
                    else:
                        await self._sendfile(part)
                else:
                    t.write(part)  # type: ignore[union-attr]
        finally:
            if cork is not None and not self.closing:
                try:
                    cork.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)  # sends what is held
                except OSError:
                    pass
        if self._write_paused:
            await self._wait_drained(False)
        if self.limits is not None:
            self.last_active, self.activity = self.limits.touch()

    def _corked(self) -> socket.socket | None:
        """Corks the connection's socket (TCP_CORK) for an answer holding file regions, so its
        small parts (the frame header, each partition's header before its records, the tail)
        go out inside full segments with the records instead of a segment each; `_send`
        uncorks at the end, which sends what is held. The socket object it did that on (None:
        not corked)."""
        sock = self._cork_sock
        try:
            if sock is None:
                fd = self.transport.get_extra_info("socket").fileno()  # type: ignore[union-attr]
                sock = self._cork_sock = socket.socket(fileno=os.dup(fd))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        except OSError:
            self._tcp = False
            return None
        return sock

    async def _send_region_tls(self, region: FileRegion) -> None:
        """No sendfile through TLS: the region is read into a reused buffer and handed to
        the SSL transport, which encrypts it into its outgoing buffer at once. The buffer
        is reused only if the transport holds no view of it (a partial SSL write keeps one)."""
        t = self.transport
        offset, remaining = region.offset, region.length
        while remaining > 0 and not self.closing:
            buf = self._tls_buf
            if buf is None or len(buf) < min(TLS_CHUNK, remaining):
                buf = self._tls_buf = bytearray(min(TLS_CHUNK, max(remaining, 4096)))
            view = memoryview(buf)[:min(len(buf), remaining)]
            n = os.preadv(region.fd, [view], offset)
            if n <= 0:
                view.release()
                log.error("segment file ended early while sending a fetch response; closing %s", self.peer)
                self.abort()
                return
            chunk = view[:n]
            t.write(chunk)  # type: ignore[union-attr]
            chunk.release()
            view.release()
            try:
                buf.append(0)  # fails while the transport still holds a view of the buffer
                buf.pop()
            except BufferError:
                self._tls_buf = None
            offset += n
            remaining -= n
            if self._write_paused:
                await self._wait_drained(False)

    async def _wait_drained(self, empty: bool) -> None:
        """Waits for resume_writing (buffer below the low mark) or, with empty=True,
        until the transport buffer is empty."""
        t = self.transport
        loop = asyncio.get_running_loop()
        while not self.closing and (self._write_paused or (empty and t.get_write_buffer_size() > 0)):  # type: ignore[union-attr]
            if self._write_paused:
                self._drain_waiter = loop.create_future()
                await self._drain_waiter
            else:
                await self._writable()

    async def _writable(self) -> None:
        loop = asyncio.get_running_loop()
        if self._dup_fd < 0:
            self._dup_fd = os.dup(self.transport.get_extra_info("socket").fileno())  # type: ignore[union-attr]
        fut = loop.create_future()
        fd = self._dup_fd

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(fd, ready)
        try:
            await fut
        finally:
            loop.remove_writer(fd)

    async def _sendfile(self, region: FileRegion) -> None:
        sock = self.transport.get_extra_info("socket")  # type: ignore[union-attr]
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
            data = region.read()
            if len(data) != region.length:  # (as sendfile's short read below: never half a frame)
                log.error("segment file ended early while sending a fetch response; closing %s", self.peer)
                self.abort()
                return
            self.transport.write(data)  # type: ignore[union-attr]
            return
        await self._wait_drained(True)
        fd = sock.fileno()
        offset, remaining = region.offset, region.length
        while remaining > 0 and not self.closing:
            try:
                sent = os.sendfile(fd, region.fd, offset, remaining)
            except BlockingIOError:
                await self._writable()
                continue
            except (BrokenPipeError, ConnectionResetError):
                self.abort()
                return
            if sent == 0:  # the file is shorter than the region: never leave a frame half-sent
                log.error("segment file ended early while sending a fetch response; closing %s", self.peer)
                self.abort()
                return
            offset += sent
            remaining -= sent


class _Parked:
    """A parked produce's place in its connection's answers (`KafkaConnection._park`)."""
    __slots__ = ("frame", "started", "arrived", "handled", "parts", "remote_s", "ready")

    def __init__(self, frame: Any, started: float, arrived: float | None) -> None:
        self.frame = frame
        self.started = started
        self.arrived = arrived
        self.handled = 0.0
        self.parts: list | None = None
        self.remote_s = 0.0
        self.ready = False
