"""Fixtures for the security tests: a PKI per session and brokers with several listeners
(PLAINTEXT first, so the harness's readiness probe keeps working)."""
from __future__ import annotations

import pytest

from tests.security.pki import make_pki
from tests.support.broker_process import BrokerProcess, free_port

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


class SecureBroker:
    def __init__(self, proc: BrokerProcess, ports: dict[str, int]) -> None:
        self.proc = proc
        self.ports = ports

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def plaintext(self) -> str:
        return self.proc.bootstrap


def tls_settings(pki, **extra) -> dict:
    s = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
         "ssl.key.password": pki.key_password, "ssl.truststore.type": "PEM",
         "ssl.truststore.location": str(pki.ca)}
    s.update(extra)
    return s


@pytest.fixture
def secure_broker(tmp_path, pki):
    """start(listeners=["SSL", "SASL_SSL"], settings={...}, workers=0) -> SecureBroker."""
    started: list[BrokerProcess] = []

    def start(listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"), settings: dict | None = None,
              workers: int = 0, name: str = "data") -> SecureBroker:
        port = free_port()
        ports = {"PLAINTEXT": port}
        for name_ in listeners:
            ports[name_] = free_port()
        props = tls_settings(pki)
        props.update({
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": "50",
        })
        props.update(settings or {})
        proc = BrokerProcess(tmp_path / name, port=port, workers=workers, settings=props)
        started.append(proc)
        proc.start()
        return SecureBroker(proc, ports)

    yield start
    for b in started:
        b.kill()
