"""TLS for SSL and SASL_SSL listeners with Python's `ssl`, configured with Kafka's names.

Key store: `ssl.keystore.type=PEM` (the only type accepted; JKS/PKCS12 are refused at start-up
with a message) and either `ssl.keystore.location` - one PEM file holding the private key
(PKCS#8 or traditional, encrypted with `ssl.key.password` or not) and the certificate chain -
or the inline `ssl.keystore.key` + `ssl.keystore.certificate.chain` PEM texts. Trust store:
`ssl.truststore.location` (PEM certificates) or inline `ssl.truststore.certificates`.
`ssl.client.auth` none/requested/required, `ssl.enabled.protocols` (TLSv1.2, TLSv1.3),
`ssl.cipher.suites` (IANA names as Kafka takes them, or OpenSSL names; TLS 1.2 suites - TLS 1.3 ones are always on), every key also read with its
`listener.name.<listener>.` prefix.

The principal of a client certificate is its subject DN in RFC 2253 form (as Java's
X500Principal.getName() writes it: most specific RDN first), passed through
`ssl.principal.mapping.rules` (`DEFAULT` and `RULE:pattern/replacement/[LU]`, as Kafka).
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Any

PROTOCOL_VERSIONS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3,
                     "TLSV1.1": ssl.TLSVersion.TLSv1_1, "TLSV1": ssl.TLSVersion.TLSv1}


def _pem_file(inline: str) -> str:
    """Inline PEM text (Kafka's ssl.keystore.key etc.) written to a private temp file, since
    `ssl` loads keys only from files."""
    fd, path = tempfile.mkstemp(prefix="kafkafast-pem-", suffix=".pem")
    with os.fdopen(fd, "w") as fh:
        fh.write(inline.replace("\\n", "\n"))
    return path


def server_context(listener: Any) -> ssl.SSLContext:
    """The SSLContext of one TLS listener (raises ValueError on a bad configuration)."""
    get = listener.get
    ktype = (get("ssl.keystore.type") or "PEM").upper()
    if ktype != "PEM":
        raise ValueError(f"listener {listener.name}: ssl.keystore.type={ktype} is not supported; "
                         "use PEM (convert with: openssl pkcs12 -in store.p12 -nodes -out store.pem)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    password = get("ssl.key.password") or get("ssl.keystore.password") or None
    location, key, chain = get("ssl.keystore.location"), get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    temps = []
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif key and chain:
            temps = [_pem_file(chain), _pem_file(key)]
            ctx.load_cert_chain(temps[0], temps[1], password=password)
        else:
            raise ValueError(f"listener {listener.name} ({listener.protocol}) needs ssl.keystore.location "
                             "(PEM key and certificate chain) or ssl.keystore.key + ssl.keystore.certificate.chain")
        ttype = (get("ssl.truststore.type") or "PEM").upper()
        trust, trust_inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
        if (trust or trust_inline) and ttype != "PEM":
            raise ValueError(f"listener {listener.name}: ssl.truststore.type={ttype} is not supported; use PEM")
        if trust:
            ctx.load_verify_locations(cafile=trust)
        elif trust_inline:
            ctx.load_verify_locations(cadata=trust_inline.replace("\\n", "\n"))
    except ssl.SSLError as exc:
        raise ValueError(f"listener {listener.name}: cannot load the key store or trust store: {exc}") from exc
    finally:
        for p in temps:
            os.unlink(p)
    auth = (get("ssl.client.auth") or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise ValueError(f"ssl.client.auth must be none, requested or required, not {auth!r}")
    if listener.sasl and auth != "none" and get(f"listener.name.{listener.name.lower()}.ssl.client.auth") is None:
        auth = "none"  # as Kafka: on SASL_SSL, ssl.client.auth applies only with the listener prefix
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[auth]
    protocols = [p.strip().upper() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    versions = []
    for p in protocols:
        if p not in PROTOCOL_VERSIONS:
            raise ValueError(f"ssl.enabled.protocols: unknown protocol {p}")
        versions.append(PROTOCOL_VERSIONS[p])
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        names = [n for n in (openssl_cipher_name(c.strip()) for c in ciphers.split(",") if c.strip()) if n]
        try:
            if names:
                ctx.set_ciphers(":".join(names))
        except ssl.SSLError as exc:
            raise ValueError(f"ssl.cipher.suites: {exc}") from exc
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


def openssl_cipher_name(name: str) -> str | None:
    """A cipher suite as Kafka's (Java's) IANA name or as OpenSSL names it, in OpenSSL's
    spelling for `set_ciphers` (TLS 1.2 and below). TLS 1.3 suites (`TLS_AES_128_GCM_SHA256`,
    ...) cannot be chosen through Python's ssl and are always on: None."""
    if not name.startswith("TLS_"):
        return name
    kx, sep, cipher = name[4:].partition("_WITH_")
    if not sep:
        return None  # a TLS 1.3 suite
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_CBC", "")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    kx = {"RSA": ""}.get(kx, kx)
    out = "-".join(p for p in (kx.replace("_", "-"), cipher.replace("_", "-")) if p)
    return out


# -- principals ----------------------------------------------------------------------------
_ATTR = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
         "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
         "domainComponent": "DC", "userId": "UID"}
_OID = {"emailAddress": "1.2.840.113549.1.9.1"}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(peercert: dict) -> str:
    """RFC 2253 DN of a certificate in `getpeercert()` form (most specific RDN first)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        parts = []
        for name, value in rdn:
            if name in _ATTR:
                parts.append(f"{_ATTR[name]}={_escape(value)}")
            else:
                oid = _OID.get(name, name)
                parts.append(f"{oid}=#16{len(value.encode()):02x}{value.encode().hex()}")  # IA5String, as Java
        rdns.append("+".join(parts))
    return ",".join(rdns)


_RULE = re.compile(r"\s*((DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(,|$)")


class PrincipalMapper:
    """`ssl.principal.mapping.rules`: the first RULE whose pattern matches the whole DN
    gives the name (replacement with $1..$n, then L/U case); DEFAULT gives the DN itself."""

    def __init__(self, rules: str | None) -> None:
        self.rules: list[tuple[re.Pattern, str, str] | None] = []
        text = (rules or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
            if m.group(2):
                self.rules.append(None)
            else:
                pattern = m.group(3).replace("\\/", "/")
                replacement = re.sub(r"\$(\d+)", r"\\\1", m.group(4).replace("\\/", "/"))
                self.rules.append((re.compile(pattern), replacement, m.group(5)))
            pos = m.end()

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            m = pattern.fullmatch(dn)
            if m is not None:
                out = m.expand(replacement)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")
