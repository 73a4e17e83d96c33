"""Listening sockets for every configured listener (`security/listeners.py`), and the
servers on them.

`bind_listeners(config, copies)` claims each listener's address (refused if another broker
serves it) and binds it `copies` times (SO_REUSEPORT when more than one: one socket per
worker and listener; a port 0 listener binds a free port once and the copies join it),
without listening, and returns the specs with the ports actually bound. `serve_listeners`
starts, in the process that serves them (after the fork, once it can serve: listen()
happens there), one `limits.Acceptor` per listener (an accept loop that applies the
broker-wide connection limits and can pause accepting):
plain TCP, or TLS with the listener's SSLContext; every connection knows its listener
(Metadata answers with that listener's advertised endpoint) and gets a security session.
"""
from __future__ import annotations

import dataclasses
import errno
import socket
import time
from typing import Any

from kafkafast.config import ConfigError
from kafkafast.metrics import recorder as request_metrics
from kafkafast.runtime.connection import KafkaConnection
from kafkafast.runtime.limits import Acceptor, ConnectionLimits
from kafkafast.runtime.shared_counters import SharedCounters
from kafkafast.security.acl import AUTHORIZER_CLASSES
from kafkafast.security.jaas import jaas_for
from kafkafast.security.listeners import ListenerSpec, listener_specs
from kafkafast.security.sasl import enabled_mechanisms
from kafkafast.security.tls import PrincipalMapper, server_context


# how long a listener's address lock is waited for before another broker is said to hold it
LOCK_RELEASE_WAIT_S = 3.0


class ListenerError(OSError):
    """A listener's address cannot be taken (in use, or by another kafkafast broker)."""


def claim_listener(host: str, port: int, *, probe: bool = True) -> socket.socket:
    """Makes sure no other broker serves host:port and keeps it that way while the returned
    lock lives (in this process or its workers). SO_REUSEPORT lets a second kafkafast bind
    the port of a running one, and the kernel would then share connections between the two
    (those queued at the one that stops are reset), so this refuses, as Kafka does:
    * a probe bind without SO_REUSEPORT fails if anything listens on an overlapping address;
    * an abstract Unix socket named after host:port catches a kafkafast broker that is
      starting (its sockets are bound but not listening yet)."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _bind_lock(lock, f"\0kafkafast-listener-{host}:{port}")
        if probe:
            make_listen_socket(host, port).close()
    except OSError as exc:
        lock.close()
        if isinstance(exc, ListenerError):
            raise
        raise ListenerError(exc.errno, f"cannot listen on {host}:{port}: another kafkafast broker is "
                                       "using it") from None
    return lock


def _bind_lock(lock: socket.socket, name: str, wait_s: float = LOCK_RELEASE_WAIT_S) -> None:
    """Binds the abstract name, waiting up to `wait_s` while it is taken: a broker stopped or
    killed a moment ago may still hold it in a worker that is exiting (its port already free);
    a broker that is really running keeps it, and the bind fails after the wait."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lock.bind(name)
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
        time.sleep(0.05)


def make_listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to host:port but not listening: whoever serves it listens (with
    LISTEN_BACKLOG) once it can serve, and until then the kernel refuses connections to it
    (and routes none to it) instead of queueing them where nothing accepts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host or "0.0.0.0", port))
    except OSError as exc:
        sock.close()
        raise ListenerError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def bind_listeners(config: Any, copies: int = 1, *, reuse_port: bool = False
                   ) -> tuple[list[ListenerSpec], list[list[socket.socket]], list[socket.socket]]:
    """(specs with bound ports, sockets[copy][listener], locks): each listener's address
    claimed (`claim_listener`; the locks are kept open as long as the broker serves) and
    bound `copies` times, not listening yet."""
    specs = listener_specs(config.props)
    try:
        validate_security(specs)
    except ValueError as exc:  # a listener that cannot be served as configured is never served otherwise
        raise ConfigError(str(exc)) from None
    socks: list[list[socket.socket]] = [[] for _ in range(copies)]
    bound = []
    locks: list[socket.socket] = []
    try:
        for spec in specs:
            if spec.port:
                locks.append(claim_listener(spec.host, spec.port))
            first = make_listen_socket(spec.host, spec.port, reuse_port=reuse_port or copies > 1)
            port = first.getsockname()[1]
            if not spec.port:
                locks.append(claim_listener(spec.host, port, probe=False))  # a port the kernel just gave out
            socks[0].append(first)
            for c in range(1, copies):
                socks[c].append(make_listen_socket(spec.host, port, reuse_port=True))
            bound.append(dataclasses.replace(spec, port=port,
                                             advertised_port=spec.advertised_port or port))
    except BaseException:
        for s in [x for row in socks for x in row] + locks:
            s.close()
        raise
    return bound, socks, locks


def validate_security(specs: list[ListenerSpec]) -> None:
    """Fails start-up (ValueError) on a listener whose TLS or SASL settings cannot work."""
    cls = (specs[0].props.get("authorizer.class.name") or "").strip() if specs else ""
    if cls and cls not in AUTHORIZER_CLASSES:
        raise ValueError(f"authorizer.class.name={cls} is not supported (use one of {', '.join(AUTHORIZER_CLASSES)})")
    for spec in specs:
        if spec.tls:
            server_context(spec)
            PrincipalMapper(spec.get("ssl.principal.mapping.rules"))
        if spec.sasl:
            for mechanism in enabled_mechanisms(spec):
                jaas_for(spec, mechanism)  # raises JaasError (a ValueError) on a bad sasl.jaas.config


async def serve_listeners(broker: Any, specs: list[ListenerSpec], socks: list[socket.socket],
                          tracker: set) -> tuple[list[Any], Any]:
    """Starts accepting on every listener (`limits.Acceptor`: connection limits counted in
    `broker.counters`, the area shared by all workers); returns (acceptors, limits)."""
    max_req = broker.config.get_int("socket.request.max.bytes")
    if getattr(broker, "counters", None) is None:  # a single-process broker: its own area, no lock
        broker.counters = SharedCounters.for_config(broker.config, 1, None)
    limits = ConnectionLimits(broker.config, broker.counters, broker.placement.index, specs)
    limits.reconfigure(broker.effective_connection_configs())  # dynamic connection quotas
    broker.limits = limits
    limits.refresh = broker.refresh_dynamic
    limits.start()
    for i, (spec, sock) in enumerate(zip(specs, socks)):
        ctx = server_context(spec) if spec.tls else None

        def factory(spec: ListenerSpec = spec) -> KafkaConnection:
            return KafkaConnection(broker, max_req, tracker=tracker, listener=spec, limits=limits)

        limits.acceptors.append(Acceptor(limits, i, spec, sock, factory, ctx))
        request_metrics.listener_served(spec.name)
    limits.reload_tls(broker.dynamic_broker_configs())  # key stores replaced at run time (security/tls.py)
    for acceptor in limits.acceptors:
        acceptor.start()
    broker.listener_specs = specs
    return list(limits.acceptors), limits
