"""Connection quotas as dynamic broker configs (Kafka's DynamicConnectionQuota): set at run time
by IncrementalAlterConfigs on this broker or on the cluster-wide default, applied by every
worker to the connections it accepts from then on, shown by DescribeConfigs with their dynamic
source, kept across a restart, and refused with INVALID_CONFIG when malformed."""
from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from tests.security.test_limits import answered, connect
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(120)

OTHER_IP = "127.0.0.2"  # the raw connections' source: the admin's own connections come from 127.0.0.1


def alter(admin: AdminClient, name: str, op: AlterConfigOpType, value: str | None = None) -> None:
    entry = ConfigEntry(name, value, incremental_operation=op)
    (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0",
                                                             incremental_configs=[entry])]).values()
    fut.result(10)


def open_until_refused(port: int, most: int) -> list:
    """Opens connections from OTHER_IP until one is refused (or `most` are open); the open ones,
    then a final None if one was refused."""
    out: list = []
    for _ in range(most):
        s = connect(port, OTHER_IP)
        if not answered(s):
            s.close()
            return out + [None]
        out.append(s)
    return out


def close_all(socks: list) -> None:
    for s in socks:
        if s is not None:
            s.close()


def eventually_open_until_refused(port: int, most: int, expect: int) -> list:
    """Closed connections free their slots once the broker has seen them go: retries a bounded
    number of times until exactly `expect` are admitted before the refusal."""
    deadline = time.monotonic() + 15
    while True:
        got = open_until_refused(port, most)
        if len([s for s in got if s is not None]) == expect and (expect == most or got[-1] is None):
            return got
        close_all(got)
        assert time.monotonic() < deadline, f"admitted {len(got)} connections, expected {expect}"
        time.sleep(0.3)


@pytest.mark.parametrize("workers", [0, 2], ids=["one-process", "workers-2"])
def test_max_connections_per_ip_changes_at_run_time_and_survives_a_restart(broker_factory, workers):
    broker = broker_factory(workers=workers)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    close_all(eventually_open_until_refused(broker.port, 6, 6))  # no cap yet

    alter(admin, "max.connections.per.ip", AlterConfigOpType.SET, "3")
    alter(admin, "max.connections.per.ip.overrides", AlterConfigOpType.SET, "127.0.0.1:100")
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    entry = fut.result(10)["max.connections.per.ip"]
    assert (entry.value, entry.is_read_only) == ("3", False)
    assert entry.source == ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    capped = eventually_open_until_refused(broker.port, 6, 3)  # every worker applies the new cap
    assert capped[-1] is None
    close_all(capped)

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    capped = eventually_open_until_refused(broker.port, 6, 3)  # persisted: applies from the start
    close_all(capped)

    alter(admin, "max.connections.per.ip", AlterConfigOpType.DELETE)
    close_all(eventually_open_until_refused(broker.port, 6, 6))  # back to the static value


def test_cluster_wide_default_applies_and_the_broker_own_value_wins(broker_factory):
    broker = broker_factory()
    with RawClient(broker.port) as c:  # the cluster-wide default resource (confluent-kafka cannot name it)
        resp = c.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            IAC.AlterableConfig(name="max.connections.per.ip", config_operation=0, value="2"),
            IAC.AlterableConfig(name="max.connections.per.ip.overrides", config_operation=0,
                                value="127.0.0.1:100")])]), 1)
    assert resp.responses[0].error_code == 0
    close_all(eventually_open_until_refused(broker.port, 5, 2))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    alter(admin, "max.connections.per.ip", AlterConfigOpType.SET, "4")  # this broker's over the default
    close_all(eventually_open_until_refused(broker.port, 5, 4))


def test_malformed_connection_quotas_are_refused_and_change_nothing(broker_factory):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name, value in [("max.connections.per.ip", "-1"), ("max.connections", "many"),
                        ("max.connections.per.ip.overrides", "127.0.0.2")]:
        with pytest.raises(ck.KafkaException) as exc:
            alter(admin, name, AlterConfigOpType.SET, value)
        assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG, (name, value)
    with RawClient(broker.port) as c:  # validate_only checks but changes nothing
        resp = c.request(IAC(validate_only=True, resources=[IAC.AlterConfigsResource(
            resource_type=4, resource_name="0", configs=[
                IAC.AlterableConfig(name="max.connections.per.ip", config_operation=0, value="1")])]), 1)
    assert resp.responses[0].error_code == 0
    close_all(eventually_open_until_refused(broker.port, 4, 4))
