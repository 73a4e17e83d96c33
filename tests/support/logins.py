"""A refused SASL login seen as the broker's answer, not as a missing answer."""
from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient


def login_refused(config: dict, timeout: float = 20.0) -> bool:
    """The broker answers the login with an authentication error (librdkafka's error_cb
    reports _AUTHENTICATION) within `timeout`; False if the login gives metadata or nothing
    is answered. (Waiting for metadata to time out would take the whole wait every time,
    and a slow login that is accepted would pass it too.)"""
    errors: list = []
    admin = AdminClient({**config, "error_cb": errors.append})
    try:
        admin.list_topics(timeout=0.5)  # connects; a refused login gets no metadata
        return False
    except KafkaException:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return True
        admin.poll(0.1)
    return False
