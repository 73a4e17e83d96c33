"""The client side of TLS and SASL, for connections the broker itself opens (inter-broker
traffic on `inter.broker.listener.name`), configured with the same Kafka property names.

`client_ssl_context(listener)`: trusts `ssl.truststore.*`, presents `ssl.keystore.*` (for
listeners that require client certificates), checks the server's host name when
`ssl.endpoint.identification.algorithm` is `https` (Kafka's default; empty turns it off).
`sasl_client(mechanism, username, password)` gives the token exchange of PLAIN or
SCRAM-SHA-256/512: `first()` is the first token, `step(server token)` the next (or None
when done); a server signature that does not verify raises SaslClientError. The broker's
own credentials come from the `username`/`password` options of the listener's JAAS entry
(`broker_credentials`), as Kafka's login modules read them.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import ssl
import time
from typing import Any

from kafkafast.protocol._generated.sasl_authenticate import SaslAuthenticateRequest
from kafkafast.protocol._generated.sasl_handshake import SaslHandshakeRequest
from kafkafast.protocol.errors import SaslAuthenticationFailedError
from kafkafast.security.jaas import jaas_for, parse_jaas
from kafkafast.security.listeners import listener_specs
from kafkafast.security.scram import MECHANISMS
from kafkafast.security.tls import PROTOCOL_VERSIONS, _pem_file


class SaslClientError(SaslAuthenticationFailedError):
    """The broker refused the login, or its SCRAM signature does not verify: Kafka's
    SaslAuthenticationException (SASL_AUTHENTICATION_FAILED), not retried."""


def client_ssl_context(listener: Any) -> ssl.SSLContext:
    get = listener.get
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    trust, trust_inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if trust:
        ctx.load_verify_locations(cafile=trust)
    elif trust_inline:
        ctx.load_verify_locations(cadata=trust_inline.replace("\\n", "\n"))
    else:
        ctx.load_default_certs()
    password = get("ssl.key.password") or get("ssl.keystore.password") or None
    location, key, chain = get("ssl.keystore.location"), get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if location:
        ctx.load_cert_chain(location, password=password)
    elif key and chain:
        temps = [_pem_file(chain), _pem_file(key)]
        try:
            ctx.load_cert_chain(temps[0], temps[1], password=password)
        finally:
            for p in temps:
                os.unlink(p)
    ctx.check_hostname = (get("ssl.endpoint.identification.algorithm", "https") or "").lower() == "https"
    versions = [PROTOCOL_VERSIONS[p.strip().upper()]
                for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    return ctx


def broker_credentials(listener: Any, mechanism: str) -> tuple[str, str]:
    entry = jaas_for(listener, mechanism)
    opts = entry[1] if entry else {}
    if "username" not in opts or "password" not in opts:
        raise SaslClientError(f"listener {listener.name}: the {mechanism} JAAS entry has no username/password "
                              "for the broker's own connections")
    return opts["username"], opts["password"]


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self.token = f"\0{username}\0{password}".encode()

    def first(self) -> bytes:
        return self.token

    def step(self, server: bytes) -> bytes | None:
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.hash = MECHANISMS[mechanism][0]
        self.password = password.encode()
        self.nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        self.bare = "n=" + username.replace("=", "=3D").replace(",", "=2C") + ",r=" + self.nonce
        self.state = 0

    def first(self) -> bytes:
        return ("n,," + self.bare).encode()

    def step(self, server: bytes) -> bytes | None:
        msg = bytes(server).decode()
        if self.state == 0:
            attrs = dict(part.split("=", 1) for part in msg.split(","))
            if not attrs.get("r", "").startswith(self.nonce):
                raise SaslClientError("SCRAM server nonce does not extend ours")
            salted = hashlib.pbkdf2_hmac(self.hash, self.password, base64.b64decode(attrs["s"]), int(attrs["i"]))
            without_proof = f"c=biws,r={attrs['r']}"
            auth = f"{self.bare},{msg},{without_proof}".encode()
            client_key = hmac.new(salted, b"Client Key", self.hash).digest()
            signature = hmac.new(hashlib.new(self.hash, client_key).digest(), auth, self.hash).digest()
            self.expected = hmac.new(hmac.new(salted, b"Server Key", self.hash).digest(), auth, self.hash).digest()
            self.state = 1
            proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
            return f"{without_proof},p={proof}".encode()
        if not msg.startswith("v=") or not hmac.compare_digest(base64.b64decode(msg[2:]), self.expected):
            raise SaslClientError("SCRAM server signature does not verify")
        self.state = 2
        return None


def sasl_client(mechanism: str, username: str, password: str) -> Any:
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise SaslClientError(f"no client for SASL mechanism {mechanism}")


# -- the broker's own outgoing connections (inter.broker.listener.name) ------------------------
class InterBrokerSecurity:
    """How this broker connects to the others: the inter-broker listener's protocol (from
    `inter.broker.listener.name`, else the listener named by `security.inter.broker.protocol`),
    a client TLS context for SSL/SASL_SSL, and for SASL_* the mechanism
    `sasl.mechanism.inter.broker.protocol` with the username/password of that listener's JAAS
    entry. Built once at start, so a missing setting stops the broker with a clear message."""

    def __init__(self, props: dict) -> None:
        specs = {s.name: s for s in listener_specs(props)}
        name = (props.get("inter.broker.listener.name") or props.get("security.inter.broker.protocol")
                or "PLAINTEXT").upper()
        spec = specs.get(name)
        if spec is None:
            raise ValueError(f"the inter-broker listener {name} is not one of listeners ({', '.join(specs)}); "
                             "set inter.broker.listener.name")
        self.listener = spec
        self.ssl_context = client_ssl_context(spec) if spec.tls else None
        self.mechanism: str | None = None
        self.credentials: tuple[str, str] | None = None
        if spec.sasl:
            mechanism = (props.get("sasl.mechanism.inter.broker.protocol") or "GSSAPI").upper()
            if mechanism != "PLAIN" and mechanism not in MECHANISMS:
                raise ValueError(f"sasl.mechanism.inter.broker.protocol={mechanism}: the broker's own connections "
                                 "speak PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
            self.mechanism = mechanism
            self.credentials = broker_credentials(spec, mechanism)

    def server_hostname(self, host: str) -> str | None:
        return host if self.ssl_context is not None else None

    def exchange(self) -> Any:
        """The SASL exchange as a generator of (request, version) that is sent the answers
        (None without SASL): SaslHandshake v1, then SaslAuthenticate v2 until the client
        is done; a refusal raises SaslClientError."""
        if self.mechanism is None:
            return None
        return _sasl_exchange(self.mechanism, *self.credentials)  # type: ignore[misc]


def _sasl_exchange(mechanism: str, username: str, password: str) -> Any:
    return _sasl_exchange_with(mechanism, sasl_client(mechanism, username, password), username)


def _sasl_exchange_with(mechanism: str, client: Any, who: str) -> Any:
    answer = yield SaslHandshakeRequest(mechanism=mechanism), 1
    if answer.error_code:
        raise SaslClientError(f"SaslHandshake {mechanism}: error {answer.error_code} "
                              f"(enabled: {', '.join(answer.mechanisms or [])})")
    token: bytes | None = client.first()
    while token is not None:
        answer = yield SaslAuthenticateRequest(auth_bytes=token), 2
        if answer.error_code:
            raise SaslClientError(f"SASL {mechanism} as {who}: {answer.error_message or answer.error_code}")
        token = client.step(bytes(answer.auth_bytes))


# -- a client's connections (the CLI's --command-config, the Spark source's kafka.* options) -------
# Every ssl.*/sasl.* client setting ClientSecurity reads; any other one is refused by name rather
# than accepted and left unused (a job that asked for something must get it or be told).
CLIENT_SSL_SETTINGS = frozenset({
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.certificates", "ssl.truststore.password",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "ssl.enabled.protocols", "ssl.protocol"})
CLIENT_SASL_SETTINGS = frozenset({"sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password"})
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class _Props:
    """Client properties with the `get(key, default)` of a listener spec."""

    def __init__(self, props: dict) -> None:
        self.props = props
        self.name = "client"

    def get(self, key: str, default: Any = None) -> Any:
        return self.props.get(key, default)


def _check_client_settings(props: dict, protocol: str) -> None:
    """Refuses, naming it, every ssl./sasl. setting this protocol would use that the client
    cannot honour: an unknown key, a JKS/PKCS12 store, a password PEM stores do not take."""
    families = (("security.", {"security.protocol"}),
                ("ssl.", CLIENT_SSL_SETTINGS) if protocol in ("SSL", "SASL_SSL") else None,
                ("sasl.", CLIENT_SASL_SETTINGS) if protocol.startswith("SASL_") else None)
    for prefix, known in filter(None, families):
        for key in sorted(props):
            if key.startswith(prefix) and key not in known:
                raise ValueError(f"{key} is not supported by kafkafast's client (it reads "
                                 f"{', '.join(sorted(known))})")
    if protocol not in ("SSL", "SASL_SSL"):
        return
    for store in ("truststore", "keystore"):
        kind = (props.get(f"ssl.{store}.type") or "PEM").upper()
        if kind != "PEM":
            raise ValueError(f"ssl.{store}.type={kind}: kafkafast's client reads PEM stores only")
    if props.get("ssl.truststore.password"):
        raise ValueError("ssl.truststore.password: a PEM trust store has no password (as in Kafka)")
    endpoint = props.get("ssl.endpoint.identification.algorithm")
    if endpoint is not None and endpoint.strip().lower() not in ("https", ""):
        raise ValueError(f"ssl.endpoint.identification.algorithm={endpoint}: expected https or empty")
    tls = props.get("ssl.protocol")
    if tls and tls.strip().upper() not in ("TLS", *PROTOCOL_VERSIONS):
        raise ValueError(f"ssl.protocol={tls}: expected TLSv1.2 or TLSv1.3")


def _client_tls_props(props: dict) -> dict:
    """`ssl.protocol` caps the versions when `ssl.enabled.protocols` is not given, as Java's
    SSLContext.getInstance(protocol) does."""
    tls = (props.get("ssl.protocol") or "").strip().upper()
    if tls in PROTOCOL_VERSIONS and not props.get("ssl.enabled.protocols"):
        allowed = [v for v in ("TLSv1.2", "TLSv1.3") if PROTOCOL_VERSIONS[v.upper()] <= PROTOCOL_VERSIONS[tls]]
        return {**props, "ssl.enabled.protocols": ",".join(allowed) or tls}
    return props


def _client_context(props: dict) -> ssl.SSLContext:
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        if props.get(key) and not os.path.isfile(props[key]):
            raise ValueError(f"{key}={props[key]}: no such file")
    try:
        return client_ssl_context(_Props(_client_tls_props(props)))
    except ssl.SSLError as exc:
        raise ValueError(f"ssl.truststore.*/ssl.keystore.* (PEM) cannot be loaded: {exc}") from None


class OAuthBearerUnsecuredClient:
    """OAUTHBEARER with an unsecured JWS (`alg: none`) built from the JAAS options of Kafka's
    OAuthBearerUnsecuredLoginCallbackHandler: `unsecuredLoginStringClaim_<name>`,
    `unsecuredLoginNumberClaim_<name>`, `unsecuredLoginListClaim_<name>` (first character is the
    separator), `unsecuredLoginPrincipalClaimName` (default sub), `unsecuredLoginLifetimeSeconds`
    (default 3600), `unsecuredLoginExtension_<name>` (SASL extensions). A refused token makes
    the broker answer the SaslAuthenticate with an error."""

    def __init__(self, options: dict[str, str]) -> None:
        principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
        now = int(time.time())
        claims: dict[str, Any] = {"iat": now}
        extensions: list[str] = []
        for key, value in options.items():
            kind, _, name = key.partition("_")
            try:
                if key == "unsecuredLoginLifetimeSeconds":
                    claims["exp"] = now + int(value)
                elif kind == "unsecuredLoginStringClaim":
                    claims[name] = value
                elif kind == "unsecuredLoginNumberClaim":
                    claims[name] = float(value) if "." in value else int(value)
                elif kind == "unsecuredLoginListClaim":
                    claims[name] = value[1:].split(value[:1]) if value else []
                elif kind == "unsecuredLoginExtension":
                    extensions.append(f"{name}={value}")
            except ValueError:
                raise ValueError(f"sasl.jaas.config: {key}={value!r} is not a number") from None
        claims.setdefault("exp", now + 3600)
        if not isinstance(claims.get(principal_claim), str):
            raise ValueError(f"sasl.jaas.config: OAUTHBEARER needs "
                             f"unsecuredLoginStringClaim_{principal_claim}=<principal> "
                             "(kafkafast's client makes unsecured tokens only; sasl.login.callback.handler.class "
                             "is not supported)")

        def b64(doc: dict) -> str:
            return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode().rstrip("=")

        token = f"{b64({'alg': 'none'})}.{b64(claims)}."
        self.message = "\x01".join(["n,,", f"auth=Bearer {token}", *extensions, "", ""]).encode()

    def first(self) -> bytes:
        return self.message

    def step(self, server: bytes) -> bytes | None:
        return None


class ClientSecurity:
    """How a client connects, from Kafka's client property names: `security.protocol`
    (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the `ssl.truststore.*` / `ssl.keystore.*` files
    or inline certificates (PEM), `ssl.endpoint.identification.algorithm`,
    `ssl.enabled.protocols` / `ssl.protocol`, `sasl.mechanism` (PLAIN, SCRAM-SHA-256/512 with
    the username/password of `sasl.jaas.config` or librdkafka's `sasl.username` /
    `sasl.password`; OAUTHBEARER with an unsecured token from the JAAS options). Any other
    ssl./sasl. setting the protocol would use raises ValueError naming it. The same
    interface as InterBrokerSecurity, for BrokerConnection."""

    def __init__(self, props: dict) -> None:
        protocol = (props.get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security.protocol={protocol}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
        _check_client_settings(props, protocol)
        self.protocol = protocol
        self.ssl_context = _client_context(props) if protocol in ("SSL", "SASL_SSL") else None
        self.mechanism: str | None = None
        self.credentials: tuple[str, str] | None = None
        self.oauth_options: dict[str, str] | None = None
        if protocol.startswith("SASL_"):
            mechanism = (props.get("sasl.mechanism") or "GSSAPI").upper()
            if mechanism not in CLIENT_MECHANISMS:
                raise ValueError(f"sasl.mechanism={mechanism}: kafkafast's client speaks "
                                 f"{', '.join(CLIENT_MECHANISMS)}")
            opts = parse_jaas(props["sasl.jaas.config"])[1] if props.get("sasl.jaas.config") else {}
            self.mechanism = mechanism
            if mechanism == "OAUTHBEARER":
                OAuthBearerUnsecuredClient(opts)  # a JAAS entry that makes no token fails here, not per connection
                self.oauth_options = opts
                return
            username = opts.get("username", props.get("sasl.username"))
            password = opts.get("password", props.get("sasl.password"))
            if username is None or password is None:
                raise ValueError(f"sasl.jaas.config (or sasl.username/sasl.password) gives no username and "
                                 f"password for {mechanism} ({protocol})")
            self.credentials = (username, password)

    def server_hostname(self, host: str) -> str | None:
        return host if self.ssl_context is not None else None

    def exchange(self) -> Any:
        if self.mechanism is None:
            return None
        if self.oauth_options is not None:
            return _sasl_exchange_with(self.mechanism, OAuthBearerUnsecuredClient(self.oauth_options), "token")
        return _sasl_exchange(self.mechanism, *self.credentials)  # type: ignore[misc]
