"""Pure security pieces: listener parsing, principal mapping rules, JAAS options, SCRAM
against the RFC 7677 test vector, and the ACL decision rules (implied operations, DENY,
PREFIXED, wildcard, super users, allow.everyone.if.no.acl.found)."""
from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kafkafast.security import acl as A
from kafkafast.security.jaas import JaasError, parse_jaas
from kafkafast.security.listeners import listener_specs
from kafkafast.security.scram import ScramCredential, ScramError, ScramServer, ScramStore
from kafkafast.security.tls import PrincipalMapper, subject_dn


def test_listeners_with_names_map_and_advertised():
    specs = listener_specs({"listeners": "CLIENT://0.0.0.0:9093,REPL://[::1]:9094,PLAINTEXT://:9092",
                            "advertised.listeners": "CLIENT://kafka.example:19093",
                            "listener.security.protocol.map": "CLIENT:SASL_SSL,REPL:SSL,PLAINTEXT:PLAINTEXT",
                            "listener.name.client.ssl.client.auth": "required", "ssl.client.auth": "none"})
    assert [(s.name, s.protocol, s.host, s.port, s.endpoint()) for s in specs] == [
        ("CLIENT", "SASL_SSL", "0.0.0.0", 9093, ("kafka.example", 19093)),
        ("REPL", "SSL", "::1", 9094, ("::1", 9094)),
        ("PLAINTEXT", "PLAINTEXT", "", 9092, ("127.0.0.1", 9092))]
    assert specs[0].get("ssl.client.auth") == "required" and specs[1].get("ssl.client.auth") == "none"
    assert specs[0].tls and specs[0].sasl and not specs[2].tls


@pytest.mark.parametrize("props", [
    {"listeners": "CLIENT://:1"},  # no protocol for CLIENT
    {"listeners": "A://:1,A://:2", "listener.security.protocol.map": "A:SSL"},
    {"listeners": "PLAINTEXT://:1", "advertised.listeners": "OTHER://h:1"},
    {"listeners": "PLAINTEXT://:1", "listener.security.protocol.map": "PLAINTEXT:TLS"},
    {"listeners": "PLAINTEXT//:1"},
    {"listeners": "PLAINTEXT://0.0.0.0:1"}])  # bound to every address, advertising none
def test_bad_listener_configs_are_refused(props):
    with pytest.raises(ValueError):
        listener_specs(props)


def test_subject_dn_and_mapping_rules():
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
                        (("organizationalUnitName", "Ops"),), (("commonName", "svc-1"),))}
    dn = subject_dn(cert)
    assert dn == "CN=svc-1,OU=Ops,O=Acme\\, Inc,C=DE"
    assert PrincipalMapper(None).name(dn) == dn
    rules = PrincipalMapper("RULE:^CN=([a-z]+)-1,OU=Ops,.*$/$1@ops/U, DEFAULT")
    assert rules.name(dn) == "SVC@OPS"
    assert rules.name("CN=other") == "CN=other"
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")  # no rule matches and no DEFAULT


def test_jaas_options():
    module, opts = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                              'username="admin" password="a;b" user_admin="a;b" user_x=plain;')
    assert module.endswith("PlainLoginModule") and opts == {"username": "admin", "password": "a;b",
                                                             "user_admin": "a;b", "user_x": "plain"}
    with pytest.raises(JaasError):
        parse_jaas("org.Foo maybe;")


def test_scram_sha256_rfc7677_vector(tmp_path):
    store = ScramStore(str(tmp_path))
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    store.change([("user", "SCRAM-SHA-256", ScramCredential.from_salted_password("SCRAM-SHA-256", salt, 4096, salted))],
                 [])
    server = ScramServer("SCRAM-SHA-256", store)
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").decode()
    assert first.startswith("r=rOprNGfwEbeRWgbNEkqO") and first.endswith(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    # the vector's server nonce, as if our random part had been the RFC's
    server.nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    server.server_first = f"r={server.nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.step(f"c=biws,r={server.nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" and server.done and server.username == "user"
    bad = ScramServer("SCRAM-SHA-256", store)
    bad.step(b"n,,n=user,r=abc")
    with pytest.raises(ScramError):
        bad.step(f"c=biws,r={bad.nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())


def _scram_final(password: bytes, salt: bytes, client_first_bare: str, server_first: str, echo: str) -> bytes:
    """A SCRAM-SHA-256 client-final message echoing `echo` as its nonce, with the proof for it."""
    salted = hashlib.pbkdf2_hmac("sha256", password, salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c=biws,r={echo}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    return f"{without_proof},p={proof}".encode()


def test_scram_final_nonce_must_end_with_the_servers(tmp_path):
    """librdkafka 2.0 echoes the client nonce + the combined nonce, which Kafka 3.x accepts;
    an echo that does not end with the combined nonce is refused even with a valid proof."""
    store = ScramStore(str(tmp_path))
    store.change([("user", "SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", "pencil"))], [])
    salt = store.get("user", "SCRAM-SHA-256").salt
    for echo, ok in [(lambda n: n, True), (lambda n: "cnonce" + n, True), (lambda n: n[:-1], False),
                     (lambda n: n + "x", False), (lambda n: "cnonce", False)]:
        server = ScramServer("SCRAM-SHA-256", store)
        server_first = server.step(b"n,,n=user,r=cnonce").decode()
        final = _scram_final(b"pencil", salt, "n=user,r=cnonce", server_first, echo(server.nonce))
        if ok:
            assert server.step(final).startswith(b"v=") and server.done
        else:
            with pytest.raises(ScramError, match="nonce"):
                server.step(final)
            assert not server.done


def test_scram_unknown_user_fails_only_at_the_proof(tmp_path):
    server = ScramServer("SCRAM-SHA-512", ScramStore(str(tmp_path)))
    assert b",i=4096" in server.step(b"n,,n=ghost,r=xyz")
    with pytest.raises(ScramError):
        server.step(f"c=biws,r={server.nonce},p={base64.b64encode(bytes(64)).decode()}".encode())


def _acl(rtype, name, principal, op, perm=A.ALLOW, pattern=A.LITERAL, host="*"):
    return A.Acl(rtype, name, pattern, principal, host, op, perm)


def test_acl_decisions(tmp_path):
    auth = A.AclAuthorizer(str(tmp_path), super_users="User:root")
    auth.create([_acl(A.TOPIC, "orders", "User:alice", A.WRITE),
                 _acl(A.TOPIC, "logs-", "User:*", A.READ, pattern=A.PREFIXED),
                 _acl(A.TOPIC, "logs-secret", "User:bob", A.READ, perm=A.DENY),
                 _acl(A.TOPIC, "*", "User:carol", A.ALTER_CONFIGS),
                 _acl(A.GROUP, "g", "User:alice", A.READ, host="10.0.0.1")])
    ok = auth.authorize
    assert ok("User:alice", "1.2.3.4", A.WRITE, A.TOPIC, "orders")
    assert ok("User:alice", "1.2.3.4", A.DESCRIBE, A.TOPIC, "orders")  # implied by WRITE
    assert not ok("User:alice", "1.2.3.4", A.READ, A.TOPIC, "orders")
    assert ok("User:bob", "h", A.READ, A.TOPIC, "logs-app") and not ok("User:bob", "h", A.READ, A.TOPIC, "logs-secret")
    assert ok("User:bob", "h", A.DESCRIBE, A.TOPIC, "logs-secret")  # DENY READ does not deny DESCRIBE
    assert ok("User:carol", "h", A.DESCRIBE_CONFIGS, A.TOPIC, "anything")  # wildcard, implied
    assert not ok("User:carol", "h", A.DESCRIBE, A.TOPIC, "anything")
    assert ok("User:alice", "10.0.0.1", A.READ, A.GROUP, "g") and not ok("User:alice", "10.0.0.2", A.READ, A.GROUP, "g")
    assert not ok("User:alice", "h", A.READ, A.GROUP, "nothing-matches")  # no ACL, allow.everyone off
    assert ok("User:root", "h", A.ALTER, A.CLUSTER, A.CLUSTER_NAME)
    open_auth = A.AclAuthorizer(str(tmp_path), allow_if_no_acl=True)
    assert open_auth.authorize("User:x", "h", A.READ, A.GROUP, "nothing-matches")
    assert not open_auth.authorize("User:x", "h", A.WRITE, A.TOPIC, "orders")  # ACLs exist for it
    removed = auth.delete([A.AclFilter(resource_type=A.TOPIC, pattern_type=A.MATCH, resource_name="logs-secret")])
    assert sorted(a.resource_name for a in removed[0]) == ["*", "logs-", "logs-secret"]
    assert [a.resource_name for a in auth.acls()] == ["orders", "g"]
    assert A.validate(_acl(A.CLUSTER, "other", "User:a", A.ALTER)) is not None
    assert A.validate(_acl(A.TOPIC, "t", "alice", A.READ)) is not None


def _handshake(server_ctx, client_ctx) -> tuple:
    """A TLS handshake between two contexts through memory BIOs (no sockets)."""
    import ssl

    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        for obj in (client, server):
            try:
                obj.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return server.cipher(), server.getpeercert()


def test_tls_listener_settings_take_effect(tmp_path):
    import ssl

    from kafkafast.security.tls import openssl_cipher_name, server_context
    from tests.security.pki import make_pki

    pki = make_pki(tmp_path / "pki")
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256") == "ECDHE-RSA-AES128-SHA256"
    assert openssl_cipher_name("TLS_AES_256_GCM_SHA384") is None  # TLS 1.3: not selectable, always on
    spec = listener_specs({"listeners": "SECURE://:9", "listener.security.protocol.map": "SECURE:SSL",
                           "ssl.keystore.location": str(pki.server_keystore), "ssl.key.password": pki.key_password,
                           "ssl.truststore.location": str(pki.ca), "ssl.enabled.protocols": "TLSv1.2",
                           "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                           "listener.name.secure.ssl.client.auth": "required"})[0]
    server = server_context(spec)
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    cipher, peer = _handshake(server, client)
    assert cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384" and cipher[1] == "TLSv1.2"
    assert subject_dn(peer) == "CN=alice,O=Clients,C=DE"
    wrong_pw = listener_specs({"listeners": "SSL://:9", "ssl.keystore.location": str(pki.server_keystore),
                               "ssl.key.password": "nope"})[0]
    with pytest.raises(ValueError):
        server_context(wrong_pw)
    jks = listener_specs({"listeners": "SSL://:9", "ssl.keystore.type": "JKS", "ssl.keystore.location": "x.jks"})[0]
    with pytest.raises(ValueError, match="PEM"):
        server_context(jks)
