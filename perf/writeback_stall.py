"""The kernel's dirty-page throttling without a broker: three files written at a paced rate in
1 MiB writes, each write timed, with or without starting each 8 MiB's writeback early
(storage/writeback.py). `python -m perf.writeback_stall [--mb-per-s 240] [--seconds 15]`
prints, for plain writes then early writeback, the write p50/p99/max and the writes > 50 ms
(perf/results/cluster.md, "Appends that never wait on the page cache")."""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from kafkafast.storage.writeback import WRITEBACK_BYTES, start_writeback

CHUNK = 1 << 20


def run(directory: str, mb_per_s: float, seconds: float, early: bool) -> dict:
    data = os.urandom(CHUNK)
    paths = [os.path.join(directory, f"w{i}") for i in range(3)]
    fds = [os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644) for p in paths]
    written, kicked, lat = [0] * 3, [0] * 3, []
    start, n = time.perf_counter(), 0
    try:
        while time.perf_counter() - start < seconds:
            for i, fd in enumerate(fds):
                t = time.perf_counter()
                os.write(fd, data)
                lat.append(time.perf_counter() - t)
                n += 1
                written[i] += CHUNK
                if early and written[i] - kicked[i] >= WRITEBACK_BYTES:
                    start_writeback(fd, kicked[i], written[i] - kicked[i])
                    kicked[i] = written[i]
            pause = start + n / mb_per_s - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
    finally:
        for fd, p in zip(fds, paths):
            os.close(fd)
            os.unlink(p)
    lat.sort()
    return {"p50_ms": lat[len(lat) // 2] * 1e3, "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
            "max_ms": lat[-1] * 1e3, "over_50ms": sum(x > 0.05 for x in lat), "writes": len(lat)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.writeback_stall")
    ap.add_argument("--mb-per-s", type=float, default=240.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary dir)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for early in (False, True):
            r = run(d, args.mb_per_s, args.seconds, early)
            print(f"{'early writeback' if early else 'plain writes'}: p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} "
                  f"max {r['max_ms']:.1f} ms, {r['over_50ms']} of {r['writes']} writes > 50 ms", flush=True)
            time.sleep(3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
