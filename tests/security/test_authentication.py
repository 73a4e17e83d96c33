"""TLS and SASL listeners with real clients: produce and consume over SSL, mutual TLS,
SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) and SASL_SSL; bad
credentials and bad certificates refused with the clients' authentication errors; the
pre-authentication gate, the legacy v0 token exchange and KIP-368 re-authentication."""
from __future__ import annotations

import time

import pytest

from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.sasl_authenticate import SaslAuthenticateRequest
from kafkafast.protocol._generated.sasl_handshake import SaslHandshakeRequest
from tests.security.clients import ROUND_TRIPS, Conn, values
from tests.security.conftest import PLAIN_JAAS, tls_settings
from tests.security.pki import make_pki
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.raw_client import RawClient
from tests.support.tools import missing_tool

pytestmark = pytest.mark.timeout(180)

LISTENERS = ("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_USERS = {"SCRAM-SHA-256": ("carol", "carol-256"), "SCRAM-SHA-512": ("dave", "dave-512")}


def start_broker(base, pki, settings=None, workers=0) -> tuple[BrokerProcess, dict]:
    ports = {"PLAINTEXT": free_port(), **{n: free_port() for n in LISTENERS}}
    props = tls_settings(pki)
    props.update({
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "20",
        "group.initial.rebalance.delay.ms": "0",
    })
    props.update(settings or {})
    return BrokerProcess(base, port=ports["PLAINTEXT"], workers=workers, settings=props).start(), ports


def add_scram_users(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")),
                                                                  4096), pw.encode())
           for mech, (user, pw) in SCRAM_USERS.items()]
    for fut in admin.alter_user_scram_credentials(ups).values():
        fut.result(30)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("auth")
    pki = make_pki(base / "pki")
    broker, ports = start_broker(base / "data", pki)
    add_scram_users(broker.bootstrap)
    yield pki, broker, ports
    broker.kill()


def conn_for(mode: str, pki, ports) -> Conn:
    addr = lambda n: f"127.0.0.1:{ports[n]}"  # noqa: E731
    if mode == "SSL":
        return Conn(addr("SSL"), "SSL", ca=str(pki.ca))
    if mode == "MTLS":
        return Conn(addr("MTLS"), "SSL", ca=str(pki.ca), cert=str(pki.client_cert), key=str(pki.client_key))
    if mode == "SASL_SSL-PLAIN":
        return Conn(addr("SASL_SSL"), "SASL_SSL", ca=str(pki.ca), mechanism="PLAIN", username="alice",
                    password="alice-secret")
    mech = mode.split("-", 1)[1]
    user, pw = SCRAM_USERS.get(mech, ("alice", "alice-secret"))
    return Conn(addr("SASL_PLAINTEXT"), "SASL_PLAINTEXT", mechanism=mech, username=user, password=pw)


MODES = ["SSL", "MTLS", "SASL_PLAINTEXT-PLAIN", "SASL_PLAINTEXT-SCRAM-SHA-256", "SASL_PLAINTEXT-SCRAM-SHA-512",
         "SASL_SSL-PLAIN"]


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
@pytest.mark.parametrize("mode", MODES)
def test_clients_produce_and_consume_over_secured_listeners(env, client, mode):
    pki, _, ports = env
    topic = f"sec-{client}-{mode}".lower().replace("_", "-")
    assert ROUND_TRIPS[client](conn_for(mode, pki, ports), topic) == values(topic)


def test_oauthbearer_unsecured_jws_round_trip(env):
    pki, _, ports = env
    conn = Conn(f"127.0.0.1:{ports['SASL_SSL']}", "SASL_SSL", ca=str(pki.ca), mechanism="OAUTHBEARER",
                extra={"enable.sasl.oauthbearer.unsecure.jwt": True,
                       "sasl.oauthbearer.config": "principal=erin lifeSeconds=600"})
    assert ROUND_TRIPS["confluent"](conn, "sec-oauth") == values("sec-oauth")


def _confluent_error(conf: dict) -> object:
    """The first error a confluent-kafka client reports for `conf` (None if it connects)."""
    import confluent_kafka as ck

    errors = []
    p = ck.Producer({**conf, "error_cb": errors.append, "socket.timeout.ms": 5000,
                     "message.timeout.ms": 5000})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
        try:
            p.list_topics(timeout=0.5)
            return None
        except ck.KafkaException as exc:
            errors.append(exc.args[0])
    return errors[0] if errors else None


@pytest.mark.parametrize("mode,user,password", [
    ("SASL_PLAINTEXT-PLAIN", "alice", "wrong"), ("SASL_PLAINTEXT-PLAIN", "mallory", "alice-secret"),
    ("SASL_PLAINTEXT-SCRAM-SHA-256", "carol", "wrong"), ("SASL_PLAINTEXT-SCRAM-SHA-512", "nobody", "x"),
    ("SASL_SSL-PLAIN", "bob", "alice-secret")])
def test_bad_sasl_credentials_are_refused_with_authentication_error(env, mode, user, password):
    import confluent_kafka as ck

    pki, _, ports = env
    conn = conn_for(mode, pki, ports)
    conn.username, conn.password = user, password
    err = _confluent_error(conn.confluent())
    assert err is not None and err.code() == ck.KafkaError._AUTHENTICATION, err


def test_kafka_python_wrong_password_reports_sasl_authentication_failed(env, caplog):
    """kafka-python 3 gives up bootstrapping with a timeout; the cause it reports is the
    broker's SASL_AUTHENTICATION_FAILED answer."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    pki, _, ports = env
    conn = conn_for("SASL_PLAINTEXT-SCRAM-SHA-256", pki, ports)
    conn.password = "wrong"
    with pytest.raises(KafkaError):
        KafkaProducer(**conn.kafka_python(), request_timeout_ms=3000, max_block_ms=3000,
                      reconnect_backoff_max_ms=500, bootstrap_timeout_ms=2000).send("x", b"v").get(10)
    assert any("SaslAuthenticationFailedError" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("which", ["untrusted", "expired", "none"])
def test_mutual_tls_refuses_bad_client_certificates(env, which):
    import confluent_kafka as ck

    pki, _, ports = env
    conn = conn_for("MTLS", pki, ports)
    conn.cert, conn.key = {"untrusted": (pki.untrusted_cert, pki.untrusted_key),
                           "expired": (pki.expired_cert, pki.expired_key), "none": (None, None)}[which]
    if which == "none":
        conn.cert = conn.key = None
    conf = conn.confluent()
    err = _confluent_error({k: str(v) if k.startswith("ssl.") else v for k, v in conf.items()})
    assert err is not None and err.code() in (ck.KafkaError._SSL, ck.KafkaError._AUTHENTICATION,
                                              ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN), err


def test_client_refuses_broker_whose_certificate_it_does_not_trust(env):
    import confluent_kafka as ck

    pki, _, ports = env
    conf = conn_for("SSL", pki, ports).confluent()
    conf["ssl.ca.location"] = str(pki.untrusted_cert)  # a trust store without the broker's CA
    err = _confluent_error(conf)
    assert err is not None and err.code() in (ck.KafkaError._SSL, ck.KafkaError._TRANSPORT,
                                              ck.KafkaError._ALL_BROKERS_DOWN), err


def test_metadata_advertises_the_listener_the_client_came_in_on(env):
    _, _, ports = env
    for name in ("PLAINTEXT", "SASL_PLAINTEXT"):
        with RawClient(ports[name]) as c:
            if name == "SASL_PLAINTEXT":
                _plain_login(c, "alice", "alice-secret")
            resp = c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)
            assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", ports[name])]


def _plain_login(c: RawClient, user: str, password: str, version: int = 1):
    assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    return c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), version)


def test_unauthenticated_produce_closes_the_connection(env):
    from kafkafast.protocol._generated.produce import ProduceRequest

    _, _, ports = env
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        assert c.request(ApiVersionsRequest(), 0).error_code == 0  # allowed before authentication
        c.sock.sendall(__import__("kafkafast.protocol.api", fromlist=["x"]).encode_request(
            ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[]), 7, 9, "raw"))
        assert c.recv_frame() is None


def test_oversized_request_before_authentication_closes_the_connection(env):
    _, _, ports = env
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        c.send_raw((600 * 1024).to_bytes(4, "big") + b"\0\x12\0\0" + b"\0" * 4096)
        assert c.recv_frame() is None


def test_failed_sasl_authenticate_answers_error_then_closes(env):
    _, _, ports = env
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        resp = _plain_login(c, "alice", "nope")
        assert resp.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in resp.error_message
        assert c.recv_frame() is None


def test_legacy_v0_handshake_then_bare_tokens(env):
    _, _, ports = env
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        hs = c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0)
        assert hs.error_code == 0 and "SCRAM-SHA-256" in hs.mechanisms
        token = b"\0alice\0alice-secret"
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.recv_frame() == b""  # PLAIN's empty server token
        resp = c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 1)
        assert resp.brokers[0].port == ports["SASL_PLAINTEXT"]
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0)
        token = b"\0alice\0wrong"
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.recv_frame() is None


def test_unsupported_mechanism_lists_enabled_ones(env):
    _, _, ports = env
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        resp = c.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert resp.error_code == 33 and resp.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    with RawClient(ports["PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 34  # ILLEGAL_SASL_STATE


def test_scram_credentials_described_and_deleted(env):
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

    _, broker, _ = env
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert [(i.mechanism, i.iterations) for i in desc.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 4096)]
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])["dave"] \
        .result(30)
    with pytest.raises(Exception) as info:
        admin.describe_user_scram_credentials(["dave"])["dave"].result(30)
    assert "RESOURCE_NOT_FOUND" in str(info.value) or "does not exist" in str(info.value)
    admin.alter_user_scram_credentials([__import__("confluent_kafka.admin", fromlist=["x"]).UserScramCredentialUpsertion(
        "dave", __import__("confluent_kafka.admin", fromlist=["x"]).ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_512, 4096), b"dave-512")])["dave"].result(30)


def test_reauthentication_kip368(tmp_path, pki):
    broker, ports = start_broker(tmp_path / "data", pki, {"connections.max.reauth.ms": "1500"})
    try:
        with RawClient(ports["SASL_PLAINTEXT"]) as c:
            resp = _plain_login(c, "alice", "alice-secret", version=1)
            assert resp.error_code == 0 and resp.session_lifetime_ms == 1500
            time.sleep(1.0)
            again = _plain_login(c, "alice", "alice-secret", version=1)  # re-authenticate in time
            assert again.error_code == 0 and again.session_lifetime_ms == 1500
            assert c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers
            time.sleep(2.0)  # the session ends without re-authentication
            c.sock.sendall(__import__("kafkafast.protocol.api", fromlist=["x"]).encode_request(
                MetadataRequest(topics=[], allow_auto_topic_creation=False), 9, 99, "raw"))
            assert c.recv_frame() is None
        with RawClient(ports["SASL_PLAINTEXT"]) as c:  # re-authentication keeps the principal
            assert _plain_login(c, "alice", "alice-secret").error_code == 0
            assert _plain_login(c, "bob", "bob-secret").error_code == 58
        # librdkafka re-authenticates by itself within the session lifetime: a producer that
        # keeps sending across several lifetimes sees no error and loses no message
        import confluent_kafka as ck

        errors: list = []
        conn = conn_for("SASL_PLAINTEXT-PLAIN", pki, ports)
        p = ck.Producer({**conn.confluent(), "error_cb": errors.append, "linger.ms": 5})
        delivered: list = []
        t_end = time.monotonic() + 3.5  # over two lifetimes
        while time.monotonic() < t_end:
            p.produce("reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
            p.poll(0.1)
        assert p.flush(20) == 0
        assert errors == [] and len(delivered) >= 30 and not any(delivered)
        log = broker.log_path.read_text(errors="replace")
        # the raw client's explicit one, and at least one by librdkafka within the 3.5 s
        assert log.count("re-authenticated User:alice with PLAIN for 1500 ms") >= 2
    finally:
        broker.kill()


def test_second_handshake_refused_when_reauthentication_is_off(env):
    _, _, ports = env
    with RawClient(ports["SASL_PLAINTEXT"]) as c:
        assert _plain_login(c, "alice", "alice-secret").error_code == 0
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 34  # ILLEGAL_SASL_STATE
        assert c.recv_frame() is None


def test_large_fetches_over_tls_arrive_intact(env):
    """Fetch responses over TLS are read from the segment in 256 KiB steps through a reused
    buffer: several MiB of distinct records must come back byte for byte."""
    import confluent_kafka as ck

    pki, _, ports = env
    conf = conn_for("SSL", pki, ports).confluent()
    records = [bytes([i % 251]) * 1000 + i.to_bytes(4, "big") * 16000 for i in range(60)]  # ~65 KB each
    p = ck.Producer({**conf, "linger.ms": 20, "message.max.bytes": 8 << 20})
    for r in records:
        p.produce("tls-large", r)
    assert p.flush(30) == 0
    c = ck.Consumer({**conf, "group.id": "tls-large", "fetch.max.bytes": 8 << 20,
                     "max.partition.fetch.bytes": 8 << 20, "enable.auto.commit": False})
    c.assign([ck.TopicPartition("tls-large", 0, 0)])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < len(records) and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    assert got == records


def test_secured_listeners_with_worker_processes(tmp_path, pki):
    broker, ports = start_broker(tmp_path / "data", pki, workers=2)
    try:
        for mode in ("SSL", "SASL_SSL-PLAIN"):
            topic = f"mw-{mode.lower()}"
            assert ROUND_TRIPS["confluent"](conn_for(mode, pki, ports), topic) == values(topic)
    finally:
        broker.kill()


def test_client_certificate_subject_is_the_principal(tmp_path, pki):
    """The certificate's subject DN (RFC 2253) through ssl.principal.mapping.rules names the
    principal the authorizer sees: alice's certificate may produce, an anonymous TLS client not."""
    import confluent_kafka as ck

    broker, ports = start_broker(tmp_path / "data", pki, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),O=Clients,C=DE$/$1/L,DEFAULT",
        "super.users": "User:alice"})
    try:
        for mode, expected in (("MTLS", None), ("SSL", ck.KafkaError.TOPIC_AUTHORIZATION_FAILED)):
            conn = conn_for(mode, pki, ports)
            result: list = []
            p = ck.Producer({**conn.confluent(), "message.timeout.ms": 10000})
            p.produce("by-cert", b"v", on_delivery=lambda err, msg: result.append(err))
            p.flush(20)
            assert result and (result[0].code() if result[0] else None) == expected, (mode, result)
    finally:
        broker.kill()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_broker_side_client_authenticates_over_sasl_ssl(env, mechanism):
    """kafkafast.security.client (for inter-broker connections): TLS with host name checking
    against the broker's own trust store, then a SASL exchange, then a request."""
    import socket as socket_

    from kafkafast.security.client import client_ssl_context, sasl_client
    from kafkafast.security.listeners import listener_specs

    pki, _, ports = env
    spec = listener_specs({"listeners": f"SASL_SSL://localhost:{ports['SASL_SSL']}",
                           "ssl.truststore.location": str(pki.ca)})[0]
    ctx = client_ssl_context(spec)
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else SCRAM_USERS[mechanism]
    with ctx.wrap_socket(socket_.create_connection(("127.0.0.1", ports["SASL_SSL"]), timeout=10),
                         server_hostname="localhost") as s:
        c = RawClient.on_socket(s)
        assert c.request(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == 0
        client = sasl_client(mechanism, user, password)
        token = client.first()
        while token is not None:
            resp = c.request(SaslAuthenticateRequest(auth_bytes=token), 1)
            assert resp.error_code == 0, resp.error_message
            token = client.step(resp.auth_bytes)
        md = c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)
        assert md.brokers[0].port == ports["SASL_SSL"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_librdkafka_2_0_logs_in_with_scram(env, mechanism):
    """Debian's kcat (librdkafka 2.0) echoes the client nonce before the combined nonce in its
    SCRAM client-final message; Kafka 3.x accepts that, so must we, and a wrong password must
    still be refused."""
    import shutil
    import subprocess

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        missing_tool("kcat")
    _, broker, ports = env
    user, password = SCRAM_USERS[mechanism]
    topic = f"kcat-{mechanism.lower()}"

    def run(args, pw, stdin=None, metadata_wait_s=15):
        cmd = [kcat, "-b", f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "-X", "security.protocol=SASL_PLAINTEXT",
               "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={pw}",
               "-m", str(metadata_wait_s), *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, timeout=60)

    produced = run(["-P", "-t", topic], password, stdin=b"k1\nk2\nk3\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = run(["-C", "-t", topic, "-o", "beginning", "-e", "-q"], password)
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.split() == [b"k1", b"k2", b"k3"]
    refused = run(["-L"], "wrong-password", metadata_wait_s=4)  # refused logins: kcat waits all of -m for metadata
    assert refused.returncode != 0 and b"SASL authentication error" in refused.stderr


def test_endpoint_identification_algorithm_checks_the_broker_host_name(env):
    """`ssl.endpoint.identification.algorithm` of the broker's own client (inter-broker
    connections): `https` (Kafka's default) refuses a certificate that does not name the host
    dialled; empty turns the name check off but still refuses an untrusted certificate."""
    import socket as socket_
    import ssl as ssl_

    from kafkafast.security.client import client_ssl_context
    from kafkafast.security.listeners import listener_specs

    pki, _, ports = env

    def handshake(algorithm, ca, host="not-this-broker.example"):
        props = {"listeners": f"SSL://localhost:{ports['SSL']}", "ssl.truststore.location": str(ca)}
        if algorithm is not None:
            props["ssl.endpoint.identification.algorithm"] = algorithm
        ctx = client_ssl_context(listener_specs(props)[0])
        with ctx.wrap_socket(socket_.create_connection(("127.0.0.1", ports["SSL"]), timeout=10),
                             server_hostname=host) as s:
            return s.version()

    for algorithm in (None, "https", "HTTPS"):
        with pytest.raises(ssl_.SSLCertVerificationError, match="match|mismatch"):
            handshake(algorithm, pki.ca)
    assert handshake(None, pki.ca, host="localhost") in ("TLSv1.2", "TLSv1.3")
    assert handshake("", pki.ca) in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(ssl_.SSLCertVerificationError):
        handshake("", pki.untrusted_cert)  # a trust store without the broker's CA
