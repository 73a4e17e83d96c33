"""Certificates made for each test session with `cryptography` (nothing committed, nothing
that expires in the repository): a CA, a server certificate for 127.0.0.1/localhost,
client certificates signed by the CA, one signed by an untrusted CA and one expired."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
import ipaddress


def _name(cn: str, org: str = "kafkafast tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False, server: bool = False,
          days: tuple[int, int] = (-1, 30)) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem_key(key, password: bytes | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Pki:
    dir: Path
    ca: Path  # CA certificate (the broker's and clients' trust store)
    server_keystore: Path  # key (encrypted with key_password) + certificate chain, one PEM file
    key_password: str
    client_cert: Path  # CN=alice
    client_key: Path
    untrusted_cert: Path  # signed by a CA nobody trusts
    untrusted_key: Path
    expired_cert: Path  # signed by the CA, expired yesterday
    expired_key: Path
    ca_key: Path


def server_keystore(pki: Pki, path: Path, cn: str = "localhost", password: bytes | None = None) -> Path:
    """Another server key store signed by the PKI's CA (a new key and certificate), as a
    certificate rotation makes; written to `path` (replacing what is there)."""
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    key = _key()
    cert = _cert(_name(cn), key, ca.subject, ca_key, server=True)
    path.write_bytes(_pem_key(key, password) + _pem_cert(cert) + _pem_cert(ca))
    return path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_ca_key = _key(), _key()
    ca_name, other_name = _name("kafkafast test CA"), _name("untrusted CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = _key()
    server = _cert(_name("localhost"), server_key, ca_name, ca_key, server=True)
    out = {}

    def write(name: str, data: bytes) -> Path:
        p = directory / name
        p.write_bytes(data)
        return p

    out["ca"] = write("ca.pem", _pem_cert(ca))
    out["ca_key"] = write("ca.key", _pem_key(ca_key))
    out["server_keystore"] = write("server-keystore.pem", _pem_key(server_key, b"keypass") + _pem_cert(server)
                                   + _pem_cert(ca))
    for label, issuer, issuer_key, days in (("client", ca_name, ca_key, (-1, 30)),
                                            ("untrusted", other_name, other_ca_key, (-1, 30)),
                                            ("expired", ca_name, ca_key, (-30, -1))):
        k = _key()
        c = _cert(_name("alice", "Clients"), k, issuer, issuer_key, days=days)
        out[f"{label}_cert"] = write(f"{label}.pem", _pem_cert(c))
        out[f"{label}_key"] = write(f"{label}.key", _pem_key(k))
    return Pki(directory, key_password="keypass", **out)
