"""Connection limits against hostile or broken clients: idle connections closed after
connections.max.idle.ms, max.connections.per.ip (with overrides) enforced at accept,
max.connections pausing accept until a connection closes (the inter-broker listener exempt,
the least recently active client closed instead), and queued.max.requests back-pressure that still answers everything."""
from __future__ import annotations

import resource
import selectors
import socket
import struct
import time

import pytest

from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(120)

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, 0)  # size, key 18, v0, correlation 7, client id ""


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def answered(s: socket.socket) -> bool:
    """Sends ApiVersions v0; True if the broker answers, False if it closed the connection."""
    try:
        s.sendall(API_VERSIONS_V0)
    except (ConnectionResetError, BrokenPipeError):
        return False
    return answered_within(s, 5.0) is True


def answered_within(s: socket.socket, timeout: float) -> bool | None:
    """Waits up to `timeout` for the answer to an ApiVersions v0 already sent: True when it
    came, None when nothing came yet (the connection stays open), False when closed."""
    s.settimeout(timeout)
    try:
        head = s.recv(4)
    except socket.timeout:
        return None
    except (ConnectionResetError, BrokenPipeError):
        return False
    if len(head) < 4:
        return False
    size = struct.unpack(">i", head)[0]
    s.settimeout(5)
    got = b""
    while len(got) < size:
        chunk = s.recv(size - len(got))
        if not chunk:
            return False
        got += chunk
    return struct.unpack(">i", got[:4])[0] == 7


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


IDLE_CONNECTIONS = 2000


@pytest.fixture
def many_descriptors():
    """Room for the idle-connection test's sockets in this process and in the broker it starts
    (a child inherits the limit): each side holds one descriptor a connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE_CONNECTIONS * 2 + 1000
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))  # root may raise the hard limit too
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def closed_ones(socks: list[socket.socket], wait: float) -> set[socket.socket]:
    """The sockets among `socks` that the peer has closed, waiting up to `wait` for any to become readable."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    try:
        ready = [key.fileobj for key, _ in sel.select(wait)]
    finally:
        sel.close()
    return {s for s in ready if closed_by_peer(s, 0.5)}


def test_idle_connections_are_closed(broker_factory, many_descriptors):
    b = broker_factory(settings={"connections.max.idle.ms": "1500"})
    idle = [connect(b.port) for _ in range(IDLE_CONNECTIONS)]
    assert all(answered(s) for s in idle[-5:])  # accepted (the first ones may already be idle-closed)
    busy = connect(b.port)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # a connection in use is not idle
        assert answered(busy)
        time.sleep(0.3)
    give_up = time.monotonic() + 30
    still_open = list(idle)
    while still_open and time.monotonic() < give_up:
        gone = closed_ones(still_open, 0.5)
        still_open = [s for s in still_open if s not in gone]
    assert still_open == [], f"{len(still_open)} of {IDLE_CONNECTIONS} idle connections still open"
    assert answered(busy)
    for s in idle + [busy]:
        s.close()


def test_max_connections_per_ip_and_overrides(broker_factory):
    b = broker_factory(settings={"max.connections.per.ip": "3", "max.connections.per.ip.overrides": "127.0.0.1:6"})
    time.sleep(0.5)  # the harness's readiness probe holds a slot until the broker has seen it close
    local = [connect(b.port) for _ in range(7)]
    assert [answered(s) for s in local] == [True] * 6 + [False]  # the override for 127.0.0.1
    other = [connect(b.port, "127.0.0.2") for _ in range(4)]
    assert [answered(s) for s in other] == [True] * 3 + [False]  # the default cap
    other[0].close()
    deadline = time.monotonic() + 10
    while True:  # a closed connection frees its slot once the broker has seen it go
        again = connect(b.port, "127.0.0.2")
        if answered(again):
            break
        again.close()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    for s in local + other + [again]:
        s.close()


def test_max_connections_caps_all_addresses_and_pauses_accepting(broker_factory):
    b = broker_factory(settings={"max.connections": "4"})
    time.sleep(0.5)  # the readiness probe's slot
    conns = [connect(b.port, src) for src in ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1")]
    assert all(answered(s) for s in conns)
    waiting = connect(b.port, "127.0.0.2")  # in the backlog: the broker stopped accepting (as Kafka's Acceptor)
    waiting.sendall(API_VERSIONS_V0)
    assert answered_within(waiting, 1.5) is None
    conns[0].close()
    assert answered_within(waiting, 10.0) is True
    for s in conns + [waiting]:
        s.close()


def test_queued_max_requests_back_pressure_answers_every_pipelined_request(broker_factory):
    b = broker_factory(settings={"queued.max.requests": "2", "queued.max.request.bytes": "4096"})
    clients = [RawClient(b.port) for _ in range(3)]
    for c in clients:
        c.send_raw(b"".join(struct.pack(">ihhih", 10, 18, 0, i, 0) for i in range(200)))
    for c in clients:
        for i in range(200):
            frame = c.recv_frame()
            assert frame is not None and struct.unpack(">i", frame[:4])[0] == i
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
        c.close()


def test_inter_broker_listener_passes_max_connections_and_the_least_recently_active_client_goes(broker_factory):
    from tests.support.broker_process import free_port

    port, clients = free_port(), free_port()
    b = broker_factory(port=port, settings={  # PLAINTEXT is the inter-broker listener (security.inter.broker.protocol)
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CLIENTS://127.0.0.1:{clients}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:PLAINTEXT", "max.connections": "3"})
    # While the readiness probe's connection is still counted, the third client waits in the
    # backlog until it is gone: once all three answered, the broker holds exactly these three.
    conns = [connect(clients) for _ in range(3)]
    for s in conns:  # one after the other, each answered before the next asks: conns[0] is the least recently active
        assert answered(s)
    broker_link = connect(b.port)
    assert answered(broker_link)  # not held back by max.connections, as in Kafka
    assert closed_by_peer(conns[0], 20)  # the broker went back to 3 by closing the oldest-idle client
    assert answered(conns[1]) and answered(conns[2]) and answered(broker_link)
    for s in conns + [broker_link]:
        s.close()
