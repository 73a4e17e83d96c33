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


def run_confluent(bootstrap: str, first: int, last: int, crash: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5})
    producer.init_transactions(30)
    committed = consumer.committed([TopicPartition(IN, 0)], 30)[0].offset
    start = committed if committed >= 0 else 0
    consumer.assign([TopicPartition(IN, 0, start)])
    for attempt in range(first, last + 1):
        producer.begin_transaction()
        got = []
        deadline = time.monotonic() + 30
        while len(got) < CHUNK and time.monotonic() < deadline:
            for m in consumer.consume(CHUNK - len(got), 1.0):
                if m.error() is None:
                    got.append(m)
        assert len(got) == CHUNK, (attempt, len(got))
        for i, m in enumerate(got):
            producer.produce(OUT, value=b"out-" + m.value(), partition=0)
            if attempt == crash and i == CHUNK // 2:
                producer.flush(30)
                _crash()
        next_offset = got[-1].offset() + 1
        producer.send_offsets_to_transaction([TopicPartition(IN, 0, next_offset)],
                                             consumer.consumer_group_metadata(), 30)
        if should_abort(attempt):
            producer.flush(30)  # so that the aborted records are in the log (abort purges unsent ones)
            producer.abort_transaction(30)
            consumer.seek(TopicPartition(IN, 0, start))
        else:
            producer.commit_transaction(30)
            start = next_offset
        print(f"attempt {attempt} {'aborted' if should_abort(attempt) else 'committed'} up to {start}", flush=True)
    consumer.close()


def run_kafka_python(bootstrap: str, first: int, last: int, crash: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    tp = TopicPartition(IN, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=TXN_ID, linger_ms=5)
    producer.init_transactions()
    consumer.assign([tp])
    committed = consumer.committed(tp)
    start = committed if committed is not None else 0
    consumer.seek(tp, start)
    for attempt in range(first, last + 1):
        producer.begin_transaction()
        got = []
        deadline = time.monotonic() + 30
        while len(got) < CHUNK and time.monotonic() < deadline:
            for records in consumer.poll(1000, max_records=CHUNK - len(got)).values():
                got.extend(records)
        assert len(got) == CHUNK, (attempt, len(got))
        for i, m in enumerate(got):
            producer.send(OUT, value=b"out-" + m.value, partition=0)
            if attempt == crash and i == CHUNK // 2:
                producer.flush(30)
                _crash()
        next_offset = got[-1].offset + 1
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(next_offset, "", -1)}, GROUP)
        if should_abort(attempt):
            producer.flush(30)
            producer.abort_transaction()
            consumer.seek(tp, start)
        else:
            producer.commit_transaction()
            start = next_offset
        print(f"attempt {attempt} {'aborted' if should_abort(attempt) else 'committed'} up to {start}", flush=True)
    producer.close(5)
    consumer.close()


def run_kafkafast(bootstrap: str, first: int, last: int, crash: int) -> None:
    from kafkafast.client import KafkaConsumer, KafkaProducer, TopicPartition

    tp = TopicPartition(IN, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap, transactional_id=TXN_ID)
    producer.init_transactions()
    consumer.assign([tp])
    committed = consumer.committed(tp)
    start = committed if committed is not None and committed >= 0 else 0
    consumer.seek(tp, start)
    for attempt in range(first, last + 1):
        producer.begin_transaction()
        got = []
        deadline = time.monotonic() + 30
        while len(got) < CHUNK and time.monotonic() < deadline:
            for records in consumer.poll(1000, max_records=CHUNK - len(got)).values():
                got.extend(records)
        assert len(got) == CHUNK, (attempt, len(got))
        for i, m in enumerate(got):
            producer.send(OUT, b"out-" + m.value, partition=0)
            if attempt == crash and i == CHUNK // 2:
                producer.flush(30)
                _crash()
        next_offset = got[-1].offset + 1
        producer.send_offsets_to_transaction({(IN, 0): next_offset}, GROUP)
        if should_abort(attempt):
            producer.flush(30)
            producer.abort_transaction()
            consumer.seek(tp, start)
        else:
            producer.commit_transaction()
            start = next_offset
        print(f"attempt {attempt} {'aborted' if should_abort(attempt) else 'committed'} up to {start}", flush=True)
    producer.close()
    consumer.close()


if __name__ == "__main__":
    client, bootstrap, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    crash = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    {"ck": run_confluent, "kp": run_kafka_python, "kf": run_kafkafast}[client](bootstrap, first, last, crash)
