"""One TCP connection to one broker: framing, pipelining, version negotiation.

Requests are written as soon as they are made (pipelining); each carries a correlation id
and waits on a future that the read side completes when the frame with that id arrives.
At most `max_in_flight` requests wait for an answer at once; more wait for a slot.
Right after connecting, ApiVersions tells which versions the broker speaks, and
`version(api_key)` picks the highest one both sides support (`CLIENT_VERSIONS`).

A request that is not answered within `request_timeout_ms`, and a connection that drops,
fail every request waiting on the connection with a retriable `NetworkError` (Kafka
clients do the same: after a timeout the order of answers on the socket can no longer be
trusted) and close it; the cluster opens a new one on the next use.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any

from kafkafast.protocol import _generated as gen
from kafkafast.protocol._generated.headers import RequestHeader
from kafkafast.protocol.api import decode_response, request_header_version
from kafkafast.protocol.primitives import FileRegion, Writer
from kafkafast.protocol.errors import KafkaError, NetworkError, RequestTimedOutError, UnsupportedVersionError

logger = logging.getLogger("kafkafast.client")

# api key -> (lowest, highest) version this client implements.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 11),   # Produce (v3+: record batch v2)
    1: (4, 12),   # Fetch (v13+ addresses topics by id only)
    2: (1, 9),    # ListOffsets
    3: (1, 12),   # Metadata
    8: (2, 9),    # OffsetCommit
    9: (1, 9),    # OffsetFetch
    10: (0, 3),   # FindCoordinator (v4+ answers in a list of batched keys)
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    18: (0, 3),   # ApiVersions
    19: (0, 7),   # CreateTopics
    20: (0, 6),   # DeleteTopics
    22: (0, 5),   # InitProducerId
    24: (0, 3),   # AddPartitionsToTxn (v4+ is the brokers' batched form)
    25: (0, 4),   # AddOffsetsToTxn
    26: (0, 4),   # EndTxn
    28: (0, 4),   # TxnOffsetCommit
    32: (0, 4),   # DescribeConfigs
    37: (0, 3),   # CreatePartitions
}

_SIZE = struct.Struct(">i")
# Record sets at least this large are written from their own buffer, not copied into the frame.
_ZERO_COPY_RECORDS = 64 * 1024


class _FrameWriter(Writer):
    """A Writer that leaves large record sets (a producer's batches) as parts of their own."""

    __slots__ = ()

    def records(self, v: bytes | bytearray | memoryview | FileRegion | None, compact: bool) -> None:
        if v is None or isinstance(v, FileRegion) or len(v) < _ZERO_COPY_RECORDS:
            Writer.records(self, v, compact)
            return
        if compact:
            self.uvarint(len(v) + 1)
        else:
            self.int32(len(v))
        self.parts.append(self.buf)
        self.parts.append(v)
        self.buf = bytearray()


_FRAME_HEAD = struct.Struct(">ihhi")
_CLIENT_ID_TAILS: dict[tuple[str | None, int], bytes] = {}


def _client_id_tail(client_id: str | None, header_version: int) -> bytes:
    """RequestHeader v1/v2 after the correlation id: client_id (nullable string), v2's empty
    tagged fields; made once per client id."""
    tail = _CLIENT_ID_TAILS.get((client_id, header_version))
    if tail is None:
        w = Writer()
        w.nullable_string(client_id)
        if header_version >= 2:
            w.tagged_fields(None)
        tail = bytes(w.buf)
        if len(_CLIENT_ID_TAILS) < 1024:
            _CLIENT_ID_TAILS[(client_id, header_version)] = tail
    return tail


def encode_request_parts(request: Any, api_version: int, correlation_id: int,
                         client_id: str | None) -> list[bytes | bytearray | memoryview]:
    """A request frame (size prefix included) as parts for `writelines`: the same bytes as
    `kafkafast.protocol.api.encode_request`, without copying large record sets."""
    w = _FrameWriter()
    api_key = request.API_KEY
    header_version = request_header_version(api_key, api_version)
    if header_version:  # v1/v2: size, key, version, correlation id, then the client id's bytes (and v2's tags)
        w.buf += _FRAME_HEAD.pack(0, api_key, api_version, correlation_id)
        w.buf += _client_id_tail(client_id, header_version)
    else:
        w.int32(0)
        RequestHeader(request_api_key=api_key, request_api_version=api_version,
                      correlation_id=correlation_id, client_id=client_id).encode(w, header_version)
    request.encode(w, api_version)
    parts = w.finish()
    first = parts[0]
    assert isinstance(first, bytearray)
    first[0:4] = (sum(len(p) for p in parts) - 4).to_bytes(4, "big")  # type: ignore[arg-type]
    return parts  # type: ignore[return-value]


# Frames up to this size are cut out of the protocol's receive buffer; larger ones (fetch
# answers) are received straight into a buffer of their own size.
_SMALL_FRAME = 64 * 1024
_SCRATCH = 4 * _SMALL_FRAME
# the most a connection with a ReceiveBuffer asks the kernel to hold before it wakes the loop
# for the rest of a large frame (SO_RCVLOWAT; the kernel also wakes it when its receive
# buffer or window would not take that much, so the peer is never held up)
_LOWAT_MAX = 1 << 20


class ReceiveBuffer:
    """One buffer that a connection's large frames are received into, reused from frame to frame
    (a replica fetcher's: one Fetch in flight, whose answer is used up before the next arrives).

    `frame(size)` returns a view of `size` bytes of it. The buffer is allocated (and so
    zero-filled) only when it must grow, never per frame, and not reused while a view of the
    previous frame is still alive (a frame kept longer costs an allocation, never its bytes).
    A frame larger than `cap` gets a buffer of its own. Every `SHRINK_WINDOW` frames, a buffer
    more than four times the largest frame of that window is replaced by one twice that size,
    so one burst does not pin its memory for the connection's life.

    `landing()` lends the whole buffer to a read whose frame's size is not known yet (nothing
    is received on the connection), so that the read takes all the socket holds; a large frame
    that lands at its front is kept there in place (`landed`), its bytes never copied.
    """

    SHRINK_WINDOW = 256
    __slots__ = ("cap", "allocations", "_buf", "_count", "_window_max")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.allocations = 0  # buffers made (the test of reuse)
        self._buf = bytearray()
        self._count = 0
        self._window_max = 0

    @property
    def capacity(self) -> int:
        return len(self._buf)

    def _wanted(self, size: int) -> int:
        """Counts a frame of `size` into the window; the capacity the buffer should have."""
        if size > self._window_max:
            self._window_max = size
        self._count += 1
        want = len(self._buf)
        if self._count >= self.SHRINK_WINDOW:
            if want > 4 * self._window_max:
                want = 2 * self._window_max
            self._count = self._window_max = 0
        if size > want:  # (4 more: room for the size prefix in a landing)
            want = min(self.cap, max(size, 2 * want)) + 4
        return want

    def frame(self, size: int) -> memoryview:
        if size > self.cap:
            self.allocations += 1
            return memoryview(bytearray(size))
        want = self._wanted(size)
        buf = self._buf
        if want != len(buf) or not _unviewed(buf):
            buf = self._buf = bytearray(want)
            self.allocations += 1
        return memoryview(buf)[:size]

    def landing(self) -> memoryview | None:
        """The whole buffer for the next read, or None while a view of it is alive or it is
        smaller than a connection's scratch buffer (the first frames grow it through `frame`)."""
        buf = self._buf
        if len(buf) < _SCRATCH or not _unviewed(buf):
            return None
        return memoryview(buf)

    def landed(self, size: int) -> None:
        """A frame of `size` bytes was kept in place in a landing: counted into the window as
        `frame` counts, and the buffer replaced by a smaller one as `frame` replaces it."""
        want = self._wanted(size + 4)
        if want < len(self._buf):
            self._buf = bytearray(want)
            self.allocations += 1


def _unviewed(buf: bytearray) -> bool:
    """No view of `buf` is alive (resizing a bytearray fails while one is)."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


class _FrameProtocol(asyncio.BufferedProtocol):
    """Reads size-prefixed frames and hands each to the connection.

    The transport receives into `_scratch`, where small frames are cut out as bytes; once
    a frame's size prefix says it is larger than `_SMALL_FRAME`, the rest of it is received
    directly into a buffer of its size, which is handed over as it is: a bytearray of its own,
    or a view of the connection's `ReceiveBuffer` when it has one (no allocation per frame).
    With a `ReceiveBuffer`, a read that starts a frame lands in that buffer when it is free
    (`ReceiveBuffer.landing`) rather than in `_scratch`: one read takes a large answer the socket
    holds whole, which stays where it landed; small frames and a partial one's bytes are moved
    to `_scratch` as if read there. While the rest of a large frame is on its way, the socket's
    SO_RCVLOWAT is that rest (at most `_LOWAT_MAX`): the loop is woken for it once, not for
    each 64 KiB segment as the peer sends it (plain TCP only: under TLS the socket's bytes are
    not the frame's).
    """

    __slots__ = ("_conn", "_scratch", "_view", "_start", "_end", "_frame", "_got", "_reuse", "_landing", "_sock",
                 "_lowat", "transport")

    def __init__(self, conn: BrokerConnection, reuse: ReceiveBuffer | None = None) -> None:
        self._conn = conn
        self._scratch = bytearray(_SCRATCH)
        self._view = memoryview(self._scratch)
        self._start = 0  # unconsumed bytes of _scratch: [_start, _end)
        self._end = 0
        self._frame: bytearray | memoryview | None = None  # a large frame being received, _got bytes so far
        self._got = 0
        self._reuse = reuse
        self._landing: memoryview | None = None  # the ReceiveBuffer lent to the read in progress
        self._sock: Any = None  # the socket whose SO_RCVLOWAT follows a large frame's rest
        self._lowat = 1
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self._reuse is not None and transport.get_extra_info("sslcontext") is None:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                self._sock = sock

    def _wake_at(self, lowat: int) -> None:
        """Sets SO_RCVLOWAT (a failure leaves the default: woken for every byte)."""
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
        except OSError:
            self._sock = None
            return
        self._lowat = lowat

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._got:]
        if self._end == 0 and self._reuse is not None:
            self._landing = None  # (a read that found nothing does not call buffer_updated)
            land = self._landing = self._reuse.landing()
            if land is not None:
                return land
        if self._end == _SCRATCH:  # move the partial frame to the front
            n = self._end - self._start
            self._scratch[:n] = self._view[self._start:self._end]
            self._start, self._end = 0, n
        return self._view[self._end:]

    def _large(self, size: int) -> bytearray | memoryview:
        return bytearray(size) if self._reuse is None else self._reuse.frame(size)

    def buffer_updated(self, nbytes: int) -> None:
        frame = self._frame
        if frame is not None:
            self._got += nbytes
            if self._got == len(frame):
                self._frame = None
                if self._lowat != 1:
                    self._wake_at(1)
                self._conn._on_frame(frame)
            elif self._sock is not None:
                self._wait_for_rest()
            return
        land = self._landing
        if land is not None:
            self._landing = None
            start = self._cut(land, 0, nbytes, True)
            if start < nbytes:  # a small frame's first bytes (no more than _SCRATCH): on to _scratch
                n = nbytes - start
                self._scratch[:n] = land[start:nbytes]
                self._start, self._end = 0, n
        else:
            self._end += nbytes
            start = self._start = self._cut(self._view, self._start, self._end, False)
            if start == self._end:
                self._start = self._end = 0
        if self._frame is not None and self._sock is not None:
            self._wait_for_rest()

    def _wait_for_rest(self) -> None:
        frame = self._frame
        assert frame is not None
        lowat = min(len(frame) - self._got, _LOWAT_MAX)
        if lowat != self._lowat:
            self._wake_at(lowat)

    def _cut(self, view: memoryview, start: int, end: int, landed: bool) -> int:
        """Hands over the whole frames of view[start:end] and starts receiving a large partial
        one (then returns `end`); returns where the bytes not used yet start. A large frame at
        the front of a landing (`landed`) that fits in it is kept there."""
        conn = self._conn
        while end - start >= 4:
            size = _SIZE.unpack_from(view, start)[0]
            if size > _SMALL_FRAME:
                have = end - start - 4
                whole: bytearray | memoryview
                if landed and start == 0 and size + 4 <= len(view):
                    whole = view[4:4 + size]
                    self._reuse.landed(size)  # type: ignore[union-attr]
                else:
                    whole = self._large(size)
                    whole[:min(have, size)] = view[start + 4:start + 4 + min(have, size)]
                if have >= size:
                    start += 4 + size
                    conn._on_frame(whole)
                    continue
                self._frame, self._got = whole, have
                return end
            if end - start - 4 < size:
                return start
            conn._on_frame(bytes(view[start + 4:start + 4 + size]))
            start += 4 + size
        return start

    def connection_lost(self, exc: Exception | None) -> None:
        self._landing = None
        self._conn._on_lost(exc)


class BrokerConnection:
    """A pipelined connection to `host:port` (`node_id` -1 for a bootstrap address)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "kafkafast",
        max_in_flight: int = 5,
        request_timeout_ms: int = 30000,
        security: Any = None,
        receive_buffer: ReceiveBuffer | None = None,
    ) -> None:
        self.host = host
        # large answers received into this reused buffer (each valid until the next): for a caller
        # with one request in flight that is done with an answer before it sends the next
        self.receive_buffer = receive_buffer
        # TLS context and SASL exchange (kafkafast.security.client.InterBrokerSecurity), or None
        self.security = security
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000.0
        self.max_in_flight = max_in_flight
        self.versions: dict[int, tuple[int, int]] = {}
        self._chosen: dict[int, int] = {}
        self._protocol: _FrameProtocol | None = None
        self._transport: asyncio.Transport | None = None
        # correlation id -> (future, api key, api version, timeout handle)
        self._pending: dict[int, tuple[asyncio.Future, int, int, asyncio.TimerHandle | None]] = {}
        self._next_id = 1
        self._slots: asyncio.Semaphore | None = None
        self.closed = False
        self.loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection(node={self.node_id}, {self.host}:{self.port})"

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self, timeout: float | None = None) -> BrokerConnection:
        self.loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self.max_in_flight)
        try:
            tls = self.security.ssl_context if self.security is not None else None
            transport, protocol = await asyncio.wait_for(
                self.loop.create_connection(lambda: _FrameProtocol(self, self.receive_buffer), self.host, self.port, ssl=tls,
                                            server_hostname=self.host if tls is not None else None),
                timeout or self.request_timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            self.closed = True
            raise NetworkError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        self._transport = transport  # type: ignore[assignment]
        self._protocol = protocol
        await self._negotiate()
        if self.security is not None:
            await self._authenticate(self.security.exchange())
        return self

    async def _authenticate(self, exchange: Any) -> None:
        """Runs a SASL exchange (a generator of (request, version) sent the answers)."""
        if exchange is None:
            return
        step = next(exchange)
        try:
            while True:
                answer = await self.send(step[0], version=step[1])
                step = exchange.send(answer)
        except StopIteration:
            return
        except Exception:
            self.close()
            raise

    async def _negotiate(self) -> None:
        req = gen.ApiVersionsRequest(client_software_name="kafkafast", client_software_version="0.1")
        try:
            resp = await self.send(req, version=3)
        except UnsupportedVersionError:
            resp = None
        if resp is None or resp.error_code:
            # Old brokers answer an unknown version with error 35 and a v0 body; ask in v0.
            resp = await self.send(gen.ApiVersionsRequest(), version=0)
            if resp.error_code:
                raise KafkaError(f"ApiVersions failed with error {resp.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int) -> int:
        """Highest version of `api_key` both this client and the broker speak."""
        v = self._chosen.get(api_key)
        if v is not None:
            return v
        lo, hi = CLIENT_VERSIONS[api_key]
        blo, bhi = self.versions.get(api_key, (0, -1))
        v = min(hi, bhi)
        if v < max(lo, blo):
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} speaks {gen.API_NAMES.get(api_key, api_key)} "
                f"v{blo}-{bhi}, this client v{lo}-{hi}"
            )
        self._chosen[api_key] = v
        return v

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
            return True
        except UnsupportedVersionError:
            return False

    async def send(self, request: Any, *, version: int | None = None, expect_response: bool = True,
                   timeout: float | None = None) -> Any:
        """Sends `request` and returns the decoded response body (None if none is expected).

        Raises the typed error of a top-level failure only for transport problems
        (`NetworkError`); error codes inside the body are the caller's to interpret.
        """
        if version is None:
            version = self.version(request.API_KEY)
        if not expect_response:
            self.send_oneway(request, version)
            return None
        frame = await self.send_frame(request, version=version, timeout=timeout)
        return decode_response(request.API_KEY, version, frame)[1]

    async def send_frame(self, request: Any, *, version: int | None = None,
                         timeout: float | None = None) -> bytes | bytearray | memoryview:
        """Sends `request` and returns its answer's frame undecoded (correlation id first; with
        a `receive_buffer`, a large one is a view valid until the next answer arrives)."""
        if self.closed:
            raise NetworkError(f"connection to {self.host}:{self.port} is closed")
        api_key = request.API_KEY
        if version is None:
            version = self.version(api_key)
        slots = self._slots
        assert slots is not None
        await slots.acquire()
        try:
            if self.closed:
                raise NetworkError(f"connection to {self.host}:{self.port} is closed")
            return await self._start(request, api_key, version, timeout)
        finally:
            slots.release()

    def send_nowait(self, request: Any, version: int | None = None) -> asyncio.Future:
        """Writes `request` now, ignoring the in-flight limit; the future gets the raw frame.

        For callers that keep their own count of requests in flight (the producer's sender).
        """
        if self.closed:
            raise NetworkError(f"connection to {self.host}:{self.port} is closed")
        if version is None:
            version = self.version(request.API_KEY)
        return self._start(request, request.API_KEY, version)

    def send_oneway(self, request: Any, version: int | None = None) -> None:
        """Writes a request the broker does not answer (Produce with acks=0)."""
        if self.closed:
            raise NetworkError(f"connection to {self.host}:{self.port} is closed")
        if version is None:
            version = self.version(request.API_KEY)
        self._write(encode_request_parts(request, version, self._take_id(), self.client_id))

    def _take_id(self) -> int:
        cid = self._next_id
        self._next_id = (cid + 1) & 0x7FFFFFFF
        return cid

    def _start(self, request: Any, api_key: int, version: int, timeout: float | None = None) -> asyncio.Future:
        loop = self.loop
        assert loop is not None
        cid = self._take_id()
        data = encode_request_parts(request, version, cid, self.client_id)
        fut = loop.create_future()
        timer = loop.call_later(timeout or self.request_timeout, self._timed_out, cid)
        self._pending[cid] = (fut, api_key, version, timer)
        try:
            self._write(data)
        except NetworkError:
            fut.exception()  # failed with the connection (e.g. a TLS peer that refused our certificate): the
            raise            # caller gets the raise, so the future is not reported as never retrieved
        return fut

    def _write(self, parts: list[bytes | bytearray | memoryview]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            self.close(NetworkError(f"connection to {self.host}:{self.port} is closed"))
            raise NetworkError(f"connection to {self.host}:{self.port} is closed")
        for part in parts:  # write() sends at once when it can; writelines() may join the parts first
            transport.write(part)

    def _on_frame(self, frame: bytes | bytearray | memoryview) -> None:
        cid = _SIZE.unpack_from(frame, 0)[0]
        entry = self._pending.pop(cid, None)
        if entry is None:
            logger.warning("%r: answer with unknown correlation id %d", self, cid)
            return
        fut, _api_key, _version, timer = entry
        if timer is not None:
            timer.cancel()
        if not fut.done():
            fut.set_result(frame)

    def _timed_out(self, cid: int) -> None:
        entry = self._pending.get(cid)
        if entry is None:
            return
        self.close(RequestTimedOutError(
            f"no answer from {self.host}:{self.port} in time "
            f"({gen.API_NAMES.get(entry[1], entry[1])})"
        ))

    def _on_lost(self, exc: Exception | None) -> None:
        self.close(NetworkError(f"connection to {self.host}:{self.port} lost: {exc!r}"))

    def close(self, exc: Exception | None = None) -> None:
        """Closes the socket and fails every request still waiting (NetworkError by default)."""
        if not self.closed:
            self.closed = True
        if self._transport is not None:
            self._transport.abort() if exc is not None else self._transport.close()
            self._transport = None
        pending, self._pending = self._pending, {}
        err = exc or NetworkError(f"connection to {self.host}:{self.port} closed")
        for fut, _k, _v, timer in pending.values():
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.set_exception(type(err)(str(err)) if isinstance(err, KafkaError) else err)

    def decode(self, api_key: int, version: int, frame: bytes) -> Any:
        return decode_response(api_key, version, frame)[1]


__all__ = ["BrokerConnection", "CLIENT_VERSIONS", "ReceiveBuffer"]
