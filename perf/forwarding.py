"""The cost of a produce reaching a worker that does not own the partition.

    python -m perf.forwarding [--requests 2000] [--modes forward,shared] [--out perf/results/forwarding.json]

Starts kafkafast with 2 workers, finds (with psutil) one connection served by the
partition's owner and one served by the other worker, and sends the same Produce
requests (acks=1, one batch each) one at a time over both: the difference in
request->response time is what the non-owner adds; the ratio of the throughputs is what it
costs a producer that waits for each answer. Also reports the CPU both workers spent per
request; the owner's and the non-owner's requests are interleaved in chunks of 100,
alternating which goes first. Each mode is one broker, run one after the other in the same
invocation:
`forward` (`kafkafast.produce.shared.append=false`: the non-owner forwards the partition
to the owner over its Unix socket, the hop of encode, both ways and the owner's handling of
a second frame) and `shared` (the default: the non-owner appends itself through the
partition's append lock in shared memory, issue 17).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import psutil

from kafkafast.protocol import api
from kafkafast.protocol._generated.create_topics import CreateTopicsRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records import encode_batch
from kafkafast.runtime.shm import owner_for
from perf.brokers import Kafkafast


class Conn:
    """One plain socket to a broker, one request at a time."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def request(self, req, version: int):
        self.corr += 1
        self.sock.sendall(api.encode_request(req, version, self.corr, "fwd-bench"))
        size = struct.unpack(">i", self._recv(4))[0]
        return api.decode_response(req.API_KEY, version, self._recv(size))[1]

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)


def serving_pid(workers: list[int], broker_port: int, conn: Conn) -> int | None:
    port = conn.sock.getsockname()[1]
    for pid in workers:
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.raddr and c.raddr.port == port and c.laddr.port == broker_port:
                return pid
    return None


def cpu(pids: list[int]) -> float:
    return sum(sum(psutil.Process(p).cpu_times()[:2]) for p in pids)


MODES = {"forward": "false", "shared": "true"}


def measure(requests: int, record_sizes: tuple[int, ...], records_per_batch: int, mode: str = "shared") -> dict:
    with tempfile.TemporaryDirectory(prefix="kafkafast-fwd-") as tmp:
        b = Kafkafast(Path(tmp), 2, {"kafkafast.produce.shared.append": MODES[mode]})
        b.start()
        try:
            workers = sorted(p.pid for p in psutil.Process(b.proc.pid).children())
            conns: dict[int, Conn] = {}
            for _ in range(200):
                c = Conn(b.port)
                time.sleep(0.01)
                pid = serving_pid(workers, b.port, c)
                if pid is not None and pid not in conns:
                    conns[pid] = c
                if len(conns) == 2:
                    break
            any_conn = next(iter(conns.values()))
            any_conn.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="fwd", num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=5000), 7)
            owner_index = owner_for("fwd", 0, 2)
            # worker index i was forked i-th: the lower pid is worker 0 unless one was respawned
            owner_pid = workers[owner_index]
            other_pid = [p for p in workers if p != owner_pid][0]
            out = {"mode": mode, "workers": workers, "owner_pid": owner_pid, "requests": requests,
                   "records_per_batch": records_per_batch, "sizes": []}
            for size in record_sizes:
                batch = encode_batch([(int(time.time() * 1000), None, b"x" * size, [])
                                      for _ in range(records_per_batch)])
                req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
                    name="fwd", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
                row = {"record_size": size, "batch_bytes": len(batch)}
                targets = (("local", owner_pid), ("forwarded", other_pid))
                for _, pid in targets:
                    for _ in range(min(200, requests // 5)):  # warm-up
                        conns[pid].request(req, 9)
                # Interleaved in chunks, alternating which goes first, so neither pays more of the
                # page cache's writeback (or of the neighbours' load) than the other.
                times: dict[str, list[float]] = {label: [] for label, _ in targets}
                wall = dict.fromkeys(times, 0.0)
                cpu_s = dict.fromkeys(times, 0.0)
                chunk = max(1, min(100, requests // 10))
                for k in range(0, requests, chunk):
                    for label, pid in (targets if (k // chunk) % 2 == 0 else targets[::-1]):
                        c = conns[pid]
                        cpu0 = cpu(workers)
                        t0 = time.perf_counter()
                        for _ in range(min(chunk, requests - k)):
                            t = time.perf_counter()
                            r = c.request(req, 9)
                            times[label].append(time.perf_counter() - t)
                            assert r.responses[0].partition_responses[0].error_code == 0
                        wall[label] += time.perf_counter() - t0
                        cpu_s[label] += cpu(workers) - cpu0
                for label, _ in targets:
                    ts = sorted(times[label])
                    row[label] = {"p50_us": ts[len(ts) // 2] * 1e6, "p99_us": ts[int(len(ts) * 0.99)] * 1e6,
                                  "mean_us": statistics.fmean(ts) * 1e6,
                                  "MB_per_s": requests * len(batch) / wall[label] / 1e6,
                                  "broker_cpu_us_per_request": cpu_s[label] / requests * 1e6}
                row["hop_p50_us"] = row["forwarded"]["p50_us"] - row["local"]["p50_us"]
                row["throughput_ratio"] = row["forwarded"]["MB_per_s"] / row["local"]["MB_per_s"]
                row["cpu_ratio"] = row["forwarded"]["broker_cpu_us_per_request"] / max(row["local"]["broker_cpu_us_per_request"], 1e-9)
                out["sizes"].append(row)
                print(f"{mode:>7} {size:>7} B x {records_per_batch}: local p50 {row['local']['p50_us']:.0f} us, "
                      f"forwarded p50 {row['forwarded']['p50_us']:.0f} us (hop {row['hop_p50_us']:.0f} us), "
                      f"throughput x{row['throughput_ratio']:.2f}, broker CPU x{row['cpu_ratio']:.2f}", flush=True)
            return out
        finally:
            b.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.forwarding")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--records-per-batch", type=int, default=10)
    ap.add_argument("--sizes", default="100,1024,16384,102400")
    ap.add_argument("--modes", default="forward,shared", help="comma-separated: forward, shared")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    runs = [measure(args.requests, sizes, args.records_per_batch, mode) for mode in args.modes.split(",")]
    res = {"runs": runs, "requests": args.requests, "records_per_batch": args.records_per_batch}
    res["command"] = "python -m perf.forwarding " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps(res, indent=1))
        out.with_suffix(".md").write_text(markdown(res))
    return 0


def markdown(res: dict) -> str:
    lines = ["# Produce at a non-owning worker (2 workers)", "",
             f"Command: `{res['command']}`. One Produce request (acks=1, one batch of "
             f"{res['records_per_batch']} records) at a time, {res['requests']} requests per row (interleaved in "
             "chunks of 100, alternating which goes first), over a "
             "connection served by the partition's owner (owner) and one served by the other worker "
             "(non-owner). Mode `forward`: the non-owner forwards to the owner over its Unix socket "
             "(`kafkafast.produce.shared.append=false`); `shared`: it appends itself through the "
             "partition's append lock in shared memory (the default). Broker CPU: both workers, per request.", "",
             "| mode | record size | batch bytes | owner p50 us | non-owner p50 us | added p50 us | owner p99 us "
             "| non-owner p99 us | non-owner/owner throughput | broker CPU us/request owner | non-owner "
             "| CPU ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in res["runs"]:
        for r in run["sizes"]:
            lo, fw = r["local"], r["forwarded"]
            lines.append(f"| {run['mode']} | {r['record_size']} | {r['batch_bytes']} | {lo['p50_us']:.0f} "
                         f"| {fw['p50_us']:.0f} | {r['hop_p50_us']:.0f} | {lo['p99_us']:.0f} | {fw['p99_us']:.0f} "
                         f"| {r['throughput_ratio']:.2f} | {lo['broker_cpu_us_per_request']:.0f} "
                         f"| {fw['broker_cpu_us_per_request']:.0f} | {r['cpu_ratio']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
