"""The machine's ceilings, measured in the same run as the brokers:

* loopback TCP: one process sends 1 MiB buffers over 127.0.0.1, another receives;
* loopback `os.sendfile` from a page-cached file (the ceiling for consume);
* sequential 1 MiB writes to the data directory, without and with `fdatasync` after each
  write (the ceilings for produce that trusts the page cache and for durable produce).
"""
from __future__ import annotations

import os
import socket
import time
from multiprocessing import get_context

CHUNK = 1 << 20


def _drain(port: int, ready) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    ready.set()
    conn, _ = srv.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while conn.recv_into(view):
        pass
    conn.close()
    srv.close()


def _with_receiver(send) -> float:
    """Runs `send(sock)` against a receiver process; returns bytes/s."""
    from perf.brokers import free_port

    ctx = get_context("fork")
    port = free_port()
    ready = ctx.Event()
    proc = ctx.Process(target=_drain, args=(port, ready))
    proc.start()
    ready.wait(10)
    s = socket.create_connection(("127.0.0.1", port))
    try:
        t0 = time.perf_counter()
        nbytes = send(s)
        s.shutdown(socket.SHUT_WR)
        proc.join(30)
        return nbytes / (time.perf_counter() - t0)
    finally:
        s.close()
        if proc.is_alive():
            proc.kill()


def loopback_tcp(total: int) -> float:
    data = os.urandom(CHUNK)

    def send(s: socket.socket) -> int:
        sent = 0
        while sent < total:
            s.sendall(data)
            sent += len(data)
        return sent

    return _with_receiver(send)


def loopback_sendfile(path: str, total: int) -> float:
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, CHUNK):  # page cache
            pass

        def send(s: socket.socket) -> int:
            sent = 0
            out = s.fileno()
            while sent < total:
                off = 0
                while off < size:
                    n = os.sendfile(out, fd, off, size - off)
                    off += n
                sent += size
            return sent

        return _with_receiver(send)
    finally:
        os.close(fd)


def sequential_write(directory: str, total: int, *, sync: bool) -> float:
    path = os.path.join(directory, "ceiling-write.bin")
    data = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        written = 0
        while written < total:
            written += os.write(fd, data)
            if sync:
                os.fdatasync(fd)
        return written / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def measure(directory: str, total: int) -> dict:
    os.makedirs(directory, exist_ok=True)
    src = os.path.join(directory, "ceiling-sendfile.bin")
    with open(src, "wb") as fh:
        for _ in range(max(1, min(total, 64 << 20) // CHUNK)):
            fh.write(os.urandom(CHUNK))
    try:
        return {
            "loopback_tcp_Bps": loopback_tcp(total),
            "loopback_sendfile_Bps": loopback_sendfile(src, total),
            "seq_write_Bps": sequential_write(directory, total, sync=False),
            "seq_write_fdatasync_Bps": sequential_write(directory, max(total // 4, CHUNK), sync=True),
        }
    finally:
        os.unlink(src)
