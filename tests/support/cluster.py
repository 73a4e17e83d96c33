"""A real ZooKeeper and three kafkafast brokers in cluster mode, as child processes on free
127.0.0.1 ports (each broker with its own log dir, `zookeeper.connect=127.0.0.1:PORT/kafka`).

    with KafkaCluster(tmp_path, settings={...}) as c:
        c.bootstrap                      # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        c.zk()                           # a kazoo client on the chroot (closed with the cluster)
        c.brokers[1].kill(); c.brokers[1].start()
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kafkafast.testing.cluster import ZooKeeperView
from kafkafast.testing.control import PROPERTY
from kafkafast.testing.scripting import Faults
from tests.support.broker_process import BrokerProcess
from tests.support.zookeeper_process import ZooKeeperProcess

CHROOT = "/kafka"
# small timeouts so failures are noticed within a test's time
TEST_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.num.partitions": "6",
    "offsets.topic.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.enable": "false",
    "controlled.shutdown.retry.backoff.ms": "500",  # a leader without in-sync peers stops within the bound
}


class KafkaCluster(ZooKeeperView):
    def __init__(self, root: Path, *, size: int = 3, settings: dict[str, str] | None = None,
                 workers: int = 0, env: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.env = dict(env or {})  # for every broker process (e.g. KAFKAFAST_PURE=1: the pure twins)
        self.zookeeper = ZooKeeperProcess(self.root / "zookeeper")
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        self.size = size
        self.workers = workers
        self.brokers: dict[int, BrokerProcess] = {}
        self._clients: list[Any] = []

    @property
    def connect(self) -> str:
        return self.zookeeper.connect + CHROOT

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker_port(self, broker_id: int) -> int | None:
        """The PLAINTEXT port of a broker (None: a free one)."""
        return None

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        return {"broker.id": str(broker_id), "zookeeper.connect": self.connect, **self.settings}

    def before_brokers(self) -> None:
        """Runs once ZooKeeper is up, before any broker starts (e.g. to write credentials)."""

    def start(self) -> "KafkaCluster":
        self.zookeeper.start()
        self.before_brokers()
        for i in range(1, self.size + 1):
            self.brokers[i] = BrokerProcess(self.root / f"broker-{i}", port=self.broker_port(i), workers=self.workers,
                                            settings=self.broker_settings(i), env=self.env)
        for b in self.brokers.values():  # all at once: each interpreter's start-up is seconds of CPU
            b.launch()
        for b in self.brokers.values():
            b.wait_ready(timeout=60)
        self.wait_for(lambda: len(self.registered()) == self.size and self.controller_id() > 0, 60,
                      "brokers registered and a controller elected")
        self.wait_for(self.metadata_ready, 30, "every broker's Metadata naming the controller and all brokers")
        return self

    def metadata_ready(self) -> bool:
        """Every broker got the controller's UpdateMetadata (until then Metadata answers
        controller -1, and librdkafka's admin client may wait for a controller until it times out)."""
        from kafkafast.protocol._generated.metadata import MetadataRequest
        from tests.support.raw_client import RawClient

        for b in self.brokers.values():
            try:
                with RawClient(b.port, timeout=5) as rc:
                    r = rc.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)
            except Exception:
                return False
            if r.controller_id < 0 or len(r.brokers) != self.size:
                return False
        return True

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for c in self._clients:
            try:
                c.stop()
                c.close()
            except Exception:
                pass
        for b in self.brokers.values():
            b.kill()
        self.zookeeper.kill()

    # -- ZooKeeper views ---------------------------------------------------------------------
    def zk(self) -> Any:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.connect, timeout=10)
        client.start(timeout=20)
        self._clients.append(client)
        return client

    def _zk(self) -> Any:
        if not self._clients:
            self.zk()
        return self._clients[0]

    def _view_zk(self) -> Any:
        return self._zk()

    def controller_id(self) -> int:
        return self.controller()

    def controller_epoch(self) -> int:
        data, _ = self._zk().get("/controller_epoch")
        return int(data)

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None, assignment: list[list[int]] | None = None) -> None:
        """Creates the topic (with `assignment`: replica lists, first the preferred leader) and
        waits for a leader and the full ISR of every partition."""
        # CreateTopics straight to a live broker (any broker creates topics in cluster mode), retried
        # on another one when a broker was just killed or restarted by an earlier test; a client's
        # admin would wait for the controller it last heard of instead.
        from kafkafast.protocol._generated.create_topics import CreateTopicsRequest as C
        from tests.support.raw_client import RawClient

        topic = C.CreatableTopic(
            name=name, num_partitions=-1 if assignment else partitions,
            replication_factor=-1 if assignment else replication_factor,
            assignments=[C.CreatableReplicaAssignment(partition_index=i, broker_ids=r)
                         for i, r in enumerate(assignment or [])],
            configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])
        partitions = len(assignment) if assignment else partitions
        req = C(topics=[topic], timeout_ms=30000, validate_only=False)

        # a broker an earlier test killed and started again may answer while its old registration
        # is still there, and register again only once that expired: every running broker
        # registered, and INVALID_REPLICATION_FACTOR (too few registered just then) tried again
        running = {i for i, b in self.brokers.items() if b.proc is not None and b.proc.poll() is None}
        self.wait_for(lambda: running <= set(self.registered()), 60, f"brokers {sorted(running)} registered")

        def created() -> bool:
            for b in self.brokers.values():
                if b.proc is None or b.proc.poll() is not None:
                    continue
                try:
                    with RawClient(b.port, timeout=30) as rc:
                        code = rc.request(req, 4).topics[0].error_code
                except OSError:
                    continue
                if code in (0, 36):  # created, or by an earlier attempt (TOPIC_ALREADY_EXISTS)
                    return True
                # REQUEST_TIMED_OUT, INVALID_REPLICATION_FACTOR, BROKER/NOT_CONTROLLER: again
                assert code in (7, 8, 38, 41), f"CreateTopics: error {code}"
            return False

        self.wait_for(created, 60, f"topic {name} created")
        replication_factor = len(assignment[0]) if assignment else replication_factor
        self.wait_for(lambda: all(self._has_leader(name, p) for p in range(partitions)), 30,
                      f"leaders for {name}")
        self.wait_for(lambda: all(len(self.partition_state(name, p)["isr"]) == replication_factor
                                  for p in range(partitions)), 30, f"full ISR for {name}")

    def _has_leader(self, topic: str, partition: int) -> bool:
        return self.leader(topic, partition) >= 0


class FaultyCluster(KafkaCluster):
    """Brokers that take faults from a test-control dir each (kafkafast.testing)."""

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        control = self.root / f"control-{broker_id}"
        control.mkdir(parents=True, exist_ok=True)
        return {**super().broker_settings(broker_id), PROPERTY: str(control)}

    def faults(self, broker_id: int) -> Faults:
        return Faults(str(self.root / f"control-{broker_id}"))


def group_coordinator(cluster: Any, group: str) -> int:
    """The broker id FindCoordinator names for a group, asked of a live broker (-1: none yet)."""
    from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
    from tests.support.raw_client import RawClient

    port = next(b.port for b in cluster.brokers.values() if b.proc.poll() is None)
    with RawClient(port) as rc:
        resp = rc.request(FindCoordinatorRequest(key=group, key_type=0), 2)
    return resp.node_id if resp.error_code == 0 else -1
