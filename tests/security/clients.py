"""Produce-then-consume round trips over a secured listener with each real client
(confluent-kafka, kafka-python, aiokafka), from one description of the connection."""
from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field

N = 20


@dataclass
class Conn:
    bootstrap: str
    protocol: str  # SSL, SASL_PLAINTEXT, SASL_SSL
    ca: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cert: str | None = None  # client certificate for mutual TLS
    key: str | None = None
    extra: dict = field(default_factory=dict)

    def confluent(self) -> dict:
        c = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        if self.ca:
            c["ssl.ca.location"] = self.ca
        if self.cert:
            c.update({"ssl.certificate.location": self.cert, "ssl.key.location": self.key})
        if self.mechanism:
            c["sasl.mechanism"] = self.mechanism
        if self.username:
            c.update({"sasl.username": self.username, "sasl.password": self.password})
        c.update(self.extra)
        return c

    def kafka_python(self) -> dict:
        c = {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol}
        if self.ca:
            c.update({"ssl_cafile": self.ca, "ssl_check_hostname": True})
        if self.cert:
            c.update({"ssl_certfile": self.cert, "ssl_keyfile": self.key})
        if self.mechanism:
            c.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                      "sasl_plain_password": self.password})
        return c

    def aiokafka(self) -> dict:
        c = {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol}
        if self.ca:
            ctx = ssl.create_default_context(cafile=self.ca)
            if self.cert:
                ctx.load_cert_chain(self.cert, self.key)
            c["ssl_context"] = ctx
        if self.mechanism:
            c.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                      "sasl_plain_password": self.password})
        return c


def values(topic: str) -> list[bytes]:
    return [f"{topic}-{i}".encode() * 20 for i in range(N)]


def confluent_round_trip(conn: Conn, topic: str) -> list[bytes]:
    import confluent_kafka as ck

    p = ck.Producer({**conn.confluent(), "linger.ms": 5})
    errors = []
    for v in values(topic):
        p.produce(topic, v, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors
    c = ck.Consumer({**conn.confluent(), "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    return got


def kafka_python_round_trip(conn: Conn, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(**conn.kafka_python())
    for v in values(topic):
        p.send(topic, v).get(30)
    p.close()
    c = KafkaConsumer(**conn.kafka_python(), auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([TopicPartition(topic, 0)])
    c.seek(TopicPartition(topic, 0), 0)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        for recs in c.poll(500).values():
            got.extend(r.value for r in recs)
    c.close()
    return got


def aiokafka_round_trip(conn: Conn, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**conn.aiokafka())
        await p.start()
        try:
            for v in values(topic):
                await p.send_and_wait(topic, v)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(**conn.aiokafka(), auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got: list[bytes] = []
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            deadline = time.monotonic() + 30
            while len(got) < N and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in recs)
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


ROUND_TRIPS = {"confluent": confluent_round_trip, "kafka-python": kafka_python_round_trip,
               "aiokafka": aiokafka_round_trip}
