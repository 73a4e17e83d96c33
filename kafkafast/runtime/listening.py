"""Listening sockets for every configured listener (`security/listeners.py`), and the
servers on them.

`bind_listeners(config, copies)` binds each listener `copies` times (SO_REUSEPORT when more
than one: one socket per worker and listener; a port 0 listener binds a free port once and
the copies join it) and returns the specs with the ports actually bound. `serve_listeners`
starts, in the process that serves them (after the fork), one asyncio server per listener:
plain TCP, or TLS with the listener's SSLContext; every connection knows its listener
(Metadata answers with that listener's advertised endpoint) and gets a security session.
"""
from __future__ import annotations

import asyncio
import dataclasses
import socket
from typing import Any

from kafkafast.security.listeners import ListenerSpec, listener_specs


def make_listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host or "0.0.0.0", port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def bind_listeners(config: Any, copies: int = 1, *,
                   reuse_port: bool = False) -> tuple[list[ListenerSpec], list[list[socket.socket]]]:
    """(specs with bound ports, sockets[copy][listener])."""
    specs = listener_specs(config.props)
    validate_security(specs)
    socks: list[list[socket.socket]] = [[] for _ in range(copies)]
    bound = []
    for spec in specs:
        first = make_listen_socket(spec.host, spec.port, reuse_port=reuse_port or copies > 1)
        port = first.getsockname()[1]
        socks[0].append(first)
        for c in range(1, copies):
            socks[c].append(make_listen_socket(spec.host, port, reuse_port=True))
        bound.append(dataclasses.replace(spec, port=port,
                                         advertised_port=spec.advertised_port or port))
    return bound, socks


def validate_security(specs: list[ListenerSpec]) -> None:
    """Fails start-up (ValueError) on a listener whose TLS or SASL settings cannot work."""
    from kafkafast.security.acl import AUTHORIZER_CLASSES
    from kafkafast.security.jaas import jaas_for
    from kafkafast.security.sasl import enabled_mechanisms
    from kafkafast.security.tls import PrincipalMapper, server_context

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
                          tracker: set) -> tuple[list[asyncio.AbstractServer], Any]:
    from kafkafast.runtime.connection import KafkaConnection
    from kafkafast.runtime.limits import ConnectionLimits
    from kafkafast.security.tls import server_context

    loop = asyncio.get_running_loop()
    max_req = broker.config.get_int("socket.request.max.bytes")
    limits = ConnectionLimits(broker.config)
    limits.start()
    servers = []
    for spec, sock in zip(specs, socks):
        ctx = server_context(spec) if spec.tls else None

        def factory(spec: ListenerSpec = spec) -> KafkaConnection:
            return KafkaConnection(broker, max_req, tracker=tracker, listener=spec, limits=limits)

        servers.append(await loop.create_server(factory, sock=sock, ssl=ctx,
                                                ssl_handshake_timeout=10.0 if ctx else None))
    broker.listener_specs = specs
    return servers, limits
