"""Transactions are not implemented: a transactional producer of each real client must fail
at once with an error that names the cause, not retry until its own timeout (60 s by
default in all three). The broker also keeps serving the idempotent producer afterwards."""
from __future__ import annotations

import asyncio
import time

FAST = 10.0  # seconds; the clients' own timeouts are 60 s, the old behaviour took all of them


def test_confluent_kafka_init_transactions_fails_fast_and_fatally(broker):
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-ck"})
    t0 = time.monotonic()
    try:
        p.init_transactions(50)
        raise AssertionError("init_transactions succeeded")
    except KafkaException as exc:
        err = exc.args[0]
    elapsed = time.monotonic() - t0
    assert elapsed < FAST, elapsed
    assert err.fatal()
    assert err.name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert "does not support transactions" in err.str()

    ok = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    delivered = []
    ok.produce("after-txn", b"v", on_delivery=lambda e, m: delivered.append((e, m.offset())))
    assert ok.flush(30) == 0
    assert delivered == [(None, 0)]


def test_kafka_python_init_transactions_fails_fast(broker):
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-kp")
    t0 = time.monotonic()
    try:
        p.init_transactions()
        raise AssertionError("init_transactions succeeded")
    except TransactionalIdAuthorizationFailedError as exc:
        assert exc.errno == 53
    finally:
        p.close(timeout=5)
    assert time.monotonic() - t0 < FAST


def test_aiokafka_transactional_start_fails_fast(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def main() -> float:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-aio")
        t0 = time.monotonic()
        try:
            await p.start()
            async with p.transaction():
                await p.send_and_wait("txn-aio", b"v")
            raise AssertionError("the transaction went through")
        except TransactionalIdAuthorizationFailed:
            return time.monotonic() - t0
        finally:
            await p.stop()

    assert asyncio.run(asyncio.wait_for(main(), 60)) < FAST
