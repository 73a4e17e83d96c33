"""Load generators, one per process: confluent-kafka (librdkafka) producers and consumers.

Run as `python -m perf.load produce|consume|latency --json '{...}'`; each prints one JSON
line with what it measured (and its own CPU time, so a client-bound result shows).

* produce: unthrottled for `warmup_s`, then `duration_s` timed; the timed window ends when
  every message produced in it is acknowledged (`flush`). Only acknowledged messages
  count (delivery reports for errors only, so the client spends nothing per success).
* latency: a fixed rate (messages/s), paced every millisecond; the produce->ack latency of
  each message acknowledged in the timed window (librdkafka's `msg.latency()`).
* consume: `assign()` every partition at the beginning (no group join in the timed
  window) and read until `expect` messages arrived.
* rawfetch: the same read with a minimal Fetch client that discards the bytes (the
  broker's side of consume, without librdkafka's per-record work).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _producer_conf(a: dict) -> dict:
    conf = {
        "bootstrap.servers": a["bootstrap"],
        "acks": str(a["acks"]),
        "linger.ms": a.get("linger_ms", 5),
        "batch.size": a.get("batch_size", 1 << 20),
        "batch.num.messages": 1_000_000,
        # Java's default. librdkafka's (1,000,000) lets a producer queue far more than a
        # broker reads; on this machine's loopback the overflowing receive buffers then
        # drop segments and TCP backs off for seconds, which measures the kernel, not brokers.
        "max.in.flight.requests.per.connection": 5,
        "message.max.bytes": 8 << 20,
        "queue.buffering.max.kbytes": 64 << 10,  # a short flush tail after the timed window
        "queue.buffering.max.messages": 1_000_000,
        "compression.type": a.get("compression", "none"),
        "enable.idempotence": False,
        "request.timeout.ms": 30000,
        "message.timeout.ms": 60000,
    }
    if str(a["acks"]) == "0":
        conf["acks"] = "0"
    return conf


def produce(a: dict) -> dict:
    from confluent_kafka import Producer

    errors = [0]

    def on_error(err, msg) -> None:
        if err is not None:
            errors[0] += 1

    conf = _producer_conf(a)
    conf["delivery.report.only.error"] = True
    p = Producer(conf)
    topic = a["topic"]
    value = os.urandom(a["size"])
    produce_ = p.produce
    poll = p.poll
    spread = a.get("round_robin", 0)  # explicit partitions: every partition's count is known
    if spread:
        def produce_(topic, value, on_delivery, _n=[0]):  # noqa: B006 - a counter
            p.produce(topic, value, partition=_n[0] % spread, on_delivery=on_delivery)
            _n[0] += 1

    def run(seconds: float, count: int = 0) -> tuple[int, float]:
        n = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while True:
            for _ in range(200 if not count else min(200, count - n)):
                try:
                    produce_(topic, value, on_delivery=on_error)
                    n += 1
                except BufferError:
                    poll(0.0005)
            poll(0)
            if (count and n >= count) or (not count and time.perf_counter() >= end):
                break
        left = p.flush(60)
        return n - left, time.perf_counter() - t0

    warm = 0
    if a.get("warmup_s", 0) > 0:
        warm = run(a["warmup_s"])[0] - errors[0]
    errors[0] = 0
    cpu0 = _cpu()
    n, elapsed = run(a.get("duration_s", 0), a.get("count", 0))
    acked = n - errors[0]
    return {"acked": acked, "errors": errors[0], "seconds": elapsed, "bytes": acked * a["size"],
            "client_cpu_s": _cpu() - cpu0, "warmup_bytes": warm * a["size"]}


def latency(a: dict) -> dict:
    from confluent_kafka import Producer

    conf = _producer_conf(a)
    p = Producer(conf)
    topic = a["topic"]
    value = os.urandom(a["size"])
    rate = float(a["rate"])
    lat: list[float] = []
    errors = [0]
    measuring = [False]

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors[0] += 1
        elif measuring[0]:
            lat.append(msg.latency())

    def run(seconds: float) -> int:
        sent = 0
        t0 = time.perf_counter()
        while True:
            now = time.perf_counter()
            if now - t0 >= seconds:
                break
            due = int((now - t0) * rate) - sent
            for _ in range(due):
                try:
                    p.produce(topic, value, on_delivery=on_delivery)
                    sent += 1
                except BufferError:
                    p.poll(0.0005)
            p.poll(0)
            sleep = (sent + 1) / rate - (time.perf_counter() - t0)
            if sleep > 0:
                p.poll(min(sleep, 0.001))
        return sent

    run(a.get("warmup_s", 0.5))
    p.flush(30)
    measuring[0] = True
    t0 = time.perf_counter()
    sent = run(a["duration_s"])
    p.flush(30)
    elapsed = time.perf_counter() - t0
    lat.sort()
    keep = lat if len(lat) <= 100_000 else lat[::max(1, len(lat) // 100_000)]

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000.0 if lat else float("nan")

    return {"rate": rate, "sent": sent, "acked": len(lat), "errors": errors[0], "seconds": elapsed,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "max_ms": lat[-1] * 1000.0 if lat else float("nan"), "sample_ms": [x * 1000.0 for x in keep]}


def consume(a: dict) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

    c = Consumer({
        "bootstrap.servers": a["bootstrap"],
        "group.id": "perf-" + a["topic"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 512 << 10,
        "receive.message.max.bytes": 128 << 20,
        "enable.partition.eof": False,
        # librdkafka (2.x) postpones a partition's next fetch by this much once its local queue
        # is past the thresholds: at the default 1000 ms, one read in six of a 200 MB topic took
        # 1.3 s instead of 0.35 s (a client pause, on any broker)
        "fetch.queue.backoff.ms": 10,
    })
    c.list_topics(a["topic"], timeout=10)  # connect (and learn the topic) before the clock starts
    expect = a["expect"]
    cpu0 = _cpu()
    t0 = time.perf_counter()
    c.assign([TopicPartition(a["topic"], p, OFFSET_BEGINNING) for p in a["partitions"]])
    n = 0
    nbytes = 0
    errors = 0
    first = None
    deadline = t0 + a.get("timeout_s", 120)
    while n < expect and time.perf_counter() < deadline:
        # a short wait: a whole read of the topic takes well under a second, and an empty
        # consume() that waited 0.5 s (e.g. before the first fetch answers) halved its rate
        batch = c.consume(num_messages=10000, timeout=0.02)
        if not batch:
            continue
        if first is None:
            first = time.perf_counter()
        bad = len(list(filter(None, map(Message.error, batch))))  # C-level passes: the client stays cheap
        errors += bad
        n += len(batch) - bad
        nbytes += sum(map(len, batch))
    end = time.perf_counter()
    c.close()
    # timed from assign(): the connection is already up; ListOffsets is inside the window
    return {"messages": n, "bytes": nbytes, "seconds": end - t0, "seconds_from_first_batch": end - (first or t0), "errors": errors, "client_cpu_s": _cpu() - cpu0}


def rawfetch(a: dict) -> dict:
    """A minimal Fetch client: one connection, Fetch v11 for all its partitions at once,
    record bytes received into one reused buffer and discarded (only batch headers are
    read, to advance the offsets). It shows what the broker can send when the client
    costs almost nothing; librdkafka decodes every record and keeps one fetch in flight."""
    import socket
    import struct

    from kafkafast.protocol import api
    from kafkafast.protocol._generated.fetch import FetchRequest

    s = socket.create_connection(tuple(a["bootstrap"].rsplit(":", 1)[0:1]) + (int(a["bootstrap"].rsplit(":", 1)[1]),))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    offsets = {p: 0 for p in a["partitions"]}
    buf = bytearray(80 << 20)
    view = memoryview(buf)
    total = corr = 0
    cpu0 = _cpu()
    t0 = time.perf_counter()
    while True:
        corr += 1
        req = FetchRequest(replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic=a["topic"], partitions=[FetchRequest.FetchPartition(
                                   partition=p, current_leader_epoch=-1, fetch_offset=o, log_start_offset=-1,
                                   partition_max_bytes=8 << 20) for p, o in offsets.items()])],
                           forgotten_topics_data=[], rack_id="")
        s.sendall(api.encode_request(req, 11, corr, "rawfetch"))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        got = 0
        while got < size:
            n = s.recv_into(view[got:size])
            if not n:
                raise ConnectionError("broker closed the connection")
            got += n
        _, resp = api.decode_response(1, 11, view[:size])
        moved = 0
        for t in resp.responses:
            for pr in t.partitions:
                rec = pr.records
                if not rec:
                    continue
                mv = memoryview(rec)
                pos, last = 0, None
                while pos + 27 <= len(mv):
                    base, length = struct.unpack_from(">qi", mv, pos)
                    if pos + 12 + length > len(mv):
                        break
                    last = base + struct.unpack_from(">i", mv, pos + 23)[0]
                    pos += 12 + length
                if last is not None:
                    offsets[pr.partition_index] = last + 1
                    moved += pos
        total += moved
        if moved == 0:
            break
    elapsed = time.perf_counter() - t0
    s.close()
    return {"messages": 0, "bytes": total, "seconds": elapsed, "client_cpu_s": _cpu() - cpu0}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "consume", "latency", "rawfetch"])
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    a = json.loads(args.json)
    out = {"produce": produce, "consume": consume, "latency": latency, "rawfetch": rawfetch}[args.mode](a)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
