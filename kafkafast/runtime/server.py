"""The single-process server: one event loop, one Broker, the listening socket.

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


def make_listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host or "0.0.0.0", port))
    sock.listen(1024)
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
        self.server = await loop.create_server(
            lambda: KafkaConnection(self.broker, max_req, tracker=self.connections), sock=self.sock)

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
    sock = make_listen_socket(listener.host, listener.port)
    if config.get("zookeeper.connect"):  # cluster mode (ZooKeeper): kafkafast/cluster
        from kafkafast.cluster.cluster_broker import ClusterBroker

        broker = ClusterBroker(config)
    else:
        broker = Broker(config)
    await broker.start()
    server = Server(broker, sock)
    await server.start()
    log.info("kafkafast broker %d listening on %s:%d, data in %s", broker.node_id,
             listener.host, sock.getsockname()[1], ",".join(config.log_dirs))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(sock.getsockname()[1])
    await stop.wait()
    log.info("shutting down")
    await server.stop()
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
