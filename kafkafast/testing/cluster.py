"""Several real kafkafast brokers and a real ZooKeeper for one test (`kafka_cluster`).

    with KafkaTestCluster(root, brokers=3) as c:
        c.create_topic("orders", partitions=2, replication_factor=3)   # waits for leaders and full ISRs
        leader = c.leader("orders", 0)
        c.kill(leader)                        # SIGKILL; the controller moves leadership
        ...                                   # clients use c.bootstrap_servers
        c.start(leader)                       # same port and data: it catches up as a follower

ZooKeeper is Debian's package (`kafkafast.cluster.local.ZooKeeperServer`: java with the jars
of /usr/share/java) on a free 127.0.0.1 port with its data under `root/zookeeper`; broker
`i` (ids 1..n) is a `KafkaTestBroker` under `root/broker-<i>` with `broker.id=i` and
`zookeeper.connect=127.0.0.1:<port>/kafka`. Every process dies with the test process.
Cluster state (leaders, ISRs, the controller) is read from ZooKeeper, where the
controller writes it, not from a broker's possibly older metadata.
"""
from __future__ import annotations

import abc

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from kafkafast.cluster.local import ZooKeeperServer, zookeeper_available
from kafkafast.testing.broker_process import KafkaTestBroker, die_with_parent, free_port

CHROOT = "/kafka"
# Timeouts short enough that a killed broker is noticed within a test's time.
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "200",
    "log.cleaner.enable": "false",
    # as Kafka's own test brokers: the last broker of a cluster that stops has no one to hand
    # its leaderships to and would wait out every retry (3 x 5 s by default)
    "controlled.shutdown.retry.backoff.ms": "100",
}


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper (Debian's `zookeeper` package) or java is not installed."""


class ZooKeeperView(abc.ABC):
    """Cluster state as the controller wrote it to ZooKeeper (a subclass gives `_view_zk()`,
    a kazoo client on the cluster's chroot)."""

    @abc.abstractmethod
    def _view_zk(self) -> Any:
        """A started kazoo client on the cluster's chroot."""

    def registered(self) -> list[int]:
        """Ids of the brokers registered in ZooKeeper (alive as far as the cluster knows)."""
        try:
            return sorted(int(c) for c in self._view_zk().get_children("/brokers/ids"))
        except Exception:
            return []

    def controller(self) -> int:
        """Id of the controller, -1 while there is none."""
        try:
            data, _ = self._view_zk().get("/controller")
            return int(json.loads(data)["brokerid"])
        except Exception:
            return -1

    def partition_state(self, topic: str, partition: int) -> dict:
        """The partition's state znode: leader, leader_epoch, isr, controller_epoch."""
        data, _ = self._view_zk().get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The broker id leading the partition (-1: none, or the topic is not there yet)."""
        try:
            return int(self.partition_state(topic, partition)["leader"])
        except Exception:
            return -1

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        try:
            return list(self.partition_state(topic, partition)["isr"])
        except Exception:
            return []

    @staticmethod
    def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
                 interval: float = 0.1) -> Any:
        """Polls `condition` until it returns something true (which is returned)."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)


class KafkaTestCluster(ZooKeeperView):
    """`brokers` kafkafast brokers in ZooKeeper cluster mode. `bootstrap_servers`; `kill(id)`,
    `stop(id)`, `start(id)`; `leader(topic, partition)`, `isr(...)`, `controller()`;
    `create_topic(...)`; `stop()` ends everything. `brokers[id]` is each `KafkaTestBroker`
    (`records(topic)` reads that broker's replica, `faults` injects faults into it)."""

    __test__ = False

    def __init__(self, root: str | Path, *, brokers: int = 3, settings: dict[str, Any] | None = None,
                 start_timeout: float = 60.0, spawn: str | None = None) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if not zookeeper_available():
            raise ZooKeeperUnavailable("kafka_cluster needs ZooKeeper: Debian's zookeeper package "
                                       "(/usr/share/java/zookeeper.jar) and java")
        self.root = Path(root)
        self.zookeeper = ZooKeeperServer(self.root / "zookeeper", free_port())
        rf = str(min(3, brokers))
        defaults = {**CLUSTER_SETTINGS, "offsets.topic.replication.factor": rf, "default.replication.factor": rf,
                    "transaction.state.log.replication.factor": rf}
        self.settings = {**defaults, **{k: str(v) for k, v in (settings or {}).items()}}
        self.start_timeout = start_timeout
        self.brokers: dict[int, KafkaTestBroker] = {
            i: KafkaTestBroker(self.root / f"broker-{i}", settings=self._broker_settings(i),
                               start_timeout=start_timeout, spawn=spawn)
            for i in range(1, brokers + 1)}
        self._zk: Any = None

    def _broker_settings(self, broker_id: int) -> dict[str, str]:
        return {"broker.id": str(broker_id), "zookeeper.connect": self.zookeeper_connect, **self.settings}

    @property
    def zookeeper_connect(self) -> str:
        """`zookeeper.connect` of the brokers (with the chroot)."""
        return f"{self.zookeeper.connect}{CHROOT}"

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's address (running or not: clients skip the ones that do not answer)."""
        return ",".join(b.bootstrap_servers for b in self.brokers.values())

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, broker: int | None = None) -> "KafkaTestCluster":
        """Starts ZooKeeper and every broker (or one broker again, on its port and data), and
        returns once the broker(s) answer and are registered in ZooKeeper."""
        if broker is not None:
            self.brokers[broker].start()
            self.wait_for(lambda: broker in self.registered(), self.start_timeout, f"broker {broker} registered")
            return self
        if self.zookeeper.proc is None or self.zookeeper.proc.poll() is not None:
            self.zookeeper.start(preexec_fn=die_with_parent)
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            for future in [pool.submit(b.start) for b in self.brokers.values()]:
                future.result()
        self.wait_for(lambda: len(self.registered()) == len(self.brokers) and self.controller() > 0,
                      self.start_timeout, "every broker registered and a controller elected")
        return self

    def kill(self, broker: int) -> None:
        """SIGKILL one broker (no clean shutdown: the controller sees its ZooKeeper session
        expire, after zookeeper.session.timeout.ms, and elects new leaders)."""
        self.brokers[broker].kill()

    def stop(self, broker: int | None = None) -> None:
        """Graceful stop of one broker (its session ends at once, so leaders move at once),
        or of every broker and ZooKeeper."""
        if broker is not None:
            self.brokers[broker].stop()
            return
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:
                pass
            self._zk = None
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.stop(), self.brokers.values()))
        self.zookeeper.kill()

    def __enter__(self) -> "KafkaTestCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- state, as the controller wrote it to ZooKeeper (ZooKeeperView) ------------------------
    def _view_zk(self) -> Any:
        return self.zk()

    def zk(self) -> Any:
        """A kazoo client on the cluster's chroot (closed by `stop()`)."""
        if self._zk is None:
            from kazoo.client import KazooClient  # deferred: optional, only for a cluster

            client = KazooClient(hosts=self.zookeeper_connect, timeout=10)
            client.start(timeout=20)
            self._zk = client
        return self._zk

    def wait_for_leader(self, topic: str, partition: int = 0, *, not_on: int | None = None,
                        timeout: float = 30.0) -> int:
        """The partition's leader once it has one (other than `not_on`, e.g. a killed broker)."""
        return self.wait_for(lambda: (lambda l: l if l >= 0 and l != not_on else 0)(self.leader(topic, partition)),
                             timeout, f"a leader of {topic}-{partition}" + (f" other than {not_on}" if not_on else ""))

    # -- topics -------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     config: dict[str, Any] | None = None, *, timeout: float = 30.0) -> None:
        """Creates a topic (CreateTopics through a running broker; raises the Kafka error) and
        waits until every partition has a leader and all its replicas in the ISR.
        `partitions` defaults to the brokers' num.partitions (1 unless `settings` change it),
        `replication_factor` to default.replication.factor (min(3, number of brokers))."""
        from kafkafast.protocol._generated.create_topics import CreateTopicsRequest  # deferred: 0.3 s to import
        from kafkafast.protocol.errors import raise_for_code  # deferred: kafkafast.testing starts light

        rf = replication_factor or int(self.settings["default.replication.factor"])
        partitions = partitions or int(self.settings.get("num.partitions", 1))
        T = CreateTopicsRequest.CreatableTopic
        C = CreateTopicsRequest.CreatableTopicConfig
        topic = T(name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
                  configs=[C(name=k, value=str(v)) for k, v in (config or {}).items()])
        via = next((b for b in self.brokers.values() if b.running), None)
        if via is None:
            raise RuntimeError("no broker of the cluster is running")
        result = via._request(CreateTopicsRequest(topics=[topic], timeout_ms=int(timeout * 1000)), 2,
                              timeout=timeout).topics[0]
        if result.error_code:
            raise_for_code(result.error_code, result.error_message)
        self.wait_for(lambda: all(self.leader(name, p) >= 0 and len(self.isr(name, p)) == rf
                                  for p in range(partitions)), timeout, f"leaders and full ISRs of {name}")
