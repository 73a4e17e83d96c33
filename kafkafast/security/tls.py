"""TLS for SSL and SASL_SSL listeners with Python's `ssl`, configured with Kafka's names.

Key store: `ssl.keystore.type=PEM` (the only type accepted; JKS/PKCS12 are refused at start-up
with a message) and either `ssl.keystore.location` - one PEM file holding the private key
(PKCS#8 or traditional, encrypted with `ssl.key.password` or not) and the certificate chain -
or the inline `ssl.keystore.key` + `ssl.keystore.certificate.chain` PEM texts. Trust store:
`ssl.truststore.location` (PEM certificates) or inline `ssl.truststore.certificates`.
`ssl.client.auth` none/requested/required, `ssl.enabled.protocols` (TLSv1.2, TLSv1.3),
`ssl.cipher.suites` (IANA names as Kafka takes them, or OpenSSL names; TLS 1.2 suites - TLS 1.3 ones are always on), every key also read with its
`listener.name.<listener>.` prefix.

The key and trust stores of a running listener can be replaced (Kafka's KIP-226 certificate
rotation): `listener.name.<listener>.<store config>` for the names in STORE_CONFIGS, set as this
broker's dynamic config (AlterConfigs / IncrementalAlterConfigs on the broker resource of its
id). `reconfigured_context` checks a new setting before it is stored, as Kafka's SslFactory does:
the stores load, a keystore is neither added nor removed, no trust store is added where there was
none, and the new certificate keeps the old one's subject (unless `ssl.allow.dn.changes=true`)
and subject alternative names (unless `ssl.allow.san.changes=true`). Every process then builds
the listener's new SSLContext (`with_dynamic_stores`, `store_stamp`: a store file rewritten in
place is reloaded too) for the connections it accepts from then on; open connections keep theirs.

The principal of a client certificate is its subject DN in RFC 2253 form (as Java's
X500Principal.getName() writes it: most specific RDN first), passed through
`ssl.principal.mapping.rules` (`DEFAULT` and `RULE:pattern/replacement/[LU]`, as Kafka).
"""
from __future__ import annotations

import dataclasses
import os
import re
import ssl
import tempfile
from typing import Any

PROTOCOL_VERSIONS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3,
                     "TLSV1.1": ssl.TLSVersion.TLSv1_1, "TLSV1": ssl.TLSVersion.TLSv1}


# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: what a running listener may change.
STORE_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates"})
LISTENER_CONFIG = re.compile(r"listener\.name\.([^.]+)\.(.+)")
# Kafka's PASSWORD-type configs (matched as name suffixes, so listener- and mechanism-prefixed
# ones too): DescribeConfigs answers them with a null value, marked sensitive.
SENSITIVE_SUFFIXES = ("ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key",
                      "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "sasl.jaas.config",
                      "password.encoder.secret", "password.encoder.old.secret", "delegation.token.master.key",
                      "delegation.token.secret.key")


def is_sensitive(name: str) -> bool:
    return name.endswith(SENSITIVE_SUFFIXES)


def listener_store_config(name: str) -> tuple[str, str] | None:
    """(LISTENER, store config) for `listener.name.<listener>.<store config>`, else None."""
    m = LISTENER_CONFIG.fullmatch(name)
    return (m.group(1).upper(), m.group(2)) if m and m.group(2) in STORE_CONFIGS else None


def with_dynamic_stores(spec: Any, dynamic: dict[str, str]) -> Any:
    """The listener `spec` with the store configs of its listener in `dynamic` (this broker's
    dynamic configs) over its static ones."""
    prefix = f"listener.name.{spec.name.lower()}."
    over = {}
    for name, value in dynamic.items():
        parsed = listener_store_config(name)
        if parsed is not None and parsed[0] == spec.name:
            over[prefix + parsed[1]] = value
    if not over:
        return spec
    keys = {k[len(prefix):] for k in over}
    if keys & {"ssl.keystore.key", "ssl.keystore.certificate.chain"} and "ssl.keystore.location" not in keys:
        over[prefix + "ssl.keystore.location"] = ""  # the inline key store replaces a static file
    if "ssl.truststore.certificates" in keys and "ssl.truststore.location" not in keys:
        over[prefix + "ssl.truststore.location"] = ""
    return dataclasses.replace(spec, props={**spec.props, **over})


def store_stamp(spec: Any) -> tuple:
    """What a listener's SSLContext is made of: its store settings and the identity of the store
    files (a file replaced or rewritten in place changes it)."""
    files = []
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        try:
            st = os.stat(spec.get(key) or "")
            files.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            files.append(None)
    return tuple(spec.get(k) for k in sorted(STORE_CONFIGS)) + tuple(files)


def _certificate(spec: Any) -> dict | None:
    """The first certificate of the listener's key store, decoded ({} if it cannot be read)."""
    location, chain = spec.get("ssl.keystore.location"), spec.get("ssl.keystore.certificate.chain")
    path = location or (_pem_file(chain) if chain else None)
    if path is None:
        return None
    try:
        return ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
    except (ssl.SSLError, OSError, AttributeError):
        return {}
    finally:
        if not location:
            os.unlink(path)


def _true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def reconfigured_context(old: Any, new: Any) -> ssl.SSLContext:
    """The SSLContext of `new` if a listener serving with `old` may switch to it; ValueError why not."""
    ctx = server_context(new)
    before, after = _certificate(old), _certificate(new)
    if (before is None) != (after is None):
        raise ValueError(f"listener {new.name}: a key store cannot be added to or removed from a running listener")
    if not (old.get("ssl.truststore.location") or old.get("ssl.truststore.certificates")) and (
            new.get("ssl.truststore.location") or new.get("ssl.truststore.certificates")):
        raise ValueError(f"listener {new.name}: a trust store cannot be added to a running listener that had none")
    if before and after:
        if before.get("subject") != after.get("subject") and not _true(new.get("ssl.allow.dn.changes")):
            raise ValueError(f"listener {new.name}: the new certificate's subject {_dn(after)} differs from the "
                             f"current {_dn(before)} (allowed with ssl.allow.dn.changes=true)")
        sans = [sorted(c.get("subjectAltName", ())) for c in (before, after)]
        if sans[0] != sans[1] and not _true(new.get("ssl.allow.san.changes")):
            raise ValueError(f"listener {new.name}: the new certificate's subject alternative names {sans[1]} differ "
                             f"from the current {sans[0]} (allowed with ssl.allow.san.changes=true)")
    return ctx


def _dn(cert: dict) -> str:
    return ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)


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
    except (ssl.SSLError, OSError) as exc:
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
