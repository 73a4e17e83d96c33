"""Certificate rotation without a restart (Kafka's KIP-226 dynamic SSL stores): a TLS
listener's key store is replaced by IncrementalAlterConfigs on this broker's resource with
the `listener.name.<listener>.` prefix, every worker serves new connections with it while
open ones go on, a store rewritten in place is reloaded by altering it to the same value, the
change survives a restart; what Kafka refuses is refused (on a single node and a 3-broker
cluster, the `kafka` fixture); and DescribeConfigs never shows a secret. A cluster broker's
inter-broker store rotating through that broker only is tests/cluster/test_security.py's."""
from __future__ import annotations

import socket
import ssl

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AlterConfigOpType, AdminClient, ConfigEntry, ConfigResource, ResourceType

from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from tests.security.conftest import tls_settings
from tests.security.pki import server_keystore
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(120)

KEYSTORE = "listener.name.ssl.ssl.keystore.location"
KEY_PASSWORD = "listener.name.ssl.ssl.key.password"


def served_certificate(port: int, ca: str) -> bytes:
    """The DER certificate a new TLS connection to the listener is served."""
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return s.getpeercert(binary_form=True)


def certificate_der(keystore) -> bytes:
    """The DER form of the first certificate in a PEM key store."""
    text = keystore.read_text()
    first = text[text.index("-----BEGIN CERTIFICATE-----"):]
    return ssl.PEM_cert_to_DER_cert(first[:first.index("-----END CERTIFICATE-----") + 25])


def alter(admin: AdminClient, scope: str, entries: dict[str, str | None]) -> None:
    ops = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
           for n, v in entries.items()]
    (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, scope,
                                                             incremental_configs=ops)]).values()
    fut.result(10)


def refused(admin: AdminClient, scope: str, entries: dict[str, str]) -> ck.KafkaError:
    with pytest.raises(ck.KafkaException) as info:
        alter(admin, scope, entries)
    return info.value.args[0]


def tls_producer(addr: str, pki) -> ck.Producer:
    return ck.Producer({"bootstrap.servers": addr, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                        "ssl.endpoint.identification.algorithm": "https"})


def produce(p: ck.Producer, value: bytes) -> None:
    errors: list = []
    p.produce("rotation", value, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0
    assert errors == [None]


@pytest.fixture(scope="module")
def kafka_settings(pki) -> dict[str, str]:
    return tls_settings(pki)


@pytest.fixture(scope="module")
def kafka_listeners() -> tuple[str, ...]:
    return ("SSL",)


def test_key_store_rotates_at_run_time_on_every_worker_and_survives_a_restart(secure_broker, pki, tmp_path):
    broker = secure_broker(listeners=("SSL", "SASL_PLAINTEXT"), workers=2)
    port, ca = broker.ports["SSL"], str(pki.ca)
    admin = AdminClient({"bootstrap.servers": broker.plaintext})
    assert served_certificate(port, ca) == certificate_der(pki.server_keystore)
    before = tls_producer(broker.addr("SSL"), pki)
    produce(before, b"before")

    # a new key and certificate for the same name, its key under a new password
    rotated = server_keystore(pki, tmp_path / "rotated.pem", password=b"newpass")
    alter(admin, "0", {KEYSTORE: str(rotated), KEY_PASSWORD: "newpass"})
    new = certificate_der(rotated)
    assert new != certificate_der(pki.server_keystore)
    # connections spread over both workers (SO_REUSEPORT): every one gets the new certificate
    assert {served_certificate(port, ca) for _ in range(8)} == {new}
    produce(before, b"open connection, old session")  # the connection opened before keeps working
    after = tls_producer(broker.addr("SSL"), pki)
    produce(after, b"new connection")

    # rewritten in place under the same name: altering it to the same value reloads it
    server_keystore(pki, rotated, password=b"newpass")
    in_place = certificate_der(rotated)
    alter(admin, "0", {KEYSTORE: str(rotated)})
    assert {served_certificate(port, ca) for _ in range(8)} == {in_place}

    # DescribeConfigs: the store's location as this broker's dynamic config, its password hidden
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    configs = fut.result(10)
    assert configs[KEYSTORE].value == str(rotated)
    assert configs[KEYSTORE].source == ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not configs[KEYSTORE].is_read_only
    for secret in (KEY_PASSWORD, "ssl.key.password", "listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        assert configs[secret].is_sensitive and configs[secret].value is None, secret
    assert not configs["ssl.keystore.location"].is_sensitive

    store = broker.proc.data_dir / "__kafkafast_dynamic_configs.json"  # holds the key's password: owner only
    assert store.stat().st_mode & 0o077 == 0

    before.flush(5)
    after.flush(5)
    broker.proc.restart()
    assert served_certificate(port, ca) == in_place


def test_what_kafka_refuses_is_refused_and_changes_nothing(kafka, pki, tmp_path):
    broker_id, plaintext = kafka.a_broker()
    port, ca = kafka.listener_port("SSL"), str(pki.ca)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    original = certificate_der(pki.server_keystore)
    other = server_keystore(pki, tmp_path / "other.pem", cn="some other host")
    good = server_keystore(pki, tmp_path / "good.pem")

    err = refused(admin, broker_id, {"ssl.keystore.location": str(good)})  # no listener prefix
    assert err.code() == ck.KafkaError.INVALID_REQUEST and "per-listener" in err.str()
    with RawClient(plaintext) as c:  # the cluster-wide default (confluent-kafka cannot name it): per broker only
        resp = c.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            IAC.AlterableConfig(name=KEYSTORE, config_operation=0, value=str(good))])]), 1)
    assert resp.responses[0].error_code == ck.KafkaError.INVALID_REQUEST
    assert "broker id must be specified" in resp.responses[0].error_message
    err = refused(admin, broker_id, {"listener.name.plaintext.ssl.keystore.location": str(good)})
    assert err.code() == ck.KafkaError.INVALID_REQUEST and "not an SSL or SASL_SSL listener" in err.str()
    err = refused(admin, broker_id, {KEYSTORE: str(other), KEY_PASSWORD: ""})  # another subject
    assert err.code() == ck.KafkaError.INVALID_CONFIG and "subject" in err.str()
    err = refused(admin, broker_id, {KEYSTORE: str(tmp_path / "missing.pem")})
    assert err.code() == ck.KafkaError.INVALID_CONFIG
    err = refused(admin, broker_id, {"listener.name.ssl.ssl.client.auth": "required"})  # not reconfigurable in Kafka
    assert err.code() == ck.KafkaError.INVALID_REQUEST and "dynamically" in err.str()

    err = refused(admin, broker_id, {"num.io.threads": "16"})  # dynamic in Kafka, no such pool here: says why
    assert err.code() == ck.KafkaError.INVALID_REQUEST and "thread pools" in err.str()

    (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker_id)]).values()
    assert KEYSTORE not in fut.result(10)
    assert served_certificate(port, ca) == original
