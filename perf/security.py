"""The same produce/consume profile over PLAINTEXT, SSL and SASL_SSL, side by side in one run.

    python -m perf.security [--mib 64] [--sizes 1024,16384] [--repeats 3] [--workers 1]
                            [--out perf/results/security.json]

One kafkafast broker with three listeners (PLAINTEXT; SSL; SASL_SSL with SCRAM-SHA-512),
certificates made for the run (tests/security/pki.py). For each record size and repeat, the
listeners take turns (so drift of the shared machine hits all three alike): a
confluent-kafka producer writes `--mib` MiB to a fresh one-partition topic (acks=1,
linger.ms=5, batch.size=1 MiB, no compression), then a consumer reads it back from the
beginning with assign(). Reported per listener and size: median (and range) of produce
and consume MB/s, and broker CPU-seconds per GB moved (user+sys of every broker process
from their CPU-time clocks, sampled around each timed window). Fetch over TLS cannot use sendfile: the
segment bytes are read into a reused buffer and encrypted by the ssl module (see
kafkafast/runtime/connection.py), so the consume column is where TLS costs most.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from perf.brokers import Kafkafast, free_port

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "perf", "perf-secret"


def client_conf(listener: str, port: int, pki) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener}
    if listener != "PLAINTEXT":
        conf["ssl.ca.location"] = str(pki.ca)
    if listener == "SASL_SSL":
        conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def produce(conf: dict, topic: str, size: int, count: int) -> float:
    from confluent_kafka import Producer

    p = Producer({**conf, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20, "batch.num.messages": 1_000_000,
                  "max.in.flight.requests.per.connection": 5, "message.max.bytes": 8 << 20,
                  "queue.buffering.max.kbytes": 64 << 10, "enable.idempotence": False})
    p.list_topics(topic, timeout=10)
    value = b"x" * size
    errors = []
    t0 = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda err, msg: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} produce errors, first {errors[0]}")
    return elapsed


def consume(conf: dict, topic: str, count: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({**conf, "group.id": "perf-" + topic, "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                  "max.partition.fetch.bytes": 16 << 20, "fetch.wait.max.ms": 100,
                  "queued.max.messages.kbytes": 512 << 10, "receive.message.max.bytes": 128 << 20})
    c.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    n = 0
    deadline = t0 + 300
    while n < count and time.perf_counter() < deadline:
        n += sum(1 for m in c.consume(num_messages=10000, timeout=0.5) if m.error() is None)
    elapsed = time.perf_counter() - t0
    c.close()
    if n < count:
        raise RuntimeError(f"consumed {n} of {count}")
    return elapsed


def run(mib: int, sizes: list[int], repeats: int, workers: int) -> dict:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from tests.security.pki import make_pki

    with tempfile.TemporaryDirectory(prefix="kafkafast-sec-bench-") as tmp:
        pki = make_pki(Path(tmp) / "pki")
        b = Kafkafast(Path(tmp), workers)
        ports = {"PLAINTEXT": b.port, "SSL": free_port(), "SASL_SSL": free_port()}
        b.settings.update({
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "ssl.keystore.location": str(pki.server_keystore), "ssl.key.password": pki.key_password,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        })
        b.start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())])[USER].result(30)
            cells: dict = {}
            for size in sizes:
                count = (mib << 20) // size
                for rep in range(repeats):
                    for listener in LISTENERS:
                        topic = f"sec-{listener.lower()}-{size}-{rep}"
                        b.create_topic(topic, 1)
                        conf = client_conf(listener, ports[listener], pki)
                        cell = cells.setdefault(f"{listener} {size}", {"listener": listener, "size": size,
                                                                       "produce": [], "consume": []})
                        for phase, fn in (("produce", lambda: produce(conf, topic, size, count)),
                                          ("consume", lambda: consume(conf, topic, count))):
                            cpu0 = b.cpu_seconds()
                            secs = fn()
                            cpu = b.cpu_seconds() - cpu0
                            moved = count * size
                            cell[phase].append({"seconds": secs, "mb_s": moved / secs / 1e6,
                                                "cpu_s_per_gb": cpu / (moved / 1e9)})
                        b.delete_topic(topic)
            return {"machine": f"{platform.node()} {platform.machine()} {__import__('os').cpu_count()} CPUs, "
                               f"{platform.python_version()}",
                    "command": f"python -m perf.security --mib {mib} --sizes {','.join(map(str, sizes))} "
                               f"--repeats {repeats} --workers {workers}",
                    "broker": f"kafkafast --workers {workers}", "cells": list(cells.values())}
        finally:
            b.stop()


def summarise(result: dict) -> str:
    def med(xs: list, key: str) -> str:
        vals = [x[key] for x in xs]
        return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})"

    lines = ["| listener | record | produce MB/s | produce broker CPU-s/GB | consume MB/s | "
             "consume broker CPU-s/GB |", "|---|---|---|---|---|---|"]
    for c in result["cells"]:
        lines.append(f"| {c['listener']} | {c['size']} B | {med(c['produce'], 'mb_s')} | "
                     f"{med(c['produce'], 'cpu_s_per_gb')} | {med(c['consume'], 'mb_s')} | "
                     f"{med(c['consume'], 'cpu_s_per_gb')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--sizes", default="1024,16384")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default="perf/results/security.json")
    a = ap.parse_args()
    result = run(a.mib, [int(s) for s in a.sizes.split(",")], a.repeats, a.workers)
    Path(a.out).write_text(json.dumps(result, indent=1))
    table = summarise(result)
    Path(a.out).with_suffix(".md").write_text(
        f"# Produce/consume over PLAINTEXT, SSL and SASL_SSL\n\n{result['machine']}; `{result['command']}`; "
        f"{result['broker']}, one partition, acks=1, no compression; confluent-kafka clients in the same "
        f"process as the harness. Median (min-max) of the repeats; broker CPU from its CPU-time clocks.\n\n{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
