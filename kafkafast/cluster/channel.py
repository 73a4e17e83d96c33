"""The controller's connections to the brokers (Kafka's `ControllerChannelManager`).

One sender thread per live broker, each with its own queue and blocking socket, so a slow
or stopped broker delays only its own requests. A request is retried (reconnecting, with
a short backoff) until it is answered or its broker is removed; a response is handed to
the request's callback on the sender thread. Connections are made as the inter-broker
listener says (`security`: TLS context and SASL exchange, kafkafast/security/client.py).
"""
from __future__ import annotations

import logging
import queue
import socket
import struct
import threading
from typing import Any, Callable

from kafkafast.protocol import api

log = logging.getLogger("kafkafast.controller.channel")
RETRY_BACKOFF = 0.2


class BrokerSender:
    def __init__(self, broker_id: int, host: str, port: int, client_id: str, timeout_s: float,
                 security: Any = None) -> None:
        self.broker_id = broker_id
        self.security = security
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.queue: "queue.Queue[tuple[Any, int, Callable[[Any], None] | None] | None]" = queue.Queue()
        self.stopped = threading.Event()
        self._sock: socket.socket | None = None
        self._cid = 0
        self.thread = threading.Thread(target=self._run, name=f"controller-to-broker-{broker_id}", daemon=True)
        self.thread.start()

    def send(self, request: Any, version: int, callback: Callable[[Any], None] | None = None) -> None:
        self.queue.put((request, version, callback))

    def stop(self) -> None:
        self.stopped.set()
        self.queue.put(None)

    def _run(self) -> None:
        while not self.stopped.is_set():
            item = self.queue.get()
            if item is None:
                break
            request, version, callback = item
            while not self.stopped.is_set():
                try:
                    response = self._round_trip(request, version)
                except OSError as exc:
                    log.info("request to broker %d failed (%s); retrying", self.broker_id, exc)
                    self._close()
                    self.stopped.wait(RETRY_BACKOFF)
                    continue
                if callback is not None:
                    try:
                        callback(response)
                    except Exception:
                        log.exception("controller callback failed")
                break
        self._close()

    def _round_trip(self, request: Any, version: int) -> Any:
        if self._sock is None:
            self._sock = self._connect()
        return self._exchange(request, version)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.security is None:
            return sock
        try:
            if self.security.ssl_context is not None:
                sock = self.security.ssl_context.wrap_socket(sock, server_hostname=self.host)
            self._sock = sock
            exchange = self.security.exchange()
            if exchange is not None:
                step = next(exchange)
                try:
                    while True:
                        step = exchange.send(self._exchange(*step))
                except StopIteration:
                    pass
        except Exception as exc:
            sock.close()
            self._sock = None
            raise OSError(f"cannot authenticate to broker {self.broker_id}: {exc}") from exc
        return sock

    def _exchange(self, request: Any, version: int) -> Any:
        assert self._sock is not None
        self._cid = (self._cid + 1) & 0x7FFFFFFF
        self._sock.sendall(api.encode_request(request, version, self._cid, self.client_id))
        size = struct.unpack(">i", self._recv(4))[0]
        if size < 4 or size > 100 * 1024 * 1024:
            raise OSError(f"bad response size {size}")
        correlation_id, body = api.decode_response(request.API_KEY, version, self._recv(size))
        if correlation_id != self._cid:
            raise OSError("correlation id mismatch")
        return body

    def _recv(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
        return bytes(buf)

    def _close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None


class ControllerChannel:
    def __init__(self, client_id: str, timeout_ms: int, security: Any = None) -> None:
        self.client_id = client_id
        self.security = security
        self.timeout_s = timeout_ms / 1000.0
        self.senders: dict[int, BrokerSender] = {}

    def add(self, broker_id: int, host: str, port: int) -> None:
        old = self.senders.get(broker_id)
        if old is not None and (old.host, old.port) == (host, port):
            return
        if old is not None:
            old.stop()
        self.senders[broker_id] = BrokerSender(broker_id, host, port, self.client_id, self.timeout_s, self.security)

    def remove(self, broker_id: int) -> None:
        sender = self.senders.pop(broker_id, None)
        if sender is not None:
            sender.stop()

    def send(self, broker_id: int, request: Any, version: int, callback: Callable[[Any], None] | None = None) -> None:
        sender = self.senders.get(broker_id)
        if sender is not None:
            sender.send(request, version, callback)

    def close(self) -> None:
        for b in list(self.senders):
            self.remove(b)
