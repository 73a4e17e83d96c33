"""Connection limits of the broker, with Kafka's settings, counted broker-wide: in a
multi-worker broker the counts live in the shared counters area
(`runtime/shared_counters.py`), so every worker admits against the same totals.

Each listener's socket is served by an `Acceptor` (our own accept loop, so that accepting
can stop, as Kafka's Acceptor does), which asks `ConnectionLimits.admit` about every
connection it accepts:
* `max.connections` (all listeners but the inter-broker one, when there are several) and
  `listener.name.<listener>.max.connections`: at the limit the acceptor holds the
  connection it just accepted, stops accepting (further connections wait in the kernel's
  backlog) and tries again when one of its own connections closes and every
  ACCEPT_RETRY seconds (a slot freed by another worker), as Kafka's Acceptor blocks in
  `ConnectionQuotas.inc` until a slot is free. Connections on the inter-broker listener
  are not held back; while they take the broker over `max.connections`, each worker
  closes its least recently active connection on another listener once per sweep (Kafka's
  Processor closes one LRU connection per poll).
* `max.connections.per.ip` with `max.connections.per.ip.overrides` (`host:count,...`):
  a connection from an address that has its limit already is closed at once (Kafka's
  TooManyConnectionsException), after it got a max.connections slot, as in Kafka. When the
  shared per-IP table has no room for an address, each worker counts that address on its
  own against its share (the limit divided by the number of workers, rounded up).
* Connections still being set up - TLS handshake not finished, or on a SASL listener not
  yet authenticated - are "pending": at most `kafkafast.max.pending.connections` in the
  broker (default 512). Over it, a worker that holds more than its share (the cap divided
  by the number of workers, rounded up) closes its own oldest pending connections, when it
  accepts a new one and in its sweep; a worker below its share takes new ones, so new
  connections are never refused for it and the broker holds at most about the cap (at
  most N times the share). Each is closed if still pending
  `kafkafast.connection.setup.timeout.ms` (default 10 s) after it was accepted. So
  connections that never finish a handshake cost a bounded amount and cannot keep real
  clients out.
* `connections.max.idle.ms` (Kafka's default 10 minutes): a connection that neither sent
  nor received a byte for that long, and has no request in progress, is closed by a sweep
  that runs every tenth of the timeout (at most every 5 s, at least every 50 ms).
* `queued.max.requests` / `queued.max.request.bytes` are applied by the connections
  themselves (`KafkaConnection.queue_limits`).

A TLS handshake that fails reaches no protocol, only the acceptor (`_started`): one the
client's bytes made fail is counted in failed_authentication_total{listener}
(`handshake_refused`, as Kafka's SslAuthenticationException); a completed handshake is
counted by the connection (`KafkaConnection.connection_made`).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import Counter
from typing import Any, Callable

from kafkafast.broker.dynamic_configs import parse_overrides
from kafkafast.metrics import recorder as request_metrics
from kafkafast.runtime.connection import KafkaConnection
from kafkafast.runtime.shared_counters import ADMITTED, IP_REFUSED, IP_UNTRACKED, MAX_LISTENERS, WAIT, ip_key
from kafkafast.security.tls import server_context, store_stamp, with_dynamic_stores

LISTEN_BACKLOG = 1024  # each worker's listen() backlog (runtime/listening.py binds, the Acceptor listens)

log = logging.getLogger("kafkafast.limits")
INT_MAX = 2147483647
ACCEPT_RETRY = 0.05  # seconds between admission attempts while a listener is at its limit
ACCEPT_BATCH = 64  # connections accepted per readiness event


class Admission:
    """One accepted connection's share of the counters, given back exactly once."""

    __slots__ = ("listener", "entry", "local_ip", "pending", "accepted_at", "sock", "conn", "released")

    def __init__(self, listener: int, entry: int, pending: bool, accepted_at: float, sock: socket.socket) -> None:
        self.listener = listener
        self.entry = entry  # per-IP table entry, -1 if none
        self.local_ip: str | None = None  # counted per worker (the per-IP table was full)
        self.pending = pending
        self.accepted_at = accepted_at
        self.sock: socket.socket | None = sock  # until the connection is made
        self.conn: Any = None
        self.released = False


class ConnectionLimits:
    def __init__(self, config: Any, counters: Any, worker: int = 0, specs: list | None = None) -> None:
        get = config.get
        props = config.props
        self.counters = counters
        self.worker = worker
        self.workers = counters.workers
        self.max_connections = int(get("max.connections") or INT_MAX)
        self.per_ip = int(get("max.connections.per.ip") or INT_MAX)
        self.overrides = parse_overrides(get("max.connections.per.ip.overrides"))
        self.idle_ms = int(get("connections.max.idle.ms") or 600000)
        self.setup_ms = int(props.get("kafkafast.connection.setup.timeout.ms") or 10000)
        self.max_pending = int(props.get("kafkafast.max.pending.connections") or 512)
        specs = specs or []
        if len(specs) > MAX_LISTENERS:
            raise ValueError(f"at most {MAX_LISTENERS} listeners are supported")
        inter = (props.get("inter.broker.listener.name") or props.get("security.inter.broker.protocol")
                 or "PLAINTEXT").upper()
        self.listener_max = [int(s.props.get(f"listener.name.{s.name.lower()}.max.connections") or INT_MAX)
                             for s in specs]
        self.protected = [s.name == inter and len(specs) > 1 for s in specs]
        self.local_ip: Counter = Counter()  # addresses the shared table had no room for
        self.conns: set = set()
        self.activity = 0  # see touch()
        self.pending: dict[Admission, None] = {}  # oldest first
        self.acceptors: list[Acceptor] = []
        self.refresh: Callable[[], None] = lambda: None  # brings in dynamic configs before an admission
        self.refused = 0
        self.idle_closed = 0
        self.setup_closed = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        KafkaConnection.queue_limits = (int(get("queued.max.requests") or 500),
                                        int(get("queued.max.request.bytes") or -1))

    def reconfigure(self, values: dict[str, str | None]) -> None:
        """New connection quotas (dynamic broker configs), for connections admitted from now on:
        as in Kafka, lowering a cap closes none of the connections already open, and a listener
        paused at max.connections takes the raised limit at its next retry."""
        self.max_connections = int(values.get("max.connections") or INT_MAX)
        self.per_ip = int(values.get("max.connections.per.ip") or INT_MAX)
        self.overrides = parse_overrides(values.get("max.connections.per.ip.overrides"))

    def reload_tls(self, dynamic: dict[str, str]) -> None:
        """The TLS listeners' stores as the dynamic broker configs `dynamic` set them."""
        for acceptor in self.acceptors:
            if acceptor.ssl is not None:
                acceptor.reload_tls(dynamic)

    def now(self) -> float:
        return self._loop.time()  # type: ignore[union-attr]

    def touch(self) -> tuple[float, int]:
        """A connection's activity stamp: the loop time (for connections.max.idle.ms) and the
        next number of this worker's activity sequence (the least recently active connection
        is the one with the lowest: uvloop's time is in milliseconds and cached per loop
        iteration, so two connections active one after the other can have the same time)."""
        self.activity += 1
        return self._loop.time(), self.activity  # type: ignore[union-attr]

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.idle_ms > 0:
            self._tasks.append(self._loop.create_task(self._sweep_idle()))
        self._tasks.append(self._loop.create_task(self._sweep_setup()))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for acceptor in self.acceptors:
            acceptor.close()

    # -- admission ------------------------------------------------------------------------
    def admit(self, listener: int, spec: Any, sock: socket.socket, ip: str) -> Admission | None | int:
        """An Admission, None (refused: `sock` is closed) or WAIT (at a connection limit:
        the caller keeps `sock` and asks again later)."""
        self.refresh()
        if ip.startswith("::ffff:") and "." in ip:  # an IPv4 client of a dual-stack listener
            ip = ip[7:]
        cap = self.overrides.get(ip, self.per_ip)
        pending = spec.tls or spec.sasl
        result, entry = self.counters.reserve(
            self.worker, listener, max_total=self.max_connections, listener_max=self.listener_max[listener],
            protected=self.protected[listener], ip=ip_key(ip) if cap < INT_MAX else None, ip_cap=cap,
            pending=pending)
        if result == WAIT:
            return WAIT
        if result == IP_REFUSED:
            return self._refuse(sock, f"{ip} has {cap} connections (max.connections.per.ip)")
        adm = Admission(listener, entry, pending, self.now(), sock)
        if result == IP_UNTRACKED:
            if self.local_ip[ip] >= -(-cap // self.workers):
                self.counters.release(self.worker, listener, -1, pending)
                return self._refuse(sock, f"{ip} has its share of {cap} connections in this worker "
                                          "(max.connections.per.ip; the shared address table is full)")
            self.local_ip[ip] += 1
            adm.local_ip = ip
        if pending:
            self._trim_pending(keep=1)  # room for this one
            self.pending[adm] = None
        assert result in (ADMITTED, IP_UNTRACKED)
        return adm

    def _refuse(self, sock: socket.socket, why: str) -> None:
        self.refused += 1
        log.info("refusing a connection: %s", why)
        sock.close()
        return None

    def connected(self, conn: Any, adm: Admission) -> None:
        """The connection is made (its TLS handshake done): idle sweeps see it now."""
        adm.conn = conn
        adm.sock = None
        conn.admission = adm
        conn.last_active, conn.activity = self.touch()
        self.conns.add(conn)
        if adm.pending and not conn.listener.sasl:
            self.setup_done(adm)

    def setup_done(self, adm: Admission) -> None:
        """Handshake / authentication finished: no longer pending."""
        if adm.pending and not adm.released:
            adm.pending = False
            self.pending.pop(adm, None)
            self.counters.setup_done(self.worker)

    def release(self, adm: Admission) -> None:
        if adm.released:
            return
        adm.released = True
        self.pending.pop(adm, None)
        self.counters.release(self.worker, adm.listener, adm.entry, adm.pending)
        if adm.local_ip is not None:
            self.local_ip[adm.local_ip] -= 1
            if self.local_ip[adm.local_ip] <= 0:
                del self.local_ip[adm.local_ip]
        if adm.conn is not None:
            self.conns.discard(adm.conn)
        for acceptor in self.acceptors:  # a slot is free: an acceptor held back may go on
            acceptor.slot_freed()

    def _trim_pending(self, keep: int = 0) -> None:
        """While the broker has more than kafkafast.max.pending.connections pending (a new
        one, `keep`, already counted), this worker closes its own oldest pending connections down to
        its share (the cap divided by the number of workers, rounded up): a worker below its
        share keeps accepting, the ones above it make room."""
        share = -(-self.max_pending // self.workers)
        while self.pending and self.counters.pending() > self.max_pending and len(self.pending) + keep > share:
            self.setup_closed += 1
            self._close_pending(next(iter(self.pending)))

    def _close_pending(self, adm: Admission) -> None:
        self.setup_done(adm)  # counted out now: its socket closes a moment later
        if adm.conn is not None:
            adm.conn.abort()
        elif adm.sock is not None:
            try:  # the TLS handshake fails at once; the transport closes the socket
                adm.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- sweeps ---------------------------------------------------------------------------
    async def _sweep_idle(self) -> None:
        timeout = self.idle_ms / 1000.0
        interval = min(max(timeout / 10, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            cutoff = self.now() - timeout
            for conn in [c for c in self.conns if c.last_active < cutoff and not c.busy and not c.queue]:
                self.idle_closed += 1
                conn.abort()

    async def _sweep_setup(self) -> None:
        timeout = self.setup_ms / 1000.0
        interval = min(max(timeout / 4, 0.05), 1.0)
        while True:
            await asyncio.sleep(interval)
            cutoff = self.now() - timeout
            for adm in list(self.pending):
                if adm.accepted_at > cutoff:
                    break
                self.setup_closed += 1
                log.info("closing a connection still in TLS handshake or SASL authentication after %.1fs "
                         "(kafkafast.connection.setup.timeout.ms)", timeout)
                self._close_pending(adm)
            self._trim_pending()
            if self.counters.total() > self.max_connections:
                self._close_lru()

    def _close_lru(self) -> None:
        """Over max.connections because of inter-broker connections: the least recently
        active connection on another listener goes (Kafka's Processor does the same)."""
        victims = [c for c in self.conns if not c.closing and not self.protected[c.admission.listener]]
        if victims:
            min(victims, key=lambda c: c.activity).abort()


class Acceptor:
    """Accepts the connections of one listener in this process (see the module docstring)."""

    def __init__(self, limits: ConnectionLimits, index: int, spec: Any, sock: socket.socket,
                 factory: Callable[[], Any], ssl_context: Any) -> None:
        self.limits = limits
        self.index = index
        self.spec = spec
        self.sock = sock
        self.factory = factory
        self.ssl = ssl_context
        self.tls_stamp: tuple | None = None  # what self.ssl was made of (reload_tls)
        self.held: tuple[socket.socket, str] | None = None  # accepted, waiting for a slot
        self._retry: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self.closed = False
        self.tasks: set[asyncio.Task] = set()

    def reload_tls(self, dynamic: dict[str, str]) -> None:
        """Serves new connections with the listener's stores as this broker's dynamic configs
        now set them (`security/tls.py`), if they or their files changed; a store that no
        longer loads leaves the current context in place."""
        spec = with_dynamic_stores(self.spec, dynamic)
        stamp = store_stamp(spec)
        if stamp == self.tls_stamp:
            return
        if self.tls_stamp is not None or spec is not self.spec:
            try:
                self.ssl = server_context(spec)
            except ValueError as exc:
                log.error("listener %s keeps its current key and trust stores: %s", self.spec.name, exc)
                return
            log.info("listener %s: key and trust stores (re)loaded", self.spec.name)
        self.tls_stamp = stamp

    def start(self) -> None:
        self.sock.listen(LISTEN_BACKLOG)
        self._resume()

    def _resume(self) -> None:
        if not self._reading and not self.closed:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False

    def close(self) -> None:
        """Stops accepting (asyncio's Server.close: the listening socket is closed too)."""
        if self.closed:
            return
        self._pause()
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
        if self.held is not None:
            self.held[0].close()
            self.held = None
        self.sock.close()

    def _on_readable(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                s, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: back off instead of spinning
                log.warning("accept on %s failed: %s", self.spec.name, exc)
                self._pause()
                self._schedule_retry()
                return
            ip = addr[0] if isinstance(addr, tuple) and addr else ""
            if not self._try(s, ip):
                return

    def _try(self, s: socket.socket, ip: str) -> bool:
        """Admits and starts `s`; False if it has to wait for a slot (accepting paused)."""
        adm = self.limits.admit(self.index, self.spec, s, ip)
        if adm == WAIT:
            if self.held is None:
                log.info("listener %s at its connection limit (max.connections): accepting paused", self.spec.name)
            self.held = (s, ip)
            self._pause()
            self._schedule_retry()
            return False
        if adm is not None:
            self._start(s, adm, ip)  # type: ignore[arg-type]
        return True

    def _schedule_retry(self) -> None:
        if self._retry is None and not self.closed:
            self._retry = self._loop.call_later(ACCEPT_RETRY, self._retry_now)

    def slot_freed(self) -> None:
        if self.held is not None and not self.closed:
            self._loop.call_soon(self._retry_now)

    def _retry_now(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self.closed:
            return
        if self.held is not None:
            s, ip = self.held
            self.held = None
            if not self._try(s, ip):
                return
            log.info("listener %s below its connection limit again: accepting", self.spec.name)
        self._resume()
        self._on_readable()

    def _start(self, s: socket.socket, adm: Admission, ip: str) -> None:
        s.setblocking(False)
        conn = self.factory()
        conn.admission = adm
        if self.ssl is not None:
            coro = self._loop.connect_accepted_socket(lambda: conn, s, ssl=self.ssl,
                                                      ssl_handshake_timeout=self.limits.setup_ms / 1000.0)
        else:
            coro = self._loop.connect_accepted_socket(lambda: conn, s)
        task = self._loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._started(t, adm, ip))

    def _started(self, task: asyncio.Task, adm: Admission, ip: str) -> None:
        self.tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if task.cancelled() or exc is not None:  # the TLS handshake failed or timed out
            if adm.pending and handshake_refused(exc):  # not closed by us (setup timeout, pending cap)
                log.info("failed authentication with %s on %s (TLS handshake: %s)", ip, self.spec.name, exc)
                if request_metrics.active:
                    request_metrics.authentication(self.spec.name, False)
            adm.sock = None
            self.limits.release(adm)


def handshake_refused(exc: BaseException | None) -> bool:
    """A TLS handshake that failed on what the client sent - a certificate we do not trust
    or that expired, none where ssl.client.auth=required, no common protocol version or
    cipher, bytes that are not TLS, an alert from a client that refused us: Kafka's
    SslAuthenticationException, a failed authentication. A connection that ended or was
    reset mid-handshake without such an error (a bare connect and close, a port probe,
    half a ClientHello) is Kafka's EOFException / IOException: not an authentication."""
    return isinstance(exc, ssl.SSLError) and not isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
