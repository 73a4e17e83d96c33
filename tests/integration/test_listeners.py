"""Listeners are parsed as Kafka parses them (NAME://host:port, the name's security protocol
from `listener.security.protocol.map`), and a TLS or SASL listener that cannot be served as configured (no key store, no usable
SASL mechanism) stops the broker at start with a message naming it: it is never served in
clear text."""
from __future__ import annotations

import subprocess

import pytest

from tests.support.broker_process import api_versions_ok, free_port
from tests.support.cli import kafkafast


def start_broker(tmp_path, *settings: str, workers: int = 0) -> subprocess.CompletedProcess:
    args = ["broker", "--workers", str(workers), "--set", f"log.dirs={tmp_path / 'data'}"]
    for s in settings:
        args += ["--set", s]
    # A broker that (wrongly) starts would run until the timeout: that counts as a failure.
    return kafkafast(*args, check=False, timeout=30)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("listener,protocol_map,protocol", [
    ("SSL://127.0.0.1:{port}", None, "SSL"),
    ("SASL_SSL://127.0.0.1:{port}", None, "SASL_SSL"),
    ("SASL_PLAINTEXT://127.0.0.1:{port}", None, "SASL_PLAINTEXT"),
    ("CLIENT://127.0.0.1:{port}", "CLIENT:SSL,PLAINTEXT:PLAINTEXT", "SSL"),
])
def test_security_listener_without_its_settings_refuses_to_start(tmp_path, workers, listener, protocol_map, protocol):
    port = free_port()
    settings = [f"listeners={listener.format(port=port)}"]
    if protocol_map:
        settings.append(f"listener.security.protocol.map={protocol_map}")
    try:
        res = start_broker(tmp_path, *settings, workers=workers)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the broker started with {settings}")
    name = listener.split(":")[0]
    assert res.returncode != 0
    assert f"kafkafast: cannot start: listener {name}" in res.stderr
    # what it lacks is named: TLS wants a key store, SASL a mechanism it can serve (Kafka's default is GSSAPI)
    assert ("ssl.keystore.location" if "SSL" in protocol else "GSSAPI not supported") in res.stderr
    assert "Traceback" not in res.stderr
    assert not api_versions_ok(port, 0.5)


def test_listener_without_security_protocol_refuses_to_start(tmp_path):
    res = start_broker(tmp_path, f"listeners=INTERNAL://127.0.0.1:{free_port()}")
    assert res.returncode != 0
    assert "no security protocol defined for listener INTERNAL" in res.stderr


def test_named_listener_mapped_to_plaintext_is_served(broker_factory):
    port = free_port()
    b = broker_factory(port=port, settings={  # these --set values come after (and override) the default listener
        "listeners": f"internal://127.0.0.1:{port}",
        "advertised.listeners": f"INTERNAL://localhost:{port}",
        "listener.security.protocol.map": "internal:plaintext"})
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=15)
    assert [(x.host, x.port) for x in md.brokers.values()] == [("localhost", port)]
