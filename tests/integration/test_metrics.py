"""The broker's Prometheus endpoint (`metrics.port`): one /metrics per broker, summed over
its workers, with the JMX exporter's names; values move with traffic."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import REPO, free_port
from tests.support.cli import kafkafast


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape_when(port: int, name: str, minimum: float = 1, bound: float = 10, **labels: str) -> dict:
    """A scrape once `name{labels}` reached `minimum` (else the last one after `bound` s): a
    request is observed once its answer is written, so a client can hold the answer first."""
    deadline = time.monotonic() + bound
    while True:
        m = scrape(port)
        if value(m, name, **labels) >= minimum or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def value(m: dict, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


# Dashboard series that only the queue/flush/authentication/cleaner test produces.
NEEDS_SPECIAL_TRAFFIC = {"kafka_server_socket_server_metrics_failed_authentication_total",
                         "kafka_log_logflushstats_logflushrateandtimems_bucket",
                         "kafka_log_logcleanermanager_uncleanable_partitions_count"}


def dashboard_queries() -> set[tuple[str, tuple]]:
    """(metric name, its exact label matchers) of every series the Grafana dashboard in
    deploy/ plots (`label=""`: the label is absent; regex matchers such as instance=~ are
    Prometheus's target labels and left out)."""
    dash = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/kafkafast.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    out = set()
    for e in exprs:
        for name, matchers in re.findall(r"\b((?:kafka(?:fast)?|process)_[a-z_]+)\{([^}]*)\}", e):
            exact = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', matchers)))
            out.add((name, exact))
    return out


def dashboard_series() -> set[str]:
    """The metric names the Grafana dashboard in deploy/ plots."""
    return {name for name, _ in dashboard_queries()}


def unserved_queries(m: dict, skip: set[str] = frozenset()) -> set:
    """The dashboard's queries (see dashboard_queries) that no sample of scrape `m` answers."""
    return {(name, exact) for name, exact in dashboard_queries() if name not in skip
            and not any(n == name and all(dict(labels).get(k, "") == v for k, v in exact) for n, labels in m)}


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
    # Consumer lag as kafka_exporter serves it: log end minus committed, per partition and
    # summed per topic; the committed offsets; members (the console consumer has left).
    assert value(m, "kafka_consumergroup_lag_sum", consumergroup="readers", topic="m") == 50
    lags = [value(m, "kafka_consumergroup_lag", consumergroup="readers", topic="m", partition=str(p)) for p in range(4)]
    committed = [value(m, "kafka_consumergroup_current_offset", consumergroup="readers", topic="m", partition=str(p))
                 for p in range(4)]
    assert sum(lags) == 50 and sum(committed) == 150
    assert [e - c for e, c in zip(ends, committed)] == lags
    assert value(m, "kafka_consumergroup_current_offset_sum", consumergroup="readers", topic="m") == 150
    assert ("kafka_consumergroup_members", (("consumergroup", "readers"),)) in m
    assert value(m, "kafka_consumergroup_members", consumergroup="readers") == 0
    assert [value(m, "kafka_topic_partition_current_offset", topic="m", partition=str(p)) for p in range(4)] == ends
    assert [m[("kafka_topic_partition_oldest_offset", (("partition", str(p)), ("topic", "m")))] for p in range(4)] == [0] * 4

    # Per worker: the requests, bytes in and out each answered add up to the broker's totals.
    workers_seen = {dict(k[1])["worker"] for k in m if k[0] == "kafkafast_worker_requests_total"}
    assert workers_seen == {str(i) for i in range(max(workers, 1))}
    assert sum(m[k] for k in m if k[0] == "kafka_network_requestmetrics_requests_total") == \
        sum(m[k] for k in m if k[0] == "kafkafast_worker_requests_total")
    for name in ("bytesin", "bytesout"):
        assert sum(m[k] for k in m if k[0] == f"kafkafast_worker_{name}_total") == \
            value(m, f"kafka_server_brokertopicmetrics_{name}_total")

    # Every serving process froze its start-up's objects out of the collector's walks
    # (runtime/loop_watch.py) and probes its event loop's lag.
    assert value(m, "kafkafast_gc_frozen_objects") > 10_000 * max(workers, 1)
    assert value(m, "kafkafast_eventloop_lag_ms_count") > 0

    # Every query of the Grafana dashboard in deploy/ names a series served (those that need
    # failed logins, flushes or a broken compacted log: in the next test).
    assert not unserved_queries(m, NEEDS_SPECIAL_TRAFFIC)

    # The standard process_* series: the serving process without labels, each worker with its own.
    started = m[("process_start_time_seconds", ())]
    assert time.time() - 600 < started <= time.time()
    for labels in [()] + [(("worker", str(i)),) for i in range(workers)]:
        assert m[("process_resident_memory_bytes", labels)] > 10e6
        assert m[("process_open_fds", labels)] >= 3
        assert m[("process_cpu_seconds_total", labels)] > 0
        assert started <= m[("process_start_time_seconds", labels)] <= time.time()  # forked after the supervisor
    assert {dict(k[1]).get("worker") for k in m if k[0] == "process_cpu_seconds_total"} == \
        {None, *(str(i) for i in range(workers))}

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
    m = scrape_when(mport, "kafka_network_requestmetrics_requestqueuetimems_count", request="Produce")
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
    m = scrape_when(mport, "kafka_server_socket_server_metrics_failed_authentication_total", listener="SASL_PLAINTEXT")
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


def quantiles(m: dict, name: str, **labels: str) -> dict[str, float]:
    return {q: m[(name, tuple(sorted({**labels, "quantile": q}.items())))]
            for q in ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")}


def test_request_time_quantiles_and_event_loop_idle_from_long_polling_fetches(broker_factory):
    """kafka_network_requestmetrics_{totaltimems,remotetimems,localtimems,...}{request,quantile} as
    the JMX exporter serves Kafka's histograms, over both workers' observations: a consumer of an
    empty partition long-polls (fetch.wait.max.ms=300), so its fetches take 300 ms, all of it
    waiting (remote time). The workers' event loops: busy fraction each, the idle ratios."""
    import confluent_kafka as ck

    mport = free_port()
    broker = broker_factory(workers=2, settings={"metrics.port": str(mport), "metrics.host": "127.0.0.1"})
    kafkafast("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "idle", "--partitions", "1")
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "pollers", "fetch.wait.max.ms": 300,
                     "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition("idle", 0, 0)])
        deadline = time.monotonic() + 30
        while value(scrape(mport), "kafka_network_requestmetrics_totaltimems_count", request="Fetch") < 6:
            assert time.monotonic() < deadline, "the consumer never long-polled"
            c.poll(0.5)
    finally:
        c.close()
    deadline = time.monotonic() + 10
    while True:  # the fetch in flight at close is answered (and recorded) up to 300 ms later
        m = scrape(mport)
        fetches = sum(v for k, v in m.items() if k[0] == "kafka_network_requestmetrics_requests_total"
                      and dict(k[1])["request"] == "Fetch")
        if value(m, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") == fetches >= 6:
            break
        assert time.monotonic() < deadline, "the Fetch counts never agreed"
        time.sleep(0.2)
    total = quantiles(m, "kafka_network_requestmetrics_totaltimems", request="Fetch")
    remote = quantiles(m, "kafka_network_requestmetrics_remotetimems", request="Fetch")
    local = quantiles(m, "kafka_network_requestmetrics_localtimems", request="Fetch")
    assert 280 <= total["0.50"] <= 400 and 280 <= remote["0.50"] <= 400, (total, remote)
    assert list(total.values()) == sorted(total.values()) and total["0.999"] < 1000
    assert local["0.50"] < 50 and quantiles(m, "kafka_network_requestmetrics_responsesendtimems",
                                             request="Fetch")["0.50"] < 50
    # Requests that wait for nothing have no remote time; queue time is served per request too.
    assert quantiles(m, "kafka_network_requestmetrics_remotetimems", request="Metadata")["0.999"] < 0.01  # first bucket
    assert quantiles(m, "kafka_network_requestmetrics_requestqueuetimems", request="Metadata")["0.50"] >= 0
    assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request="Fetch", le="250.0") < fetches
    assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request="Fetch", le="+Inf") == fetches
    # Prometheus asks for OpenMetrics first; the text format is served (as the JMX exporter does),
    # which carries a family's quantiles and buckets together.
    req = urllib.request.Request(f"http://127.0.0.1:{mport}/metrics",
                                 headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'kafka_network_requestmetrics_totaltimems{quantile="0.99",request="Fetch"}' in resp.read().decode()
    # No flush yet: the log flush time is served, at 0, as Kafka's empty histogram.
    assert quantiles(m, "kafka_log_logflushstats_logflushrateandtimems")["0.99"] == 0

    busy = {dict(k[1])["worker"]: v for k, v in m.items() if k[0] == "kafkafast_worker_busy_ratio"}
    seconds = {dict(k[1])["worker"]: v for k, v in m.items() if k[0] == "kafkafast_worker_busy_seconds_total"}
    assert set(busy) == set(seconds) == {"0", "1"}
    assert all(0 <= r <= 1 for r in busy.values()) and all(s > 0 for s in seconds.values())
    idle = value(m, "kafka_network_socketserver_networkprocessoravgidlepercent")
    assert idle == pytest.approx(1 - sum(busy.values()) / 2) and 0 < idle <= 1
    assert value(m, "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent") == idle


def test_quantiles_merge_the_observations_of_every_process(tmp_path):
    """Two worker processes record 1..100 ms and 101..200 ms into their own files; the
    endpoint's quantiles are those of all 200 observations (run in a child: enabling
    recording is process-wide)."""
    script = f"""
import os
from kafkafast.metrics import recorder
from kafkafast.metrics.server import WorkerMetrics
recorder.enable({str(tmp_path)!r})
for first in (1, 101):
    pid = os.fork()
    if pid == 0:
        for ms in range(first, first + 100):
            recorder._FLUSH_TIME.observe(float(ms))
        os._exit(0)
    os.waitpid(pid, 0)
for m in WorkerMetrics({str(tmp_path)!r}).collect():
    if m.name == recorder.FLUSH_TIME:
        print(sorted((s.name, tuple(s.labels.items()), s.value) for s in m.samples))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    samples = {(n, labels): v for n, labels, v in eval(out.stdout)}
    q = {dict(labels)["quantile"]: v for (n, labels), v in samples.items() if n == "kafka_log_logflushstats_logflushrateandtimems"}
    assert q == {"0.50": 100.0, "0.75": 150.0, "0.95": 190.0, "0.98": 196.0, "0.99": 198.0, "0.999": 199.8}
    assert samples[("kafka_log_logflushstats_logflushrateandtimems_count", ())] == 200
    assert samples[("kafka_log_logflushstats_logflushrateandtimems_sum", ())] == sum(range(1, 201))
    assert samples[("kafka_log_logflushstats_logflushrateandtimems_bucket", (("le", "100.0"),))] == 100
    assert {dict(labels)["le"] for n, labels in samples if n.endswith("_bucket")} == \
        {"0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "25.0", "50.0", "100.0", "250.0", "500.0", "1000.0",
         "2500.0", "5000.0", "10000.0", "+Inf"}


def test_quantiles_are_of_the_last_window_of_observations(tmp_path):
    """Quantiles are of the observations since the newest scrape at least WINDOW_S old (here
    0.3 s instead of 60), of all of them when that window holds none."""
    script = f"""
import time
from kafkafast.metrics import recorder, server
recorder.enable({str(tmp_path)!r})
server.WINDOW_S, server.SNAPSHOT_EVERY_S = 0.3, 0.0
metrics = server.WorkerMetrics({str(tmp_path)!r})

def p99():
    m = next(m for m in metrics.collect() if m.name == recorder.FLUSH_TIME)
    return next(s.value for s in m.samples if s.labels.get("quantile") == "0.99")

for _ in range(100):
    recorder._FLUSH_TIME.observe(1000.0)
first = p99()
time.sleep(0.4)
for _ in range(100):
    recorder._FLUSH_TIME.observe(1.0)
second = p99()
time.sleep(0.4)
print(first, second, p99())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    first, second, third = map(float, out.stdout.split())
    assert 800 < first <= 1000  # all since the start: no snapshot is old enough yet
    assert 0.8 < second <= 1.0  # the window after the first scrape: only the 1 ms flushes
    assert 800 < third <= 1000  # nothing new in the window: all since the start again


def test_produce_and_fetch_request_rates_count_partitions_and_failures_as_kafka(broker_factory):
    """kafka_server_brokertopicmetrics_{total,failed}{produce,fetch}requests_total{topic} (and the
    all-topics sums): a keyless record refused by a compacted topic (INVALID_RECORD) is a failed
    produce; an unknown topic is in neither; fetching is counted per partition, and failures
    Kafka expects (OFFSET_OUT_OF_RANGE) are not failed fetches."""
    import confluent_kafka as ck

    mport = free_port()
    broker = broker_factory(workers=2, settings={"metrics.port": str(mport), "metrics.host": "127.0.0.1",
                                                 "auto.create.topics.enable": "false"})
    b = ["--bootstrap-server", broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "compacted", "--partitions", "1", "--config", "cleanup.policy=compact")
    m = scrape(mport)
    for name in ("totalproducerequests", "failedproducerequests", "totalfetchrequests", "failedfetchrequests"):
        assert value(m, f"kafka_server_brokertopicmetrics_{name}_total") == 0  # served from the start
        assert (f"kafka_server_brokertopicmetrics_{name}_total", ()) in m

    def produce(topic: str, key: bytes | None) -> str | None:
        errors = []
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "linger.ms": 0,
                         "message.timeout.ms": 5000, "enable.idempotence": False})
        p.produce(topic, b"v", key=key, partition=0, on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        return errors[0] and errors[0].name()

    assert produce("compacted", None) == "INVALID_RECORD"
    assert produce("compacted", b"k") is None
    assert produce("compacted", b"k2") is None
    assert produce("no-such-topic", b"k") in ("UNKNOWN_TOPIC_OR_PART", "_MSG_TIMED_OUT")
    m = scrape(mport)
    rate = "kafka_server_brokertopicmetrics_{}_total"
    assert value(m, rate.format("totalproducerequests"), topic="compacted") == 3
    assert value(m, rate.format("failedproducerequests"), topic="compacted") == 1
    assert value(m, rate.format("totalproducerequests")) == 3
    assert value(m, rate.format("failedproducerequests")) == 1
    assert ("kafka_server_brokertopicmetrics_totalproducerequests_total", (("topic", "no-such-topic"),)) not in m

    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        c.assign([ck.TopicPartition("compacted", 0, 1000)])  # out of range: reset to the earliest
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2:
            assert time.monotonic() < deadline
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        c.close()
    m = scrape(mport)
    fetches = sum(v for k, v in m.items() if k[0] == "kafka_network_requestmetrics_requests_total"
                  and dict(k[1])["request"] == "Fetch")
    assert 2 <= value(m, rate.format("totalfetchrequests"), topic="compacted") == \
        value(m, rate.format("totalfetchrequests")) <= fetches  # one partition a fetch
    assert value(m, rate.format("failedfetchrequests"), topic="compacted") == 0
    assert value(m, rate.format("failedfetchrequests")) == 0

    # kafka_consumergroup_members: a subscribed consumer is a member while it runs
    member = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "members", "auto.offset.reset": "earliest"})
    try:
        assigned: list = []
        member.subscribe(["compacted"], on_assign=lambda _c, parts: assigned.extend(parts))
        deadline = time.monotonic() + 30
        while not assigned:
            assert time.monotonic() < deadline, "never assigned"
            member.poll(0.2)
        assert value(scrape(mport), "kafka_consumergroup_members", consumergroup="members") == 1
    finally:
        member.close()
    assert value(scrape(mport), "kafka_consumergroup_members", consumergroup="members") == 0


def test_min_isr_and_offline_replica_counts(broker_factory):
    """kafka_server_replicamanager_{underminisr,atminisr}partitioncount: a lone replica is its
    own ISR (1), under a topic's min.insync.replicas=2, at the default 1;
    offlinereplicacount: a partition whose log cannot be opened (its segment replaced by a
    directory, as tests/fault does for a failed disk)."""
    from tests.support.storage_faults import create, produce

    mport = free_port()
    broker = broker_factory(workers=2, settings={"metrics.port": str(mport), "metrics.host": "127.0.0.1"})
    b = ["--bootstrap-server", broker.bootstrap]
    m = scrape(mport)
    assert value(m, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert ("kafka_server_replicamanager_offlinereplicacount", ()) in m
    kafkafast("topics", *b, "--create", "--topic", "strict", "--partitions", "2", "--config", "min.insync.replicas=2")
    create(broker.bootstrap, "loose", 3)
    m = scrape(mport)
    assert value(m, "kafka_server_replicamanager_underminisrpartitioncount") == 2
    assert value(m, "kafka_server_replicamanager_atminisrpartitioncount") == 3
    assert value(m, "kafka_server_replicamanager_offlinereplicacount") == 0

    assert not produce(broker.bootstrap, "loose", 0, [b"a", b"b"])[1]
    assert broker.stop() == 0
    segment = broker.data_dir / "loose-0" / "00000000000000000000.log"
    segment.rename(segment.with_name("moved-away"))
    segment.mkdir()
    broker.start()
    m = scrape(mport)
    assert value(m, "kafkafast_broker_up") == 1, broker.log_tail(60)
    assert value(m, "kafka_server_replicamanager_offlinereplicacount") == 1
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    assert value(m, "kafka_server_replicamanager_atminisrpartitioncount") == 2  # led partitions only
    assert value(m, "kafka_server_replicamanager_partitioncount") == 5
