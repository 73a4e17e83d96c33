"""Listener parsing as Kafka does it: names upper-cased, protocols from
listener.security.protocol.map, IPv6 hosts in brackets, an empty host for every interface."""
from __future__ import annotations

import pytest

from kafkafast.config import BrokerConfig, ConfigError, Listener, parse_listeners, parse_protocol_map


def test_listener_grammar():
    assert parse_listeners("PLAINTEXT://[::1]:9092") == [Listener("PLAINTEXT", "::1", 9092, "PLAINTEXT")]
    assert parse_listeners("plaintext://:9092") == [Listener("PLAINTEXT", "", 9092, "PLAINTEXT")]
    assert parse_listeners("A://h:1,B://h:2", {"A": "PLAINTEXT", "B": "SSL"}) == [
        Listener("A", "h", 1, "PLAINTEXT"), Listener("B", "h", 2, "SSL")]
    for bad in ("x", "PLAINTEXT://h", "PLAINTEXT://h:65536", "://h:1", "PLAINTEXT://h:1,PLAINTEXT://h:2", ""):
        with pytest.raises(ConfigError):
            parse_listeners(bad)


def test_protocol_map():
    assert parse_protocol_map("client:ssl, REPL:PLAINTEXT") == {"CLIENT": "SSL", "REPL": "PLAINTEXT"}
    for bad in ("CLIENT", "CLIENT:TLS", "A:SSL,a:SSL"):
        with pytest.raises(ConfigError):
            parse_protocol_map(bad)


def load(**props: str) -> BrokerConfig:
    return BrokerConfig.load(None, {k.replace("_", "."): v for k, v in props.items()})


def test_broker_config_takes_several_listeners_and_refuses_unknown_advertised_ones():
    assert load(listeners="INTERNAL://h:1", listener_security_protocol_map="INTERNAL:PLAINTEXT").listeners() == [
        Listener("INTERNAL", "h", 1, "PLAINTEXT")]
    two = load(listeners="PLAINTEXT://h:1,SSL://h:2")  # several listeners, TLS among them, are served
    assert [(x.name, x.security_protocol) for x in two.listeners()] == [("PLAINTEXT", "PLAINTEXT"), ("SSL", "SSL")]
    with pytest.raises(ConfigError, match="advertised.listeners: listener OTHER is not one of listeners"):
        load(listeners="PLAINTEXT://h:1", advertised_listeners="OTHER://x:1",
             listener_security_protocol_map="OTHER:PLAINTEXT,PLAINTEXT:PLAINTEXT")
    with pytest.raises(ConfigError, match="Invalid value many for configuration num.partitions: Not a number of type INT"):
        load(num_partitions="many")
