"""The brokers a feature test runs against when its behaviour is the same in both modes (issue
24): a single node, and a 3-broker ZooKeeper cluster whose topics have replication factor 3.
The `kafka` fixture (tests/conftest.py) gives one of each per test module; a test asks the
target, never the mode, for what differs: the replication factor of the topics it creates,
which broker to send a raw request to, where the leader's replica lives."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from tests.integration.test_bad_input import create_topic
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import KafkaCluster
from tests.support.raw_client import RawClient

MODES = ["single-node", "cluster"]
# what the feature tests need of either (transactions and groups on small internal topics,
# quick aborts of timed-out transactions); the cluster adds tests/support/cluster.py's timeouts
SETTINGS = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "log.cleaner.enable": "true", "log.cleaner.backoff.ms": "100",
    # KIP-848 groups: librdkafka gives each heartbeat the interval as its request timeout
    "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000",
    "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
}
CLUSTER_SETTINGS = {"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
                    "default.replication.factor": "3"}


def listener_ports(names: tuple[str, ...]) -> dict[str, int]:
    return {name: free_port() for name in ("PLAINTEXT", *names)}


def listeners_setting(ports: dict[str, int]) -> dict[str, str]:
    return {"listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())} if len(ports) > 1 \
        else {}


class ListenersCluster(KafkaCluster):
    """A cluster whose brokers have listeners besides PLAINTEXT (their inter-broker one)."""

    def __init__(self, root: Path, settings: dict[str, str], listeners: tuple[str, ...]) -> None:
        super().__init__(root, settings=settings)
        self.listener_ports = {i: listener_ports(listeners) for i in range(1, self.size + 1)}

    def broker_port(self, broker_id: int) -> int:
        return self.listener_ports[broker_id]["PLAINTEXT"]

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        return {**super().broker_settings(broker_id), **listeners_setting(self.listener_ports[broker_id])}


class Target:
    """A running single node or cluster: `bootstrap`, `replication_factor` for new topics,
    `create_topic`, and the port of the broker that answers for a partition or a coordinator key."""

    def __init__(self, mode: str, root: Path, settings: dict[str, str] | None = None,
                 listeners: tuple[str, ...] = ()) -> None:
        """`settings`: what a test module adds to SETTINGS (the `kafka_settings` fixture);
        `listeners`: listener names each broker has besides PLAINTEXT (`kafka_listeners`)."""
        self.mode = mode
        self.node: BrokerProcess | None = None
        self.cluster: KafkaCluster | None = None
        if mode == "cluster":
            self.cluster = ListenersCluster(root, {**SETTINGS, **CLUSTER_SETTINGS, **(settings or {})}, listeners)
            self.listener_ports = self.cluster.listener_ports
            self.replication_factor = 3
        else:
            self.listener_ports = {-1: listener_ports(listeners)}
            self.node = BrokerProcess(root / "data", port=self.listener_ports[-1]["PLAINTEXT"], settings={
                **SETTINGS, **(settings or {}), **listeners_setting(self.listener_ports[-1])})
            self.replication_factor = 1

    def start(self) -> "Target":
        if self.cluster is not None:
            self.cluster.start()
        else:
            self.node.start()  # type: ignore[union-attr]
        return self

    def restart(self) -> None:
        """Every broker stopped (SIGTERM, all at once) and started again on its data; returns
        once every broker answers Metadata with all of them and every replica is in sync."""
        if self.cluster is None:
            self.node.restart()  # type: ignore[union-attr]
            return
        c = self.cluster
        with ThreadPoolExecutor(c.size) as pool:
            list(pool.map(lambda b: b.stop(), c.brokers.values()))
        for b in c.brokers.values():
            b.start(timeout=60)
        c.wait_for(lambda: len(c.registered()) == c.size and c.metadata_ready() and self._in_sync(), 60,
                   "the restarted brokers registered and in sync")

    def _in_sync(self) -> bool:
        """Every partition's ISR holds all its replicas."""
        zk = self.cluster._zk()  # type: ignore[union-attr]
        for topic in zk.get_children("/brokers/topics"):
            replicas = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
            if any(sorted(self.cluster.isr(topic, int(p))) != sorted(r)  # type: ignore[union-attr]
                   for p, r in replicas.items()):
                return False
        return True

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        else:
            self.node.kill()  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"<{self.mode} at {self.bootstrap}>"

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap if self.cluster is not None else self.node.bootstrap  # type: ignore[union-attr]

    wait_for = staticmethod(KafkaCluster.wait_for)  # (condition, timeout, what): polls until it holds

    def listener_port(self, name: str) -> int:
        """A broker's port on listener `name` (a client bootstrapping there learns the others')."""
        return next(iter(self.listener_ports.values()))[name]

    def ports(self) -> dict[int, int]:
        """Broker id -> port (a single node: its one port, under id -1)."""
        if self.cluster is not None:
            return {i: b.port for i, b in self.cluster.brokers.items()}
        return {-1: self.node.port}  # type: ignore[union-attr]

    def a_broker(self) -> tuple[str, int]:
        """The id (the name of its BROKER config resource) and PLAINTEXT port of the broker whose
        ports `listener_port` gives."""
        if self.cluster is not None:
            first = next(iter(self.listener_ports))
            return str(first), self.listener_ports[first]["PLAINTEXT"]
        with RawClient(self.node.port) as rc:  # type: ignore[union-attr]
            (broker,) = rc.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers
        return str(broker.node_id), self.node.port  # type: ignore[union-attr]

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        """Created with the target's replication factor; returns once every partition has a
        leader (and, in the cluster, every replica in sync)."""
        if self.cluster is not None:
            self.cluster.create_topic(name, partitions, self.replication_factor, configs)
            return
        assert create_topic(self.node.port, name, partitions, configs).error_code == 0  # type: ignore[union-attr]

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        """Until Metadata from every broker names a leader for each partition (a topic a client's
        admin created: the cluster elects its leaders a moment later)."""
        def ready() -> bool:
            for port in self.ports().values():
                with RawClient(port) as rc:
                    md = rc.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                                    allow_auto_topic_creation=False), 9)
                parts = md.topics[0].partitions if md.topics and md.topics[0].error_code == 0 else []
                if len(parts) != partitions or any(p.leader_id < 0 for p in parts):
                    return False
            return True

        KafkaCluster.wait_for(ready, timeout, f"leaders of {topic}")

    def leader_port(self, topic: str, partition: int, listener: str = "PLAINTEXT") -> int:
        if self.cluster is None:
            return self.listener_ports[-1][listener]
        leader = self.cluster.wait_for(lambda: max(self.cluster.leader(topic, partition), 0), 30,  # type: ignore
                                       f"a leader of {topic}-{partition}")
        return self.listener_ports[leader][listener]

    def partition_dir(self, topic: str, partition: int) -> Path:
        """The directory of the partition's leader replica."""
        if self.cluster is None:
            return self.node.data_dir / f"{topic}-{partition}"  # type: ignore[union-attr]
        leader = self.cluster.wait_for(lambda: max(self.cluster.leader(topic, partition), 0), 30,  # type: ignore
                                       f"a leader of {topic}-{partition}")
        return self.cluster.brokers[leader].data_dir / f"{topic}-{partition}"

    def replica_dirs(self, topic: str, partition: int) -> list[Path]:
        """The directories of every replica of the partition (a single node: its one)."""
        if self.cluster is None:
            return [self.partition_dir(topic, partition)]
        return [b.data_dir / f"{topic}-{partition}" for b in self.cluster.brokers.values()
                if (b.data_dir / f"{topic}-{partition}").is_dir()]

    def coordinator_port(self, key: str, key_type: int = 0, listener: str = "PLAINTEXT") -> int:
        """The port of the broker coordinating a group (key_type 0) or transactional id (1)."""
        if self.cluster is None:
            return self.listener_ports[-1][listener]
        ports = {i: p[listener] for i, p in self.listener_ports.items()}

        def found() -> Any:
            with RawClient(self.listener_port("PLAINTEXT")) as rc:
                resp = rc.request(FindCoordinatorRequest(key=key, key_type=key_type), 2)
            return ports.get(resp.node_id) if resp.error_code == 0 else None

        return KafkaCluster.wait_for(found, 30, f"the coordinator of {key}")
