"""The single-process server: one event loop, one Broker, the listening socket.

The listener's address is taken at start (`take_listener`: refused if another broker
serves it) and listened on only once the broker has loaded, so no connection waits
unserved while the logs are opened.

`run_server(config)` serves until SIGTERM/SIGINT, then shuts down gracefully: it stops
accepting, lets requests in flight finish (up to SHUTDOWN_GRACE seconds), flushes every
log, writes the clean-shutdown markers and returns 0. The multi-process supervisor reuses
`serve()` in each worker.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
from typing import Any

from kafkafast.broker.broker import Broker
from kafkafast.config import BrokerConfig
from kafkafast.runtime.connection import KafkaConnection

log = logging.getLogger("kafkafast.server")
SHUTDOWN_GRACE = 5.0


LISTEN_BACKLOG = 1024


class ListenerError(OSError):
    """The listener's address cannot be taken (in use, or by another kafkafast broker)."""


def take_listener(host: str, port: int, count: int = 1) -> tuple[socket.socket, list[socket.socket]]:
    """`count` sockets bound to host:port (SO_REUSEPORT when more than one) but not
    listening: whoever serves one calls listen() when it can serve, and until then the
    kernel refuses connections to it (and routes none to it) instead of queueing them where
    nothing accepts. Port 0 takes a free port. Returns them with the lock of `claim_listener`,
    to be kept open as long as the broker serves."""
    lock = claim_listener(host, port) if port else None
    first = make_listen_socket(host, port, reuse_port=count > 1, listen=False)
    port = first.getsockname()[1]
    if lock is None:
        lock = claim_listener(host, port, probe=False)  # a port the kernel just gave out
    socks = [first] + [make_listen_socket(host, port, reuse_port=True, listen=False) for _ in range(count - 1)]
    return lock, socks


def claim_listener(host: str, port: int, *, probe: bool = True) -> socket.socket:
    """Makes sure no other broker serves host:port and keeps it that way while the returned
    lock lives (in this process or its workers). SO_REUSEPORT lets a second kafkafast bind
    the port of a running one, and the kernel would then share connections between the two
    (those queued at the one that stops are reset), so this refuses, as Kafka does:
    * a probe bind without SO_REUSEPORT fails if anything listens on an overlapping address;
    * an abstract Unix socket named after host:port catches a kafkafast broker that is
      starting (its sockets are bound but not listening yet)."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind(f"\0kafkafast-listener-{host}:{port}")
        if probe:
            make_listen_socket(host, port, listen=False).close()
    except OSError as exc:
        lock.close()
        if isinstance(exc, ListenerError):
            raise
        raise ListenerError(exc.errno, f"cannot listen on {host}:{port}: another kafkafast broker is "
                                       "using it") from None
    return lock


def make_listen_socket(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket bound to host:port, listening unless listen=False."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host or "0.0.0.0", port))
        if listen:
            sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ListenerError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


class Server:
    def __init__(self, broker: Broker, sock: socket.socket) -> None:
        self.broker = broker
        self.sock = sock
        self.connections: set[KafkaConnection] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        max_req = self.broker.config.get_int("socket.request.max.bytes")
        self.server = await loop.create_server(  # listen() happens here, once the broker is started
            lambda: KafkaConnection(self.broker, max_req, tracker=self.connections), sock=self.sock,
            backlog=LISTEN_BACKLOG)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE
        while any(c.busy or c.queue for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for c in list(self.connections):
            c.abort()
        await self.broker.stop()


async def serve_forever(config: BrokerConfig, *, ready: Any = None) -> int:
    listener = config.listeners()[0]
    lock, (sock,) = take_listener(listener.host, listener.port)  # taken now, listened on once started
    stop = asyncio.Event()  # a SIGTERM while the logs load stops the broker cleanly too
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(config)
    await broker.start()
    server = Server(broker, sock)
    if not stop.is_set():
        await server.start()
        log.info("kafkafast broker %d listening on %s:%d, data in %s", broker.node_id,
                 listener.host, sock.getsockname()[1], ",".join(config.log_dirs))
        if ready is not None:
            ready(sock.getsockname()[1])
        await stop.wait()
    log.info("shutting down")
    await server.stop()
    lock.close()
    return 0


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.new_event_loop()


def run_server(config: BrokerConfig) -> int:
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(serve_forever(config))
    finally:
        loop.close()
