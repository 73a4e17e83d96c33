"""SASL on SASL_PLAINTEXT / SASL_SSL listeners: the per-connection session and the
server side of PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (unsecured JWS, as Kafka ships).

Flow (Kafka's SaslServerAuthenticator): ApiVersions (optional) -> SaslHandshake naming a
mechanism from `sasl.enabled.mechanisms` -> tokens, either in SaslAuthenticate requests
(handshake v1) or, after a v0 handshake, as bare size-prefixed tokens without a request
header (what old librdkafka sends). Until the exchange succeeds a connection may send only
ApiVersions/SaslHandshake/SaslAuthenticate and requests of at most
`sasl.server.max.receive.size` (512 KiB); anything else closes it. A failed exchange
answers SASL_AUTHENTICATION_FAILED and the connection is closed after
`connection.failed.authentication.delay.ms`. KIP-368: with `connections.max.reauth.ms` > 0
the SaslAuthenticate response carries the session lifetime; the client re-authenticates
(same principal and mechanism) before it ends, and a request other than
SaslHandshake/SaslAuthenticate after it ended closes the connection.

Users: PLAIN checks `user_<name>="<password>"` options of the PlainLoginModule entry
(`listener.name.<l>.plain.sasl.jaas.config`, then `sasl.jaas.config`); SCRAM checks the
salted keys in the SCRAM store (`scram.py`); OAUTHBEARER accepts an unsigned JWS
(`alg: none`) whose `exp` has not passed and whose principal claim (`sub`, or the option
`unsecuredValidatorPrincipalClaimName`) is set; `unsecuredValidatorRequiredScope` lists
scopes the token must carry.
"""
from __future__ import annotations

import base64
import hmac
import json
import time
from typing import Any

from kafkafast.security.jaas import jaas_for
from kafkafast.security.scram import MECHANISMS as SCRAM_MECHANISMS
from kafkafast.security.scram import ScramError, ScramServer

SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PRE_AUTH_MAX_BYTES = 512 * 1024
PRE_AUTH_KEYS = frozenset((17, 18, 36))  # SaslHandshake, ApiVersions, SaslAuthenticate
ANONYMOUS = "User:ANONYMOUS"


class AuthenticationFailed(Exception):
    pass


def enabled_mechanisms(listener: Any) -> list[str]:
    text = listener.get("sasl.enabled.mechanisms", "GSSAPI")
    mechs = [m.strip().upper() for m in text.split(",") if m.strip()]
    bad = [m for m in mechs if m not in SUPPORTED]
    if bad:
        raise ValueError(f"listener {listener.name}: SASL mechanism(s) {', '.join(bad)} not supported "
                         f"(sasl.enabled.mechanisms may name {', '.join(SUPPORTED)})")
    if not mechs:
        raise ValueError(f"listener {listener.name}: sasl.enabled.mechanisms is empty")
    return mechs


class PlainServer:
    def __init__(self, listener: Any) -> None:
        entry = jaas_for(listener, "PLAIN")
        self.users = {k[5:]: v for k, v in (entry[1] if entry else {}).items() if k.startswith("user_")}
        self.done = False
        self.username = ""

    def step(self, data: bytes) -> bytes:
        parts = bytes(data).split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user or not password:
            raise AuthenticationFailed("Authentication failed: username or password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.username, self.done = user, True
        return b""


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class OAuthBearerServer:
    def __init__(self, listener: Any) -> None:
        entry = jaas_for(listener, "OAUTHBEARER")
        self.options = entry[1] if entry else {}
        self.done = False
        self.username = ""
        self.lifetime_ms: int | None = None

    def step(self, data: bytes) -> bytes:
        msg = bytes(data).decode("utf-8", "replace")
        gs2, sep, kvs = msg.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        auth = next((kv[5:] for kv in kvs.split("\x01") if kv.startswith("auth=")), None)
        if auth is None or not auth.startswith("Bearer "):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: no bearer token")
        token = auth[7:].strip()
        try:
            header_b64, payload_b64, signature = token.split(".")
            header, claims = json.loads(_b64url(header_b64)), json.loads(_b64url(payload_b64))
        except (ValueError, TypeError):
            raise AuthenticationFailed("invalid_token: not a JWS compact serialization") from None
        if not isinstance(header, dict) or header.get("alg") != "none" or signature:
            raise AuthenticationFailed("invalid_token: only unsecured JWS (alg none) is accepted")
        if not isinstance(claims, dict):
            raise AuthenticationFailed("invalid_token: claims are not a JSON object")
        skew = int(self.options.get("unsecuredValidatorAllowableClockSkewMs", "0")) / 1000.0
        exp = claims.get("exp")
        now = time.time()
        if not isinstance(exp, (int, float)) or exp + skew <= now:
            raise AuthenticationFailed("invalid_token: the token has no expiry or has expired")
        sub = claims.get(self.options.get("unsecuredValidatorPrincipalClaimName", "sub"))
        if not isinstance(sub, str) or not sub.strip():
            raise AuthenticationFailed("invalid_token: no principal claim")
        required = [s for s in self.options.get("unsecuredValidatorRequiredScope", "").replace(",", " ").split() if s]
        scope = claims.get(self.options.get("unsecuredValidatorScopeClaimName", "scope"), [])
        scopes = scope.split() if isinstance(scope, str) else list(scope or [])
        if any(s not in scopes for s in required):
            raise AuthenticationFailed("insufficient_scope")
        self.username, self.done = sub, True
        self.lifetime_ms = int((exp - now) * 1000)
        return b""


def new_exchange(mechanism: str, listener: Any, scram_store: Any) -> Any:
    if mechanism == "PLAIN":
        return PlainServer(listener)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(mechanism, scram_store)
    return OAuthBearerServer(listener)


class SecuritySession:
    """What one connection has proven: the listener it came in on, its principal, and
    where its SASL exchange stands."""

    __slots__ = ("listener", "principal", "authenticated", "mechanism", "exchange", "raw_tokens",
                 "expires_at", "failed", "host", "reauthenticating")

    def __init__(self, listener: Any, host: str, principal: str = ANONYMOUS) -> None:
        self.listener = listener
        self.host = host
        self.principal = principal
        self.authenticated = not listener.sasl
        self.mechanism: str | None = None
        self.exchange: Any = None
        self.raw_tokens = False  # after SaslHandshake v0: bare tokens, no request headers
        self.expires_at = 0.0  # monotonic; 0: no re-authentication required
        self.failed = False
        self.reauthenticating = False

    def expired(self) -> bool:
        return self.expires_at != 0.0 and time.monotonic() > self.expires_at

    def handshake(self, mechanism: str, version: int, enabled: list[str], scram_store: Any,
                  reauth_ms: int = 0) -> None:
        if self.exchange is not None and not self.exchange.done:
            raise AuthenticationFailed("SaslHandshake during an authentication exchange")
        if self.authenticated and reauth_ms <= 0:
            raise AuthenticationFailed("re-authentication is disabled (connections.max.reauth.ms=0)")
        if self.authenticated:
            if mechanism != self.mechanism:
                raise AuthenticationFailed("re-authentication must use the mechanism of the first authentication")
            self.reauthenticating = True
        self.mechanism = mechanism
        self.exchange = new_exchange(mechanism, self.listener, scram_store)
        self.raw_tokens = version == 0

    def step(self, token: bytes, reauth_ms: int) -> tuple[bytes, int]:
        """One client token -> (server token, session lifetime ms; 0 while not done).
        Raises AuthenticationFailed."""
        ex = self.exchange
        if ex is None:
            raise AuthenticationFailed("SaslAuthenticate before SaslHandshake")
        try:
            out = ex.step(token)
        except ScramError as exc:
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}: {exc}") from None
        if not ex.done:
            return out, 0
        principal = f"User:{ex.username}"
        if self.reauthenticating and principal != self.principal:
            raise AuthenticationFailed("re-authentication must keep the principal")
        self.principal = principal
        self.authenticated = True
        self.raw_tokens = False
        self.reauthenticating = False
        lifetime = reauth_ms if reauth_ms > 0 else 0
        token_ms = getattr(ex, "lifetime_ms", None)
        if token_ms is not None and reauth_ms > 0:
            lifetime = max(min(lifetime, token_ms), 1)
        self.expires_at = time.monotonic() + lifetime / 1000.0 if lifetime else 0.0
        return out, lifetime
