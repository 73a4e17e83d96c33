"""Dynamic broker configs in ZooKeeper (`kafkafast/cluster/dynamic_configs.py`) read by several
threads at once: a read that ZooKeeper answered before a later change, and that returns after
that change was taken, never puts the old entry back. Real ZooKeeper; the test only holds the
slow reader's answer until the newer change has been read. Cluster only: the ZooKeeper store's
own concurrency (dynamic broker configs themselves run on both modes in
tests/integration/test_kafka_compat_configs.py)."""
from __future__ import annotations

import threading

from kafkafast.broker.placement import LocalPlacement
from kafkafast.cluster.dynamic_configs import ZkDynamicConfigs
from kafkafast.cluster.node import ClusterNode
from kafkafast.config import BrokerConfig
from tests.support.zookeeper_process import ZooKeeperProcess


def test_a_slow_read_of_an_older_version_does_not_replace_a_newer_entry(tmp_path):
    zk = ZooKeeperProcess(tmp_path / "zookeeper").start()
    node = ClusterNode(BrokerConfig.load(overrides={"zookeeper.connect": zk.connect}), str(tmp_path), LocalPlacement())
    try:
        node.connect()
        node.set_broker_configs("7", {"message.max.bytes": "1000"})
        dyn = ZkDynamicConfigs(str(tmp_path))
        dyn.attach(node, 7)
        assert dyn.broker_configs("7") == {"message.max.bytes": "1000"}

        read_done, release = threading.Event(), threading.Event()
        real_read = node.broker_configs_at

        def held_read(scope: str):
            answer = real_read(scope)  # ZooKeeper answers now, with the entry as it is now
            if threading.current_thread().name == "slow-reader":
                read_done.set()
                assert release.wait(30)
            return answer

        node.broker_configs_at = held_read  # type: ignore[method-assign]
        slow = threading.Thread(target=dyn.reload, args=("7",), name="slow-reader")
        slow.start()
        assert read_done.wait(30)
        dyn.set_broker_configs("7", {"message.max.bytes": "2000"})  # written, then read back on this thread
        assert dyn.broker_configs("7") == {"message.max.bytes": "2000"}
        release.set()
        slow.join(30)
        assert not slow.is_alive()
        assert dyn.broker_configs("7") == {"message.max.bytes": "2000"}
        assert node.broker_configs("7") == {"message.max.bytes": "2000"}
    finally:
        if node.zk is not None:
            node.zk.stop()
            node.zk.close()
        zk.kill()
