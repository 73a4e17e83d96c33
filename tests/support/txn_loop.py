"""A transactional consume-transform-produce loop, run as its own process by the tests.

    python -m tests.support.txn_loop CLIENT BOOTSTRAP FIRST LAST [CRASH]

CLIENT is `ck` (confluent-kafka), `kp` (kafka-python) or `kf` (kafkafast's own client).
Attempts FIRST..LAST (1-based) each read CHUNK records of `txn-in` partition 0 from the
group's committed offset, produce `out-<value>` to `txn-out`, send the offsets to the
transaction, and commit -- except every 5th attempt, which aborts (and the next attempt
reads the same chunk again). Attempt CRASH flushes half its records and SIGKILLs itself.
Prints one line per finished attempt.
"""
from __future__ import annotations

import os
import signal
import sys
import time

IN, OUT, GROUP, TXN_ID = "txn-in", "txn-out", "txn-group", "txn-loop"
CHUNK = 1000


def should_abort(attempt: int) -> bool:
    return attempt % 5 == 0


def _crash() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def drive(first: int, last: int, crash: int, start: int, *, begin, poll, produce, flush, send_offsets, commit,
          abort, seek) -> None:
    """The loop itself, over one client's calls: begin(), poll(n) -> [(offset, value)],
    produce(value), flush(), send_offsets(next offset), commit(), abort(), seek(offset)."""
    for attempt in range(first, last + 1):
        begin()
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < CHUNK and time.monotonic() < deadline:
            got += poll(CHUNK - len(got))
        assert len(got) == CHUNK, (attempt, len(got))
        for i, (_, value) in enumerate(got):
            produce(b"out-" + value)
            if attempt == crash and i == CHUNK // 2:
                flush()
                _crash()
        next_offset = got[-1][0] + 1
        send_offsets(next_offset)
        if should_abort(attempt):
            flush()  # so that the aborted records are in the log (librdkafka's abort purges unsent ones)
            abort()
            seek(start)
        else:
            commit()
            start = next_offset
        print(f"attempt {attempt} {'aborted' if should_abort(attempt) else 'committed'} up to {start}", flush=True)


def run_confluent(bootstrap: str, first: int, last: int, crash: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5})
    producer.init_transactions(30)
    committed = consumer.committed([TopicPartition(IN, 0)], 30)[0].offset
    start = committed if committed >= 0 else 0
    consumer.assign([TopicPartition(IN, 0, start)])

    def poll(n: int) -> list:
        return [(m.offset(), m.value()) for m in consumer.consume(n, 1.0) if m.error() is None]

    drive(first, last, crash, start, begin=producer.begin_transaction, poll=poll, produce=lambda v: producer.produce(OUT, value=v, partition=0),
          flush=lambda: producer.flush(30),
          send_offsets=lambda off: producer.send_offsets_to_transaction(
              [TopicPartition(IN, 0, off)], consumer.consumer_group_metadata(), 30),
          commit=lambda: producer.commit_transaction(30), abort=lambda: producer.abort_transaction(30),
          seek=lambda off: consumer.seek(TopicPartition(IN, 0, off)))
    consumer.close()


def run_kafka_python(bootstrap: str, first: int, last: int, crash: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=TXN_ID, linger_ms=5)
    producer.init_transactions()
    send_offsets = lambda off: producer.send_offsets_to_transaction(  # noqa: E731
        {TopicPartition(IN, 0): OffsetAndMetadata(off, "", -1)}, GROUP)
    _run_threaded_client(consumer, producer, TopicPartition(IN, 0), first, last, crash, send_offsets,
                         lambda v: producer.send(OUT, value=v, partition=0))


def run_kafkafast(bootstrap: str, first: int, last: int, crash: int) -> None:
    from kafkafast.client import KafkaConsumer, KafkaProducer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap, transactional_id=TXN_ID)
    producer.init_transactions()
    send_offsets = lambda off: producer.send_offsets_to_transaction({(IN, 0): off}, GROUP)  # noqa: E731
    _run_threaded_client(consumer, producer, TopicPartition(IN, 0), first, last, crash, send_offsets,
                         lambda v: producer.send(OUT, v, partition=0))


def _run_threaded_client(consumer, producer, tp, first: int, last: int, crash: int, send_offsets, produce) -> None:
    """kafka-python and kafkafast's sync client share the Java-style consumer and producer calls."""
    consumer.assign([tp])
    committed = consumer.committed(tp)
    start = committed if committed is not None and committed >= 0 else 0
    consumer.seek(tp, start)

    def poll(n: int) -> list:
        return [(r.offset, r.value) for records in consumer.poll(1000, max_records=n).values() for r in records]

    drive(first, last, crash, start, begin=producer.begin_transaction, poll=poll, produce=produce, flush=lambda: producer.flush(30),
          send_offsets=send_offsets, commit=producer.commit_transaction, abort=producer.abort_transaction,
          seek=lambda off: consumer.seek(tp, off))
    producer.close()
    consumer.close()


if __name__ == "__main__":
    client, bootstrap, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    crash = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    {"ck": run_confluent, "kp": run_kafka_python, "kf": run_kafkafast}[client](bootstrap, first, last, crash)
