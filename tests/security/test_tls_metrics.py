"""TLS handshakes in the authentication metrics, as Kafka counts them on an SSL listener:
kafka_server_socket_server_metrics_failed_authentication_total{listener="SSL"} moves once
for each handshake the client's side made fail (untrusted, expired or missing client
certificate with ssl.client.auth=required, a plaintext Kafka client on the TLS port), not
for a connection that ends without a TLS error (a bare connect and close, half a
ClientHello); successful_authentication_total{listener="SSL"} once per completed
handshake; PLAINTEXT connections count in neither (Kafka's PLAINTEXT channel is ready from
the start); on SASL_SSL a failed handshake counts under that listener, a completed one only
once SASL succeeds. In one process and over two worker processes."""
from __future__ import annotations

import socket
import ssl
import struct
import time

import pytest

from tests.integration.test_metrics import scrape, value
from tests.security.conftest import PLAIN_JAAS, tls_settings
from tests.support.broker_process import BrokerProcess, _recv, free_port

pytestmark = pytest.mark.timeout(120)

FAILED = "kafka_server_socket_server_metrics_failed_authentication_total"
OK = "kafka_server_socket_server_metrics_successful_authentication_total"
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
FRAME = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0


def api_versions(s) -> int:
    """Sends ApiVersions v0 on `s` and returns the answer's correlation id."""
    s.sendall(FRAME)
    size = struct.unpack(">i", _recv(s, 4))[0]
    return struct.unpack(">i", _recv(s, size)[:4])[0]


def tls_client(pki, port: int, cert, key) -> str:
    """A TLS client with this certificate (None: none): 'answered' if ApiVersions was answered,
    else the error that ended it."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                # TLS 1.3: the client's handshake ends before the broker checked its
                # certificate; the broker's refusal arrives on the first read
                return "answered" if api_versions(s) == 7 else "wrong answer"
    except OSError as exc:  # ssl.SSLError, a reset, or closed (tests.support's _recv)
        return type(exc).__name__


def plaintext_client(port: int) -> str:
    """A Kafka client without TLS: its ApiVersions request is not a TLS record."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            return "answered" if api_versions(s) == 7 else "wrong answer"
        except OSError as exc:
            return type(exc).__name__


def wait_for(mport: int, want: dict) -> dict:
    """Scrapes until every (name, listener) in `want` has at least its value (bounded), then
    once more a moment later, so that a count past it shows too."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = scrape(mport)
        if all(value(m, name, listener=lst) >= n for (name, lst), n in want.items()):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    return scrape(mport)


@pytest.mark.parametrize("workers", [0, 2])
def test_tls_handshakes_count_as_authentications(tmp_path, pki, workers):
    mport, tls_port, plain_port, sasl_ssl_port = free_port(), free_port(), free_port(), free_port()
    settings = tls_settings(pki, **{
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{tls_port},"
                     f"SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "ssl.client.auth": "required", "listener.name.sasl_ssl.ssl.client.auth": "none",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
        "metrics.port": str(mport), "metrics.host": "127.0.0.1"})
    broker = BrokerProcess(tmp_path / "data", port=plain_port, workers=workers, settings=settings)
    broker.start()
    try:
        before = scrape(mport)
        for name in (FAILED, OK):
            for lst in ("SSL", "PLAINTEXT", "SASL_SSL"):
                assert before[(name, (("listener", lst),))] == 0, (name, lst)  # served from the start

        # not authentications: a port probe, half a ClientHello, then the connection ends
        for _ in range(2):
            socket.create_connection(("127.0.0.1", tls_port), timeout=10).close()
        with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as s:
            s.sendall(b"\x16\x03\x01\x02\x00\x01")

        # failed authentications: three refused certificates, two plaintext Kafka clients
        assert tls_client(pki, tls_port, pki.untrusted_cert, pki.untrusted_key) != "answered"
        assert tls_client(pki, tls_port, pki.expired_cert, pki.expired_key) != "answered"
        assert tls_client(pki, tls_port, None, None) != "answered"
        assert plaintext_client(tls_port) != "answered"
        assert plaintext_client(tls_port) != "answered"

        # successful: two mutual-TLS clients; PLAINTEXT traffic counts in neither
        assert tls_client(pki, tls_port, pki.client_cert, pki.client_key) == "answered"
        assert tls_client(pki, tls_port, pki.client_cert, pki.client_key) == "answered"
        assert plaintext_client(plain_port) == "answered"
        # on SASL_SSL a failed handshake counts under that listener; a completed one waits for SASL
        assert plaintext_client(sasl_ssl_port) != "answered"
        assert tls_client(pki, sasl_ssl_port, None, None) == "answered"

        m = wait_for(mport, {(FAILED, "SSL"): 5, (OK, "SSL"): 2, (FAILED, "SASL_SSL"): 1})
        assert value(m, FAILED, listener="SSL") == 5
        assert value(m, OK, listener="SSL") == 2
        assert value(m, FAILED, listener="PLAINTEXT") == 0
        assert value(m, OK, listener="PLAINTEXT") == 0
        assert value(m, FAILED, listener="SASL_SSL") == 1
        assert value(m, OK, listener="SASL_SSL") == 0
        assert "failed authentication with 127.0.0.1 on SSL (TLS handshake:" in broker.log_tail(400)
    finally:
        broker.kill()
