"""The load of a nemesis run: confluent-kafka producers, about 250 records/s in all, each
record's value a unique id `<producer>-<seq>` sent to partition seq % partitions; every
delivery report is kept (acknowledged partition, offset and value with the time it came, or
the error). Then the read-back: every partition from offset 0 to its high watermark."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition


@dataclass(frozen=True)
class Ack:
    value: str
    partition: int
    offset: int
    at: float  # time.monotonic() of the delivery report


@dataclass
class ReadBack:
    records: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # partition -> [(offset, value)]
    high_watermarks: dict[int, int] = field(default_factory=dict)
    unreadable_from: dict[int, int] = field(default_factory=dict)  # partition -> first offset not read
    errors: list[str] = field(default_factory=list)


def producer_config(bootstrap: str, acks: str) -> dict[str, Any]:
    """acks=all: the idempotent producer; acks=1: a plain producer with librdkafka's retries.
    librdkafka's own request and socket timeouts (30 s, 60 s): shorter ones would make the
    client drop a connection to a paused or isolated leader, and with it the requests a
    deposed leader would otherwise acknowledge, hiding what an ordinary client sees. The
    metadata refresh is every 2 s (default 5 min) so that a client learns of a new leader
    without an error from the old one; a record not acknowledged in 40 s is given up."""
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 40000,
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 2000}
    if acks == "all":
        return {**base, "acks": "all", "enable.idempotence": True}
    return {**base, "acks": "1", "enable.idempotence": False}


class LoadProducer:
    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, acks: str, rate: float) -> None:
        self.name, self.topic, self.partitions, self.rate = name, topic, partitions, rate
        self.acks: list[Ack] = []
        self.errors: list[str] = []
        self.fatal: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self.producer = Producer({**producer_config(bootstrap, acks),
                                  "error_cb": lambda e: self.fatal.append(str(e)) if e.fatal() else None})
        self.thread = threading.Thread(target=self._run, name=f"load-{name}", daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.str())
        else:
            self.acks.append(Ack(msg.value().decode(), msg.partition(), msg.offset(), time.monotonic()))

    def _run(self) -> None:
        tick = 0.04
        per_tick = self.rate * tick
        due = 0.0
        next_at = time.monotonic()
        while not self._stop.is_set():
            due += per_tick
            while due >= 1:
                due -= 1
                try:
                    self.producer.produce(self.topic, value=b"%s-%08d" % (self.name.encode(), self.sent),
                                          partition=self.sent % self.partitions, on_delivery=self._on_delivery)
                except BufferError:
                    break
                self.sent += 1
            next_at += tick
            while (left := next_at - time.monotonic()) > 0:  # poll returns early when reports come
                self.producer.poll(left)

    def start(self) -> "LoadProducer":
        self.thread.start()
        return self

    def halt(self) -> None:
        """Stops producing (no flush)."""
        self._stop.set()

    def stop(self, flush_timeout: float) -> int:
        """Stops producing; the number of records still undelivered after the flush."""
        self.halt()
        self.thread.join(10)
        return self.producer.flush(flush_timeout)


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> ReadBack:
    """Every record of every partition, from offset 0 to the high watermark (read_committed is
    irrelevant: no transactions). A partition that stops short of its high watermark within
    `timeout` (errors, or no progress) is recorded as unreadable from the next offset."""
    out = ReadBack()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "nemesis-readback", "enable.auto.commit": False,
                         "auto.offset.reset": "error", "enable.partition.eof": True,
                         "fetch.error.backoff.ms": 100, "socket.timeout.ms": 10000})
    try:
        for p in range(partitions):
            out.high_watermarks[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
            out.records[p] = []
        next_offset = {p: 0 for p in range(partitions)}
        pending = {p for p in range(partitions) if out.high_watermarks[p] > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != -191:  # _PARTITION_EOF
                    out.errors.append(f"p{msg.partition()}: {msg.error().str()}")
                elif next_offset[msg.partition()] >= out.high_watermarks[msg.partition()]:
                    pending.discard(msg.partition())
                continue
            p = msg.partition()
            out.records[p].append((msg.offset(), msg.value().decode()))
            next_offset[p] = msg.offset() + 1
            if next_offset[p] >= out.high_watermarks[p]:
                pending.discard(p)
        for p in pending:
            out.unreadable_from[p] = next_offset[p]
    finally:
        consumer.close()
    return out


def probe_reads(bootstrap: str, topic: str, partitions: int, timeout: float = 10.0) -> bool:
    """Every non-empty partition answers a fetch from offset 0 with a record (no error)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "nemesis-probe", "enable.auto.commit": False,
                         "socket.timeout.ms": 5000})
    try:
        waiting = set(range(partitions))
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                return False
            waiting.discard(msg.partition())
        return not waiting
    finally:
        consumer.close()
