"""Mutation fuzz over real client requests against a two-worker broker.

The corpus is captured from real clients (librdkafka through confluent-kafka: producer
with every codec, a group consumer that commits, an admin client) by a recording proxy
that the broker advertises as its address, so every request of the session passes
through it. Each case takes a captured request, mutates it (bit flips, truncation, a
length or count field overwritten with an edge value, random bytes appended, or in a
Produce the records of a batch changed under a CRC32C made right again; the frame size
always matches what is sent), sends it and then an ApiVersions probe on the same
connection. Every case must end with the probe answered or the connection closed by the
broker (a mutated Fetch, JoinGroup or SyncGroup may legitimately wait as long as it asked:
those may also time out). Afterwards the workers are the same processes (none crashed
and was replaced) and every partition of every topic reads from its log start to its
high watermark with a real client.

Seeded and bounded: FUZZ_CASES cases (env KAFKAFAST_FUZZ_CASES, default 3000) on
FUZZ_THREADS connections, stopping early at FUZZ_BUDGET_S.
"""
from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import psutil
import pytest

from tests.support.broker_process import free_port

FUZZ_SEED = int(os.environ.get("KAFKAFAST_FUZZ_SEED", "20261123"))
FUZZ_CASES = int(os.environ.get("KAFKAFAST_FUZZ_CASES", "3000"))
FUZZ_THREADS = 6
FUZZ_BUDGET_S = 60.0
MIN_CASES = 1000  # on a machine too slow to run them all within the budget
PROBE_CORRELATION = 0x7EADBEEF
PROBE = struct.pack(">hhih", 18, 0, PROBE_CORRELATION, 5) + b"probe"
PROBE_FRAME = struct.pack(">i", len(PROBE)) + PROBE
MAY_WAIT = {1, 11, 14}  # Fetch, JoinGroup, SyncGroup wait as long as the request says
# Requests that make the broker create what their (mutated) counts say: not fuzzed here.
NOT_FUZZED = {19, 37}  # CreateTopics, CreatePartitions
TOPICS = {"fuzz-plain": "none", "fuzz-gzip": "gzip", "fuzz-snappy": "snappy", "fuzz-lz4": "lz4", "fuzz-zstd": "zstd"}


class RecordingProxy:
    """Forwards 127.0.0.1:port to the broker and keeps every client request frame."""

    def __init__(self, port: int, target_port: int) -> None:
        self.target_port = target_port
        self.port = port
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._socks: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        pending = b""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
                if record:
                    pending += data
                    while len(pending) >= 4 and len(pending) >= 4 + struct.unpack(">i", pending[:4])[0]:
                        size = 4 + struct.unpack(">i", pending[:4])[0]
                        with self._lock:
                            self.frames.append(pending[:size])
                        pending = pending[size:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for s in self._socks:
            s.close()


def _capture(proxy_port: int) -> None:
    """A session of real clients through the proxy: topics, produce with every codec, a
    group consumer that commits, metadata and config lookups."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    bootstrap = f"127.0.0.1:{proxy_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 2, 1) for t in TOPICS]).values():
        f.result(15)
    for topic, codec in TOPICS.items():
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                      "enable.idempotence": codec in ("lz4", "zstd")})
        for i in range(60):
            p.produce(topic, key=b"key-%d" % (i % 7), value=(b"value-%d-" % i) * 20, headers=[("h", b"x")])
        assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-group", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.subscribe(list(TOPICS))
    got = 0
    deadline = time.monotonic() + 30
    while got < 60 * len(TOPICS) and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
            if got % 50 == 0:
                c.commit(asynchronous=False)
    c.close()
    assert got == 60 * len(TOPICS)
    for f in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "fuzz-lz4")]).values():
        f.result(15)
    admin.list_topics(timeout=10)


def _corpus(frames: list[bytes]) -> list[bytes]:
    """At most four frames per (api key, version), the first ones (a fetch early in the
    session finds data instead of waiting)."""
    seen: dict[tuple[int, int], int] = {}
    out = []
    for f in frames:
        key, version = struct.unpack(">hh", f[4:8])
        if key in NOT_FUZZED or seen.get((key, version), 0) >= 4:
            continue
        seen[(key, version)] = seen.get((key, version), 0) + 1
        out.append(f)
    return out


_EDGE_INTS = [0, 1, -1, 2, 127, 128, 255, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, -0x80000000, 0x10000, 1 << 24]


def _batches(body: bytes) -> list[tuple[int, int]]:
    """(position, size) of the v2 record batches inside a request: where a CRC32C checks out."""
    from kafkafast.records import crc32c

    found = []
    for p in range(len(body) - 61):
        if body[p + 16] != 2:
            continue
        size = struct.unpack_from(">i", body, p + 8)[0] + 12
        if 61 <= size <= len(body) - p and crc32c(body[p + 21:p + size]) == struct.unpack_from(">I", body, p + 17)[0]:
            found.append((p, size))
    return found


def mutate(frame: bytes, rng: random.Random) -> bytes:
    body = bytearray(frame[4:])
    batches = _batches(bytes(body)) if struct.unpack_from(">h", body, 0)[0] == 0 else []
    kind = rng.randrange(5 if batches else 4)
    if kind == 4:  # a batch's records changed under a CRC32C made right again
        p, size = rng.choice(batches)
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(p + 61, p + size)] = rng.randrange(256)
        from kafkafast.records import crc32c

        struct.pack_into(">I", body, p + 17, crc32c(bytes(body[p + 21:p + size])))
    elif kind == 0:  # bit flips (the header's first 4 bytes too: other APIs and versions)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(body))
            body[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation
        body = body[: rng.randrange(len(body))]
    elif kind == 2:  # a length, count or size field given an edge value
        width = rng.choice([1, 2, 4])
        if len(body) > 8 + width:
            i = rng.randrange(8, len(body) - width + 1)
            v = rng.choice(_EDGE_INTS + [len(body) - i + rng.randint(-3, 3)])
            body[i:i + width] = (v & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
    else:  # bytes appended, or a stretch of the body repeated
        if rng.random() < 0.5:
            body += rng.randbytes(rng.randint(1, 64))
        else:
            i = rng.randrange(len(body))
            j = min(len(body), i + rng.randint(1, 32))
            body[i:i] = body[i:j]
    return struct.pack(">i", len(body)) + bytes(body)


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def _run_case(port: int, sock: socket.socket | None, frame: bytes) -> tuple[socket.socket | None, str]:
    """Sends one mutated frame and the probe; 'answered', 'closed' or 'waiting'."""
    if sock is None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(frame + PROBE_FRAME)
        while True:
            head = _recv_exact(sock, 4)
            if head is None:
                raise ConnectionResetError
            size = struct.unpack(">i", head)[0]
            body = _recv_exact(sock, size)
            if body is None:
                raise ConnectionResetError
            if struct.unpack(">i", body[:4])[0] == PROBE_CORRELATION:
                return sock, "answered"
    except (ConnectionResetError, BrokenPipeError):
        sock.close()
        return None, "closed"
    except socket.timeout:
        sock.close()
        return None, "waiting"


def _read_everything(port: int) -> dict[tuple[str, int], int]:
    """For every partition of every topic: records read by a real client from the log
    start; asserts the reads reach the high watermark without an error."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
    counts = {}
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "fuzz-check", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50})
    try:
        for topic in sorted(md.topics):
            for partition in sorted(md.topics[topic].partitions):
                low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                n = 0
                last = low - 1
                if high > low:
                    c.assign([TopicPartition(topic, partition, low)])
                    deadline = time.monotonic() + 30
                    while last < high - 1 and time.monotonic() < deadline:
                        msg = c.poll(0.5)
                        if msg is None:
                            continue
                        assert msg.error() is None, (topic, partition, msg.error())
                        n += 1
                        last = msg.offset()
                    assert last >= high - 1, f"{topic}-{partition} read to {last}, high watermark {high}"
                counts[(topic, partition)] = n
    finally:
        c.close()
    return counts


def test_mutated_client_requests_get_answers_or_closed_connections_and_break_nothing(broker_factory):
    proxy_port = free_port()
    port = free_port()
    b = broker_factory(workers=2, port=port, settings={
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}", "auto.create.topics.enable": "false",
        "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
    proxy = RecordingProxy(proxy_port, port)  # the broker's advertised address
    try:
        _capture(proxy_port)
        corpus = _corpus(list(proxy.frames))
        _fuzz_and_check(b, port, proxy_port, corpus)
    finally:
        proxy.close()


def _fuzz_and_check(b, port: int, proxy_port: int, corpus: list[bytes]) -> None:
    keys = {struct.unpack(">h", f[4:6])[0] for f in corpus}
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18}.issubset(keys), sorted(keys)

    supervisor = psutil.Process(b.proc.pid)
    workers_before = sorted(p.pid for p in supervisor.children())
    assert len(workers_before) == 2

    outcomes: dict[str, int] = {"answered": 0, "closed": 0, "waiting": 0}
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + FUZZ_BUDGET_S
    per_thread = FUZZ_CASES // FUZZ_THREADS

    def fuzz(thread_index: int) -> None:
        rng = random.Random(FUZZ_SEED * 31 + thread_index)
        sock = None
        for _ in range(per_thread):
            if time.monotonic() > deadline:
                break
            frame = mutate(rng.choice(corpus), rng)
            sock, outcome = _run_case(port, sock, frame)
            api_key = struct.unpack(">h", frame[4:6])[0] if len(frame) >= 6 else -1
            with lock:
                outcomes[outcome] += 1
                if outcome == "waiting" and api_key not in MAY_WAIT:
                    failures.append(f"no answer and no close for api key {api_key}: {frame[:64].hex()}")
        if sock is not None:
            sock.close()

    threads = [threading.Thread(target=fuzz, args=(i,)) for i in range(FUZZ_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(outcomes.values())
    assert not failures, failures[:5]
    assert total >= min(MIN_CASES, FUZZ_CASES), outcomes
    assert outcomes["answered"] > 0 and outcomes["closed"] > 0, outcomes
    assert sorted(p.pid for p in supervisor.children()) == workers_before, "a worker died and was replaced"
    assert b.proc.poll() is None
    counts = _read_everything(proxy_port)
    for topic in TOPICS:
        assert counts[(topic, 0)] + counts[(topic, 1)] >= 60, (topic, counts)
