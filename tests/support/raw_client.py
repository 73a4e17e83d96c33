"""A minimal blocking Kafka protocol client for tests that need exact control over bytes:
it sends frames built with the generated codecs (or raw bytes) and decodes responses."""
from __future__ import annotations

import socket
import struct

from kafkafast.protocol import api


class RawClient:
    def __init__(self, port: int, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0
        self.client_id = client_id

    @classmethod
    def on_socket(cls, sock: socket.socket, client_id: str = "raw-test") -> "RawClient":
        """A client over a socket the test connected itself (e.g. wrapped in TLS)."""
        c = cls.__new__(cls)
        c.sock, c.correlation, c.client_id = sock, 0, client_id
        return c

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """One response frame without its size prefix; None if the broker closed."""
        head = self._recv(4)
        if head is None:
            return None
        size = struct.unpack(">i", head)[0]
        return self._recv(size)

    def _recv(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return out

    def is_closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def request(self, req, version: int):
        self.correlation += 1
        self.sock.sendall(api.encode_request(req, version, self.correlation, self.client_id))
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError("broker closed the connection")
        corr, body = api.decode_response(req.API_KEY, version, frame)
        assert corr == self.correlation
        return body
