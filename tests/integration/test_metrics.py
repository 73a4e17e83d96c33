"""The broker's Prometheus endpoint (`metrics.port`): one /metrics per broker, summed over
its workers, with the JMX exporter's names; values move with traffic."""
from __future__ import annotations

import os
import signal
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import free_port
from tests.support.cli import kafkafast


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: dict, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


# Dashboard series that only the queue/flush/authentication/cleaner test produces.
NEEDS_SPECIAL_TRAFFIC = {"kafka_server_socket_server_metrics_failed_authentication_total",
                         "kafka_log_logflushstats_logflushrateandtimems_bucket",
                         "kafka_log_logcleanermanager_uncleanable_partitions_count"}


def dashboard_series() -> set[str]:
    """The metric names the Grafana dashboard in deploy/ plots."""
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/kafkafast.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    return {n for e in exprs for n in re.findall(r"\b(kafka(?:fast)?_[a-z_]+)\{", e)}


def _workers(supervisor_pid: int) -> list[int]:
    with open(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children") as fh:
        return [int(x) for x in fh.read().split()]


@pytest.mark.parametrize("workers", [0, 2])
def test_metrics_move_with_traffic(broker_factory, workers):
    mport = free_port()
    broker = broker_factory(workers=workers, settings={"metrics.port": str(mport), "metrics.host": "127.0.0.1"})
    b = ["--bootstrap-server", broker.bootstrap]
    assert f"metrics on http://127.0.0.1:{mport}/metrics" in broker.log_tail(200)
    before = scrape(mport)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 0
    assert value(before, "kafkafast_broker_up") == 1
    assert value(before, "kafka_controller_kafkacontroller_activecontrollercount") == 1

    kafkafast("topics", *b, "--create", "--topic", "m", "--partitions", "4")
    lines = "".join(f"k{i}\t{'x' * 50}\n" for i in range(200))
    kafkafast("produce", *b, "--topic", "m", "--property", "parse.key=true", stdin=lines)
    kafkafast("consume", *b, "--topic", "m", "--group", "readers", "--from-beginning", "--max-messages", "150")

    m = scrape(mport)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 200
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total") >= 200  # all topics
    assert value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic="m") > 200 * 50
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="m") > 150 * 50
    assert value(m, "kafka_network_requestmetrics_requests_total", request="CreateTopics", version="7") == 1
    produce_versions = [k for k in m if k[0] == "kafka_network_requestmetrics_requests_total"
                        and dict(k[1])["request"] == "Produce"]
    assert produce_versions and sum(m[k] for k in produce_versions) >= 1
    assert value(m, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") >= 1
    assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request="Metadata", le="+Inf") >= 1
    assert value(m, "kafka_server_replicamanager_partitioncount") >= 4
    assert value(m, "kafka_server_replicamanager_leadercount") == value(m, "kafka_server_replicamanager_partitioncount")
    assert value(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    sizes = [value(m, "kafka_log_log_size", topic="m", partition=str(p)) for p in range(4)]
    ends = [value(m, "kafka_log_log_logendoffset", topic="m", partition=str(p)) for p in range(4)]
    assert sum(ends) == 200 and all(s > 0 for s, e in zip(sizes, ends) if e)
    assert value(m, "kafka_coordinator_group_groupmetadatamanager_numgroups") == 1
    assert value(m, "kafka_consumergroup_lag_sum", consumergroup="readers") == 50
    assert sum(value(m, "kafka_consumergroup_lag", consumergroup="readers", topic="m", partition=str(p))
               for p in range(4)) == 50

    # Every series the Grafana dashboard in deploy/ plots is served (those that need failed
    # logins, flushes or a broken compacted log: in the next test).
    plotted = dashboard_series()
    served = {name for name, _ in m}
    assert plotted and plotted - NEEDS_SPECIAL_TRAFFIC <= served, plotted - served

    from kafkafast.client.sync import KafkaConsumer  # an open connection shows per listener

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        c.assign([("m", 0)])
        c.poll(200)
        assert value(scrape(mport), "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
    finally:
        c.close()

    if workers:
        assert value(m, "kafkafast_worker_restarts_total") == 0
        os.kill(_workers(broker.proc.pid)[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while value(scrape(mport), "kafkafast_worker_restarts_total") < 1 and time.monotonic() < deadline:
            time.sleep(0.3)
        after = scrape(mport)
        assert value(after, "kafkafast_worker_restarts_total") == 1
        # The dead worker's counts stay in the totals.
        assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 200


def test_metrics_are_off_by_default(broker):
    """No metrics.port: no endpoint is started (the start is logged when there is one)."""
    assert "metrics on http" not in broker.log_tail(200)


def test_a_file_being_created_does_not_break_the_scrape(tmp_path):
    """A worker's metrics file is empty for an instant while it is created; the endpoint
    sums the others instead of failing (run in a child: enabling recording is process-wide)."""
    import subprocess
    import sys

    from tests.support.broker_process import REPO

    script = f"""
import os
from kafkafast.metrics import recorder
from kafkafast.metrics.server import WorkerMetrics
recorder.enable({str(tmp_path)!r})
recorder._REQUESTS.labels("Produce", "9").inc(3)
open(os.path.join({str(tmp_path)!r}, "counter_999999.db"), "wb").close()
samples = [(s.name, s.labels, s.value) for m in WorkerMetrics({str(tmp_path)!r}).collect() for s in m.samples]
print(samples)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    assert "('kafka_network_requestmetrics_requests_total', {'request': 'Produce', 'version': '9'}, 3.0)" in out.stdout


def test_queue_time_flush_time_authentications_and_uncleanable_partitions_move(broker_factory, tmp_path):
    """kafka_network_requestmetrics_requestqueuetimems, kafka_log_logflushstats_logflushrateandtimems,
    kafka_server_socket_server_metrics_{successful,failed}_authentication_total{listener} and
    kafka_log_logcleanermanager_uncleanable_partitions_count{logDirectory}, each from real traffic
    over two worker processes."""
    import confluent_kafka as ck

    from kafkafast.records import CODEC_GZIP
    from kafkafast.storage import LogConfig
    from kafkafast.storage.log import Log
    from tests.security.conftest import PLAIN_JAAS
    from tests.support import hostile_batches as hb
    from tests.unit.test_cleaner_bad_batches import NOW, fill

    mport, plain, sasl = free_port(), free_port(), free_port()
    settings = {"metrics.port": str(mport), "metrics.host": "127.0.0.1",
                "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
                "connection.failed.authentication.delay.ms": "0", "log.cleaner.backoff.ms": "300"}
    broker = broker_factory(workers=2, port=plain, settings=settings)
    b = ["--bootstrap-server", broker.bootstrap]
    before = scrape(mport)
    assert value(before, "kafka_log_logflushstats_logflushrateandtimems_count") == 0
    assert value(before, "kafka_server_socket_server_metrics_failed_authentication_total", listener="SASL_PLAINTEXT") == 0

    # queue time and flush time: every produced batch is flushed (flush.messages=1)
    kafkafast("topics", *b, "--create", "--topic", "flushed", "--partitions", "2", "--config", "flush.messages=1")
    kafkafast("produce", *b, "--topic", "flushed", stdin="".join(f"v{i}\n" for i in range(30)))
    m = scrape(mport)
    assert value(m, "kafka_network_requestmetrics_requestqueuetimems_count", request="Produce") >= 1
    assert value(m, "kafka_network_requestmetrics_requestqueuetimems_bucket", request="Metadata", le="+Inf") >= 1
    assert value(m, "kafka_network_requestmetrics_requestqueuetimems_sum", request="Produce") >= 0
    assert value(m, "kafka_log_logflushstats_logflushrateandtimems_count") >= 1
    assert value(m, "kafka_log_logflushstats_logflushrateandtimems_sum") > 0
    # Kafka counts no authentication on PLAINTEXT (its channel is ready from the start)
    assert value(m, "kafka_server_socket_server_metrics_successful_authentication_total", listener="PLAINTEXT") == 0

    # authentications on the SASL listener: one good login, one wrong password
    def sasl_producer(password: str) -> list:
        errors: list = []
        p = ck.Producer({"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": password,
                         "message.timeout.ms": 5000, "error_cb": lambda e: errors.append(e)})
        p.produce("flushed", b"x")
        p.flush(10)
        return errors

    assert sasl_producer("alice-secret") == []
    assert any("Authentication" in str(e) or e.code() == ck.KafkaError._AUTHENTICATION for e in sasl_producer("no"))
    m = scrape(mport)
    assert value(m, "kafka_server_socket_server_metrics_successful_authentication_total", listener="SASL_PLAINTEXT") >= 1
    assert value(m, "kafka_server_socket_server_metrics_failed_authentication_total", listener="SASL_PLAINTEXT") >= 1
    assert value(m, "kafka_server_socket_server_metrics_failed_authentication_total", listener="PLAINTEXT") == 0

    # an uncleanable partition: a compacted log holding a batch the cleaner cannot decode
    # (written while the broker was stopped, as a log copied from elsewhere would be)
    log_dir = os.path.abspath(broker.data_dir)
    kafkafast("topics", *b, "--create", "--topic", "cq", "--partitions", "1", "--config", "cleanup.policy=compact",
              "--config", "min.cleanable.dirty.ratio=0.01", "--config", "segment.bytes=2000")
    assert value(scrape(mport), "kafka_log_logcleanermanager_uncleanable_partitions_count", logDirectory=log_dir) == 0
    assert broker.stop() == 0
    cfg = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": "2000"})
    lg = Log.open(os.path.join(log_dir, "cq-0"), "cq", 0, cfg, needs_recovery=True, recovery_point=0)
    fill(lg, 10, CODEC_GZIP)
    lg.append(bytearray(hb.garbage(CODEC_GZIP)), 0, now_ms=NOW - 1000)
    fill(lg, 10, CODEC_GZIP)
    lg.close()
    os.unlink(os.path.join(log_dir, ".kafka_cleanshutdown"))  # the next start recovers what was added
    broker.start()
    deadline = time.monotonic() + 30
    while value(scrape(mport), "kafka_log_logcleanermanager_uncleanable_partitions_count", logDirectory=log_dir) != 1:
        assert time.monotonic() < deadline, "the uncleanable partition never showed"
        time.sleep(0.5)
    assert "cq-0 is uncleanable" in broker.log_tail(400)
    served = {n for n, _ in m} | {n for n, _ in scrape(mport)}  # before and after the restart
    assert NEEDS_SPECIAL_TRAFFIC <= dashboard_series() and NEEDS_SPECIAL_TRAFFIC <= served
