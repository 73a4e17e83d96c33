"""Connection limits of a multi-worker broker (`--workers 3`) hold for the broker, not per
worker: max.connections.per.ip counted across workers, max.connections pauses accepting
(the extra connection is served once another closes, as Kafka's Acceptor blocks), and
connections that never finish their TLS handshake are capped and closed after
kafkafast.connection.setup.timeout.ms without keeping a real client out."""
from __future__ import annotations

import socket
import ssl
import time

import pytest

from tests.security.test_limits import API_VERSIONS_V0, answered, answered_within, closed_by_peer, connect

pytestmark = pytest.mark.timeout(120)

WORKERS = 3


def settle() -> None:
    """The harness's readiness probe closed its connection just before start() returned:
    give the broker a moment to see it go (it holds a slot until then)."""
    time.sleep(0.5)


def test_max_connections_per_ip_is_counted_across_workers(broker_factory):
    b = broker_factory(workers=WORKERS, settings={"max.connections.per.ip": "4"})
    settle()
    conns = [connect(b.port) for _ in range(10)]  # spread over the workers by SO_REUSEPORT
    usable = [s for s in conns if answered(s)]
    assert len(usable) == 4  # per worker it would be up to 4 on each of the 3 workers
    usable[0].close()
    deadline = time.monotonic() + 10
    while True:  # the slot comes back once the broker saw the connection go, on any worker
        again = connect(b.port)
        if answered(again):
            break
        again.close()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    extra = connect(b.port)
    assert not answered(extra)  # and it is the only one
    for s in conns + [again, extra]:
        s.close()


def test_max_connections_pauses_accepting_until_a_connection_closes(broker_factory):
    b = broker_factory(workers=WORKERS, settings={"max.connections": "3"})
    settle()
    first = [connect(b.port, src) for src in ("127.0.0.1", "127.0.0.2", "127.0.0.3")]
    assert all(answered(s) for s in first)
    waiting = connect(b.port, "127.0.0.4")  # the kernel completes the TCP handshake (backlog)...
    waiting.sendall(API_VERSIONS_V0)
    assert answered_within(waiting, 2.0) is None  # ...but the broker neither serves nor closes it
    first[1].close()
    assert answered_within(waiting, 10.0) is True  # served once another connection closed
    for s in first + [waiting]:
        s.close()


def test_pending_tls_handshakes_are_capped_timed_out_and_keep_no_client_out(secure_broker, pki):
    b = secure_broker(listeners=("SSL",), workers=WORKERS, settings={
        "max.connections": "40", "kafkafast.max.pending.connections": "12",
        "kafkafast.connection.setup.timeout.ms": "2500"})
    settle()
    port = b.ports["SSL"]
    hostile = []
    for _ in range(60):  # TCP connections that never send a ClientHello
        s = socket.socket()
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        hostile.append(s)
    time.sleep(0.5)
    # A real TLS client is served at once, although 60 handshakes were started before it and
    # max.connections is 40: the pending cap closed the oldest of them.
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.check_hostname = False
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as tls:
            assert answered(tls)
    assert time.monotonic() - started < 2.0  # well before the setup timeout would have freed slots
    evicted = sum(closed_by_peer(s, 0.01) for s in hostile)
    assert evicted >= 60 - 12 - WORKERS  # over the cap: the oldest went (each worker may lag by one)
    deadline = time.monotonic() + 15
    open_ = list(hostile)
    while open_ and time.monotonic() < deadline:
        open_ = [s for s in open_ if not closed_by_peer(s, 0.01)]
        time.sleep(0.2)
    assert open_ == []  # the rest were closed after the setup timeout
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as tls:
            assert answered(tls)
    for s in hostile:
        s.close()


def test_unauthenticated_sasl_connections_are_closed_after_the_setup_timeout(secure_broker):
    from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
    from kafkafast.protocol._generated.sasl_authenticate import SaslAuthenticateRequest
    from kafkafast.protocol._generated.sasl_handshake import SaslHandshakeRequest
    from tests.support.raw_client import RawClient

    b = secure_broker(listeners=("SASL_PLAINTEXT",), workers=WORKERS,
                      settings={"kafkafast.connection.setup.timeout.ms": "2000"})
    port = b.ports["SASL_PLAINTEXT"]
    lingering = [RawClient(port) for _ in range(6)]
    for c in lingering:  # allowed before authentication, but it does not authenticate
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
    authenticated = RawClient(port)
    assert authenticated.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    assert authenticated.request(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 0).error_code == 0
    time.sleep(3.5)
    for c in lingering:
        c.sock.settimeout(5)
        assert c.is_closed_by_peer()
    assert authenticated.request(ApiVersionsRequest(), 0).error_code == 0  # authenticated in time: stays
    for c in lingering + [authenticated]:
        c.close()


def test_a_killed_workers_connections_stop_counting(broker_factory):
    import os
    import signal

    import psutil

    b = broker_factory(workers=WORKERS, settings={"max.connections.per.ip": "3"})
    settle()
    conns = [connect(b.port) for _ in range(3)]
    assert all(answered(s) for s in conns)
    ports = {s.getsockname()[1]: s for s in conns}
    holder = next(w for w in psutil.Process(b.proc.pid).children()
                  if any(c.raddr and c.raddr.port in ports for c in w.net_connections("tcp")))
    held = [ports[c.raddr.port] for c in holder.net_connections("tcp") if c.raddr and c.raddr.port in ports]
    os.kill(holder.pid, signal.SIGKILL)  # its connections die with it; the supervisor clears its counts
    for s in held:
        assert closed_by_peer(s, 5)
    fresh = []
    deadline = time.monotonic() + 20
    while len(fresh) < len(held):
        s = connect(b.port)
        if answered(s):
            fresh.append(s)
        else:
            s.close()
            assert time.monotonic() < deadline, f"only {len(fresh)} of {len(held)} slots came back"
            time.sleep(0.2)
    extra = connect(b.port)
    assert not answered(extra)  # still 3 in all
    for s in conns + fresh + [extra]:
        s.close()


def test_a_listeners_max_connections_holds_that_listener_only(broker_factory):
    from tests.support.broker_process import free_port

    port, other = free_port(), free_port()
    b = broker_factory(workers=WORKERS, port=port, settings={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},OTHER://127.0.0.1:{other}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        "listener.name.other.max.connections": "2"})
    settle()
    capped = [connect(other) for _ in range(2)]
    assert all(answered(s) for s in capped)
    waiting = connect(other)
    waiting.sendall(API_VERSIONS_V0)
    assert answered_within(waiting, 1.5) is None  # OTHER is full: accepting paused there...
    free = [connect(port) for _ in range(4)]
    assert all(answered(s) for s in free)  # ...while PLAINTEXT accepts as usual
    capped[0].close()
    assert answered_within(waiting, 10.0) is True
    for s in capped + free + [waiting]:
        s.close()
