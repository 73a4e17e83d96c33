"""An idempotent acks=all producer (confluent-kafka) writing numbered values round-robin over
a topic's partitions in a thread, for tests that restart brokers under load: what was
acknowledged, the delivery errors and the fatal errors it saw."""
from __future__ import annotations

import threading
import time
from typing import Any


class AckedProducer:
    def __init__(self, bootstrap: str, topic: str, partitions: int, *, burst: int = 50, limit: int = 400_000,
                 rate: float = 4000.0, **config: Any) -> None:
        from confluent_kafka import Producer

        self.topic, self.partitions, self.burst, self.limit = topic, partitions, burst, limit
        self.rate = rate  # records/s at most: batches always in flight, CPU left for the brokers
        self.acked: list[bytes] = []
        self.delivery_errors: list = []
        self.fatal: list = []
        self.stop_event = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 2000,
                                  "error_cb": lambda e: self.fatal.append(e) if e.fatal() else None, **config})
        self.thread = threading.Thread(target=self._run)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        (self.delivery_errors.append(err) if err is not None else self.acked.append(msg.value()))

    def _run(self) -> None:
        seq = 0
        started = time.monotonic()
        while not self.stop_event.is_set() and seq < self.limit:
            for _ in range(self.burst):
                self.producer.produce(self.topic, value=b"%08d" % seq, partition=seq % self.partitions,
                                      on_delivery=self._on_delivery)
                seq += 1
            self.producer.poll(0)
            self.stop_event.wait(max(0.0, started + seq / self.rate - time.monotonic()))

    def start(self) -> "AckedProducer":
        self.thread.start()
        return self

    def stop(self, flush_timeout: float = 120.0) -> int:
        """Stops producing; what is still unacknowledged after flushing (0 when all was)."""
        self.stop_event.set()
        self.thread.join(30)
        return self.producer.flush(flush_timeout)
