"""What one Fetch answer costs to send on loopback TCP: a header write, a sendfile of the
records and a trailer write (how `KafkaConnection._send` sends a FileRegion) against one
pread and one gathered write (`sendmsg`), for a range of record sizes (issue 25, the leader
serving followers; perf/results/cluster.md has the numbers and the whole-cluster runs).

    python -m perf.answer_write [--answers 20000] [--rounds 3] [--sizes 4096,16384,65536,131072]

Reports CPU microseconds per answer, sender and receiver together (the receiver is a forked
process that drains the socket; on loopback part of the receive path runs in the sender's
system calls).
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile

HEADER = b"h" * 100
TRAILER = b"t" * 40


def one_run(mode: str, size: int, answers: int, fd: int) -> float:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    pid = os.fork()
    if pid == 0:
        c = socket.create_connection(srv.getsockname())
        buf = bytearray(1 << 20)
        while c.recv_into(buf):
            pass
        os._exit(0)
    s, _ = srv.accept()
    srv.close()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = os.times()
    for i in range(answers):
        off = (i % 4) * size
        if mode == "sendfile":
            s.sendall(HEADER)
            left, o = size, off
            while left:
                k = os.sendfile(s.fileno(), fd, o, left)
                o, left = o + k, left - k
            s.sendall(TRAILER)
        else:
            s.sendmsg([HEADER, os.pread(fd, size, off), TRAILER])
    s.close()
    os.waitpid(pid, 0)
    t1 = os.times()
    cpu = (t1.user - t0.user + t1.system - t0.system
           + t1.children_user - t0.children_user + t1.children_system - t0.children_system)
    return cpu / answers * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.answer_write")
    ap.add_argument("--answers", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="4096,16384,65536,131072")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(max(sizes) * 4))
        f.flush()
        for size in sizes:
            got: dict[str, list[float]] = {"sendfile": [], "pread": []}
            for _ in range(args.rounds):
                for mode in got:  # alternated
                    got[mode].append(one_run(mode, size, args.answers, f.fileno()))
            print(f"{size:>8} B: " + "; ".join(
                f"{mode} {statistics.median(v):.1f} us ({min(v):.1f}-{max(v):.1f})" for mode, v in got.items()),
                flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
