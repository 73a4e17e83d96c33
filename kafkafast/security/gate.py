"""What a connection lets through before its handler sees a frame (see `sasl.py`):
before authentication only ApiVersions/SaslHandshake/SaslAuthenticate, or the bare tokens
of a v0 handshake; after a KIP-368 session expired only SaslHandshake/SaslAuthenticate.
"""
from __future__ import annotations

from typing import Any

from kafkafast.protocol.errors import CloseConnection
from kafkafast.security.context import security_of
from kafkafast.security.sasl import PRE_AUTH_KEYS, AuthenticationFailed, SecuritySession
from kafkafast.security.tls import PrincipalMapper, subject_dn

REAUTH_KEYS = frozenset((17, 36))


def new_session(listener: Any, transport: Any, peer: Any) -> SecuritySession:
    host = peer[0] if isinstance(peer, tuple) and peer else "127.0.0.1"
    session = SecuritySession(listener, host)
    if listener.tls:
        cert = transport.get_extra_info("peercert")
        if cert:
            mapper = listener.__dict__.get("_mapper")
            if mapper is None:
                mapper = listener._mapper = PrincipalMapper(listener.get("ssl.principal.mapping.rules"))
            if not listener.sasl:  # on SASL_SSL the SASL identity is the principal
                session.principal = "User:" + mapper.name(subject_dn(cert))
    return session


def screen(conn: Any, frame: Any) -> list | None:
    """None: dispatch the frame normally; a list: send these parts instead (the answer to
    a bare v0 token). Raises CloseConnection when the frame is not allowed."""
    session = conn.session
    if session.authenticated and not session.expires_at and not session.raw_tokens:
        return None  # the common case: nothing to screen
    if session.raw_tokens:
        broker = conn.broker
        sec = security_of(broker)
        try:
            token, _ = session.step(bytes(frame), sec.reauth_ms)
        except AuthenticationFailed as exc:
            raise CloseConnection(f"SASL authentication failed: {exc}") from None
        if session.authenticated:
            conn.max_request = broker.config.get_int("socket.request.max.bytes")
        return [len(token).to_bytes(4, "big") + token]
    if len(frame) < 8:
        raise CloseConnection("frame shorter than a request header")
    api_key = int.from_bytes(frame[0:2], "big", signed=True)
    if not session.authenticated:
        if api_key not in PRE_AUTH_KEYS:
            raise CloseConnection(f"API {api_key} before SASL authentication completed")
    elif session.expires_at and api_key not in REAUTH_KEYS and session.expired():
        raise CloseConnection("SASL session expired without re-authentication (connections.max.reauth.ms)")
    return None
