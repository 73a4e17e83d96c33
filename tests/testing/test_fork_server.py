"""The fork server holds everything a broker imports: a broker forked from it imports no
module of its own to start and to serve its first produce and fetch, so no test pays an
import after the fork server's one start. The fork server here runs with `python -X
importtime`, which the forked broker inherits: any import in the broker is a line of its
log. (How long a first start takes is measured by perf/testing_first_test.py, not here.)"""
from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer

from kafkafast.testing.broker_process import ForkServer, KafkaTestBroker, _pythonpath


@pytest.mark.parametrize("workers", [0, 2])
def test_a_forked_broker_imports_nothing_to_start_and_serve_its_first_produce_and_fetch(tmp_path, monkeypatch,
                                                                                        workers):
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "kafkafast.testing.fork_server"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=_pythonpath())
    try:
        server = ForkServer(proc)
        monkeypatch.setattr(ForkServer, "_instance", server)  # this test's brokers come from this fork server
        with KafkaTestBroker(tmp_path / "kafka", workers=workers) as broker:
            assert broker.proc.server is server  # type: ignore[union-attr]
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
            acked: list = []
            producer.produce("first", b"v", on_delivery=lambda err, msg: acked.append(err))
            producer.flush(30)
            assert acked == [None]
            consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g",
                                 "auto.offset.reset": "earliest"})
            try:
                consumer.subscribe(["first"])
                message = None
                for _ in range(60):
                    message = consumer.poll(0.5)
                    if message is not None and message.error() is None:
                        break
                assert message is not None and message.value() == b"v"
            finally:
                consumer.close()
        log = broker.log_path.read_text()
        assert log.count("INFO kafkafast.broker: clean start") == max(1, workers)  # every broker process logs here
        assert [line for line in log.splitlines() if line.startswith("import time:")] == []
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(10)
