"""The /metrics endpoint of a broker (see the package docstring): started by
`kafkafast broker` before it forks its workers when `metrics.port` is set."""
from __future__ import annotations

import bisect
import glob
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from kafkafast.metrics import recorder
from kafkafast.metrics.state import BrokerState

log = logging.getLogger("kafkafast.metrics")

# Per-topic counters that Kafka also reports summed over all topics (the MBean without a
# topic), which the JMX exporter turns into the same name without the label.
ALL_TOPICS = {"kafka_server_brokertopicmetrics_messagesin", "kafka_server_brokertopicmetrics_bytesin",
              "kafka_server_brokertopicmetrics_bytesout", *(n for pair in recorder.RATES.values() for n in pair)}
# Histograms served as the JMX exporter serves Kafka's: quantiles, _count (and, kept from
# the Prometheus histogram, _sum and the coarse _bucket series).
QUANTILED = {recorder.REQUEST_TIME_PREFIX + t for t in recorder.REQUEST_TIMES} | {recorder.FLUSH_TIME,
                                                                                  recorder.ZK_LATENCY}
QUANTILES = ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")
WINDOW_S = 60.0  # quantiles are of the observations since the snapshot at least this old
SNAPSHOT_EVERY_S = 5.0


class WorkerMetrics:
    """The workers' counters and histograms (summed over their files) plus, for the
    per-topic counters, the all-topics sum, and for the QUANTILED histograms their quantiles.

    Quantiles, merged over processes: every process records each observation into fixed
    fine buckets (recorder.FINE_BUCKETS_MS, ten a decade) in its own file; a scrape sums the
    buckets over all files (the dead workers' too), subtracts the sums of a snapshot taken
    at least WINDOW_S earlier (snapshots are kept at most every SNAPSHOT_EVERY_S, at scrapes),
    and interpolates linearly inside the bucket that holds the quantile's rank, as PromQL's
    histogram_quantile does: a quantile is that of every observation of the window, off by
    less than its bucket's width (at most a third of its value). When the window holds no
    observation of a series, its quantiles are those of every observation since the start
    (Kafka's reservoir also keeps its last samples while nothing new arrives)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._snapshots: deque[tuple[float, dict[tuple, list[float]]]] = deque()

    def collect(self) -> Iterator[Any]:
        # A process creating its file (at its first request) leaves it empty for an
        # instant; such a file holds nothing yet and cannot be parsed, so it is skipped.
        files = []
        for path in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                if os.path.getsize(path) > 0 and _live_or_cumulative(path):
                    files.append(path)
            except OSError:
                continue
        missing = set(ALL_TOPICS)
        fine: dict[tuple, list[float]] = {}
        quantiled = []
        for metric in MultiProcessCollector.merge(files, accumulate=True):
            if metric.name in ALL_TOPICS:
                missing.discard(metric.name)
                totals = [s for s in metric.samples if s.name.endswith("_total")]
                metric.add_sample(metric.name + "_total", {}, sum(s.value for s in totals))
            if metric.name in QUANTILED:
                quantiled.append(metric)
                for s in metric.samples:
                    if s.name.endswith("_bucket"):
                        key = (metric.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")))
                        fine.setdefault(key, []).append(s.value)
                continue
            yield metric
        for name in sorted(missing):  # Kafka serves its all-topics meters from the start
            yield CounterMetricFamily(name, "Summed over all topics", value=0.0)
        base = self._window_base(fine)
        for metric in quantiled:
            yield _with_quantiles(metric, fine, base)

    def _window_base(self, fine: dict[tuple, list[float]]) -> dict[tuple, list[float]]:
        """The cumulative buckets of the newest snapshot at least WINDOW_S old (none: empty);
        `fine` becomes a snapshot when the last is SNAPSHOT_EVERY_S old."""
        now = time.monotonic()
        with self._lock:
            snaps = self._snapshots
            while len(snaps) >= 2 and now - snaps[1][0] >= WINDOW_S:
                snaps.popleft()
            base = snaps[0][1] if snaps and now - snaps[0][0] >= WINDOW_S else {}
            if not snaps or now - snaps[-1][0] >= SNAPSHOT_EVERY_S:
                snaps.append((now, fine))
        return base


def _with_quantiles(metric: Any, fine: dict[tuple, list[float]], base: dict[tuple, list[float]]) -> Any:
    """`metric` (a merged fine-bucket histogram) as one summary family: its quantiles per
    label set, _count, _sum and the buckets of recorder.TIME_BUCKETS_MS."""
    served = set(recorder.TIME_BUCKETS_MS)
    out = Metric(metric.name, metric.documentation, "summary")
    for s in metric.samples:
        if not s.name.endswith("_bucket"):
            out.samples.append(s)
        elif float(s.labels["le"]) in served:
            out.samples.append(s)
    for key, counts in fine.items():
        if key[0] != metric.name:
            continue
        before = base.get(key)
        window = [c - b for c, b in zip(counts, before)] if before and len(before) == len(counts) else counts
        if window[-1] <= 0:
            window = counts
        labels = dict(key[1])
        for q in QUANTILES:  # 0 before the first observation, as Kafka's empty histogram
            out.add_sample(metric.name, {**labels, "quantile": q}, quantile(float(q), window) if window[-1] > 0 else 0.0)
    return out


def quantile(q: float, cumulative: list[float]) -> float:
    """The q-quantile of observations counted in cumulative buckets whose upper bounds are
    recorder.FINE_BUCKETS_MS: linear inside the bucket holding rank q*n; the highest finite
    bound for a rank in the +Inf bucket."""
    bounds = recorder.FINE_BUCKETS_MS
    rank = q * cumulative[-1]
    i = bisect.bisect_left(cumulative, rank)
    if i >= len(bounds) - 1:
        return bounds[-2]
    lower = bounds[i - 1] if i > 0 else 0.0
    below = cumulative[i - 1] if i > 0 else 0.0
    inside = cumulative[i] - below
    return lower + (bounds[i] - lower) * ((rank - below) / inside if inside > 0 else 1.0)


def _live_or_cumulative(path: str) -> bool:
    """A live gauge's file (`gauge_live*_<pid>.db`) counts only while its process lives: a
    replaced worker's successor reports the same partitions again. Counters and histograms
    of dead workers keep counting."""
    name = os.path.basename(path)
    if not name.startswith("gauge_live"):
        return True
    try:
        os.kill(int(name.rsplit("_", 1)[1].split(".")[0]), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True
    return True


class MetricsEndpoint:
    def __init__(self, server: Any, thread: Any, directory: str, state: Any) -> None:
        self.server = server
        self.thread = thread
        self.directory = directory
        self.state = state

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.state.restarts.stop()
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.directory, ignore_errors=True)


def start_for_broker(config: Any, workers: int) -> MetricsEndpoint | None:
    """Starts /metrics on `metrics.host`:`metrics.port` (host default 0.0.0.0) and turns
    recording on for this process and the workers it will fork; None when the port is
    not set (or 0/-1: off)."""
    port = config.get("metrics.port")
    if port is None or int(port) <= 0:
        return None
    directory = tempfile.mkdtemp(prefix=f"kafkafast-metrics-{os.getpid()}-")  # the pid: see testing's cleanup
    recorder.enable(directory)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerMetrics(directory))
    state = BrokerState(config, workers=workers)
    registry.register(state)
    host = config.get("metrics.host") or "0.0.0.0"
    server, thread = serve_text_format(host, int(port), registry)
    log.info("metrics on http://%s:%d/metrics", host, server.server_port)
    return MetricsEndpoint(server, thread, directory, state)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def serve_text_format(host: str, port: int, registry: Any) -> tuple[Any, threading.Thread]:
    """/metrics in Prometheus's text format 0.0.4 whatever the scraper accepts, as the JMX
    exporter serves it: a quantiled family holds its quantiles, _count, _sum and _bucket
    series together, which the text format carries and OpenMetrics (one type per family)
    would refuse."""
    app = make_wsgi_app(registry)

    def text_only(environ: dict, start_response: Any) -> Any:
        environ["HTTP_ACCEPT"] = "text/plain; version=0.0.4"
        return app(environ, start_response)

    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    server_class = type("MetricsServer", (ThreadingMixIn, WSGIServer), {"address_family": family, "daemon_threads": True})
    server = make_server(address[0], port, text_only, server_class, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="kafkafast-metrics-http", daemon=True)
    thread.start()
    return server, thread
