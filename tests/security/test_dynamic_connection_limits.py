"""Connection quotas as dynamic broker configs (Kafka's DynamicConnectionQuota): set at run time
by IncrementalAlterConfigs on this broker or on the cluster-wide default, applied by every
worker to the connections it accepts from then on, shown by DescribeConfigs with their dynamic
source, kept across a restart, and refused with INVALID_CONFIG when malformed. On a single node
and a 3-broker cluster (the `kafka` fixture: a broker's caps are set through that broker; the
cluster-wide default reaches every broker), and on a broker with two workers. That a cap set
through one broker holds on another is tests/cluster/test_controller.py's."""
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


def alter(admin: AdminClient, name: str, op: AlterConfigOpType, value: str | None = None,
          broker_id: str = "0") -> None:
    entry = ConfigEntry(name, value, incremental_operation=op)
    (fut,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, broker_id,
                                                             incremental_configs=[entry])]).values()
    fut.result(10)


def alter_default(port: int, **configs: str | None) -> None:
    """The cluster-wide default resource (confluent-kafka cannot name it): SET, or DELETE where None."""
    with RawClient(port) as c:
        resp = c.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            IAC.AlterableConfig(name=k.replace("_", "."), config_operation=0 if v is not None else 1, value=v)
            for k, v in configs.items()])]), 1)
    assert resp.responses[0].error_code == 0


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


@pytest.fixture(scope="module")
def node(kafka) -> tuple[str, int, AdminClient]:
    """One broker's id and port, and an admin client."""
    return (*kafka.a_broker(), AdminClient({"bootstrap.servers": kafka.bootstrap}))


def cap_changes_at_run_time_and_survives_a_restart(broker_id: str, port: int, admin: AdminClient, restart) -> None:
    close_all(eventually_open_until_refused(port, 6, 6))  # no cap yet

    # the override first: a cluster's brokers connect to each other from 127.0.0.1
    alter(admin, "max.connections.per.ip.overrides", AlterConfigOpType.SET, "127.0.0.1:100", broker_id)
    alter(admin, "max.connections.per.ip", AlterConfigOpType.SET, "3", broker_id)
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker_id)]).values()
    entry = fut.result(10)["max.connections.per.ip"]
    assert (entry.value, entry.is_read_only) == ("3", False)
    assert entry.source == ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    capped = eventually_open_until_refused(port, 6, 3)  # every worker applies the new cap
    assert capped[-1] is None
    close_all(capped)

    restart()
    capped = eventually_open_until_refused(port, 6, 3)  # persisted: applies from the start
    close_all(capped)

    alter(admin, "max.connections.per.ip", AlterConfigOpType.DELETE, None, broker_id)
    close_all(eventually_open_until_refused(port, 6, 6))  # back to the static value


def test_max_connections_per_ip_changes_at_run_time_and_survives_a_restart(kafka, node):
    cap_changes_at_run_time_and_survives_a_restart(*node, kafka.restart)


def test_max_connections_per_ip_changes_on_every_worker_and_survives_a_restart(broker_factory):
    broker = broker_factory(workers=2)
    cap_changes_at_run_time_and_survives_a_restart("0", broker.port, AdminClient({"bootstrap.servers": broker.bootstrap}),
                                                   broker.restart)


def test_cluster_wide_default_applies_and_the_broker_own_value_wins(node):
    broker_id, port, admin = node
    alter_default(port, max_connections_per_ip="2", max_connections_per_ip_overrides="127.0.0.1:100")
    close_all(eventually_open_until_refused(port, 5, 2))
    alter(admin, "max.connections.per.ip", AlterConfigOpType.SET, "4", broker_id)  # this broker's over the default
    close_all(eventually_open_until_refused(port, 5, 4))
    alter(admin, "max.connections.per.ip", AlterConfigOpType.DELETE, None, broker_id)
    alter_default(port, max_connections_per_ip=None)
    close_all(eventually_open_until_refused(port, 5, 5))


def test_malformed_connection_quotas_are_refused_and_change_nothing(node):
    broker_id, port, admin = node
    for name, value in [("max.connections.per.ip", "-1"), ("max.connections", "many"),
                        ("max.connections.per.ip.overrides", "127.0.0.2")]:
        with pytest.raises(ck.KafkaException) as exc:
            alter(admin, name, AlterConfigOpType.SET, value, broker_id)
        assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG, (name, value)
    with RawClient(port) as c:  # validate_only checks but changes nothing
        resp = c.request(IAC(validate_only=True, resources=[IAC.AlterConfigsResource(
            resource_type=4, resource_name=broker_id, configs=[
                IAC.AlterableConfig(name="max.connections.per.ip", config_operation=0, value="1")])]), 1)
    assert resp.responses[0].error_code == 0
    close_all(eventually_open_until_refused(port, 4, 4))
