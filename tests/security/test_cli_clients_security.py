"""`kafkafast produce`, `consume` and `bench` over TLS and SASL, configured as Kafka's tools are
(`--producer.config`, `--consumer.config`, `--command-config`, `--producer-property`): PLAIN,
SCRAM and OAUTHBEARER over SASL_SSL, mutual-TLS-free SSL; a refused login or a setting the
client cannot honour is one clean error line naming it, exit status 1."""
from __future__ import annotations

import json

import pytest

from tests.support.cli import kafkafast

pytestmark = pytest.mark.timeout(180)

PLAIN = ('sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
         'username="alice" password="{password}";')
SCRAM = ('sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
         'username="carol" password="carol-256";')
OAUTH = ('sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
         'unsecuredLoginStringClaim_sub="erin";')


def config(tmp_path, name: str, pki, *lines: str) -> str:
    path = tmp_path / f"{name}.properties"
    path.write_text("\n".join([f"ssl.truststore.location={pki.ca}", "ssl.truststore.type=PEM", *lines]) + "\n")
    return str(path)


@pytest.fixture
def secured(secure_broker, pki):
    broker = secure_broker(listeners=("SSL", "SASL_SSL"))
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": broker.plaintext})
    up = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-256")
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result(30)
    kafkafast("topics", "--bootstrap-server", broker.plaintext, "--create", "--topic", "secure-lines",
              "--partitions", "1")
    return broker


def test_produce_and_consume_over_sasl_ssl_and_ssl_with_kafkas_config_flags(secured, pki, tmp_path):
    sasl = ["--bootstrap-server", secured.addr("SASL_SSL")]
    plain = config(tmp_path, "plain", pki, "security.protocol=SASL_SSL", "sasl.mechanism=PLAIN",
                   PLAIN.format(password="alice-secret"))
    kafkafast("produce", *sasl, "--topic", "secure-lines", "--producer.config", plain, stdin="a\nb\n")
    scram = config(tmp_path, "scram", pki, "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-256", SCRAM)
    kafkafast("produce", *sasl, "--topic", "secure-lines", "--command-config", scram, stdin="c\n")
    ssl_only = config(tmp_path, "ssl", pki, "security.protocol=SSL")
    kafkafast("produce", "--bootstrap-server", secured.addr("SSL"), "--topic", "secure-lines",
              "--producer.config", ssl_only, stdin="d\n")

    oauth = config(tmp_path, "oauth", pki, "security.protocol=SASL_SSL", "sasl.mechanism=OAUTHBEARER", OAUTH)
    out = kafkafast("consume", *sasl, "--topic", "secure-lines", "--from-beginning", "--max-messages", "4",
                    "--consumer.config", oauth)
    assert out.stdout.splitlines() == ["a", "b", "c", "d"]
    # --consumer-property items win over the file, as in Kafka's tools
    out = kafkafast("consume", "--bootstrap-server", secured.addr("SSL"), "--topic", "secure-lines",
                    "--from-beginning", "--max-messages", "1", "--consumer.config", oauth,
                    "--consumer-property", "security.protocol=SSL")
    assert out.stdout.splitlines() == ["a"]


def test_bench_produce_and_consume_over_sasl_ssl(secured, pki, tmp_path):
    sasl = ["--bootstrap-server", secured.addr("SASL_SSL")]
    scram = config(tmp_path, "scram", pki, "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-256", SCRAM)
    prod = json.loads(kafkafast("bench", "produce", *sasl, "--topic", "secure-lines", "--num-records", "500",
                                "--record-size", "100", "--throughput", "-1", "--producer.config", scram,
                                "--client", "kafkafast", "--json").stdout)
    assert prod["records"] == 500 and prod["errors"] == 0
    cons = json.loads(kafkafast("bench", "consume", *sasl, "--topic", "secure-lines", "--messages", "500",
                                "--command-config", scram, "--client", "kafkafast", "--timeout", "40",
                                "--json").stdout)
    assert cons["records"] == 500 and not cons["timed_out"]


@pytest.mark.parametrize(("lines", "message"), [
    (("security.protocol=SASL_SSL", "sasl.mechanism=PLAIN", PLAIN.format(password="wrong")),
     "SASL PLAIN as alice: Authentication failed"),
    (("security.protocol=SASL_SSL", "sasl.mechanism=GSSAPI"), "sasl.mechanism=GSSAPI"),
    (("security.protocol=SSL", "ssl.truststore.type=JKS"), "ssl.truststore.type=JKS"),
    (("security.protocol=SSL", "ssl.cipher.suites=TLS_AES_128_GCM_SHA256"), "ssl.cipher.suites"),
    (("security.protocol=SSL", "ssl.endpoint.identification.algorithm=http"),
     "ssl.endpoint.identification.algorithm=http"),
])
def test_a_refused_login_or_a_setting_the_client_cannot_honour_is_one_error_line(secured, pki, tmp_path, lines,
                                                                                 message):
    bad = config(tmp_path, "bad", pki, *lines)
    for cmd in (["produce", "--producer.config", bad], ["consume", "--consumer.config", bad, "--max-messages", "1",
                                                          "--timeout-ms", "5000"]):
        out = kafkafast(cmd[0], "--bootstrap-server", secured.addr("SASL_SSL"), "--topic", "secure-lines", *cmd[1:],
                        stdin="x\n", check=False)
        assert out.returncode == 1, out
        assert message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_mutual_tls_presents_the_pem_key_store(secure_broker, pki, tmp_path):
    """ssl.keystore.location (key and certificate chain in one PEM file, as Kafka's PEM key
    stores) is presented to a listener that requires client certificates; without it the
    handshake is refused."""
    broker = secure_broker(listeners=("SSL",), settings={"listener.name.ssl.ssl.client.auth": "required"})
    kafkafast("topics", "--bootstrap-server", broker.plaintext, "--create", "--topic", "mtls", "--partitions", "1")
    keystore = tmp_path / "alice-keystore.pem"
    keystore.write_bytes(pki.client_key.read_bytes() + pki.client_cert.read_bytes())
    ssl_addr = ["--bootstrap-server", broker.addr("SSL"), "--topic", "mtls"]
    mtls = config(tmp_path, "mtls", pki, "security.protocol=SSL", "ssl.keystore.type=PEM",
                  f"ssl.keystore.location={keystore}")
    kafkafast("produce", *ssl_addr, "--producer.config", mtls, stdin="signed\n")
    out = kafkafast("consume", *ssl_addr, "--from-beginning", "--max-messages", "1", "--consumer.config", mtls)
    assert out.stdout.splitlines() == ["signed"]
    anonymous = config(tmp_path, "anonymous", pki, "security.protocol=SSL", "request.timeout.ms=5000")
    refused = kafkafast("produce", *ssl_addr, "--producer.config", anonymous, stdin="x\n", check=False)
    assert refused.returncode == 1 and "no broker reachable" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "never retrieved" not in refused.stderr, refused.stderr
