"""The matrix with kcat (argv[2]: its path; Debian's is built on librdkafka 2.0): see common.py.
kcat produces (one run per codec and partition; it cannot set timestamps, so records carry
the time they were produced and the by-timestamp query asks for the timestamp of record
n // 2 in the first topic as kcat consumed it), consumes in a group with -G (committing as it closes), and lists
offsets with -Q; the committed offsets are read back with confluent-kafka, as kcat cannot."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from common import PARTITIONS, record, result, spec
from confluent_kafka import Consumer, TopicPartition

KCAT = sys.argv[2]


def kcat(*args: str, stdin: bytes | None = None) -> str:
    r = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=90)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    assert b"not support compression" not in r.stderr, r.stderr.decode(errors="replace")[-2000:]
    return r.stdout.decode()


def query(b: str, topic: str, partition: int, ts: int) -> int:
    out = kcat("-b", b, "-Q", "-t", f"{topic}:{partition}:{ts}")
    m = re.search(rf"\[{partition}\] offset (-?\d+)", out)
    assert m, out
    return int(m.group(1))


def main() -> None:
    s = spec()
    b, n, t0 = s["bootstrap"], s["n"], s["t0"]
    for codec, topic in s["topics"].items():
        for part in range(PARTITIONS):
            lines = b"".join(k + b"\t" + v + b"\n" for k, v, _, p in (record(codec, i, t0) for i in range(n)) if p == part)
            kcat("-b", b, "-P", "-t", topic, "-p", str(part), "-K", "\t", "-z", codec, "-X", "linger.ms=20",
                 "-X", "batch.num.messages=40", stdin=lines)
    topics = list(s["topics"].values())
    out = kcat("-b", b, "-G", s["group"], "-o", "beginning", "-e", "-J", "-q", *topics)
    msgs = [json.loads(line) for line in out.splitlines()]
    consumed = [[m["topic"], m["partition"], m["offset"], m["key"], m["payload"]] for m in msgs]
    c = Consumer({"bootstrap.servers": b, "group.id": s["group"]})
    committed: dict = {}
    for tp in c.committed([TopicPartition(t, p) for t in topics for p in range(PARTITIONS)], timeout=10):
        committed.setdefault(tp.topic, {})[tp.partition] = tp.offset
    c.close()
    # the first topic was produced first: every topic has records at or after this time
    target = next(m["ts"] for m in msgs if m["topic"] == topics[0] and m["key"] == "k%d" % (n // 2))
    earliest: dict = {}
    latest: dict = {}
    by_time: dict = {}
    for t in topics:
        for p in range(PARTITIONS):
            earliest.setdefault(t, {})[p] = query(b, t, p, -2)
            latest.setdefault(t, {})[p] = query(b, t, p, -1)
            by_time.setdefault(t, {})[p] = query(b, t, p, target)
    version = re.search(r"librdkafka (\S+)", kcat("-V")).group(1)  # kcat -V prints to stdout
    result("kcat", version, produced={codec: None for codec in s["topics"]}, consumed=consumed, committed=committed,
           earliest=earliest, latest=latest, by_time=by_time, target=target)


if __name__ == "__main__":
    main()
