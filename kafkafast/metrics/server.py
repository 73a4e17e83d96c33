"""The /metrics endpoint of a broker (see the package docstring): started by
`kafkafast broker` before it forks its workers when `metrics.port` is set."""
from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("kafkafast.metrics")

# Per-topic counters that Kafka also reports summed over all topics (the MBean without a
# topic), which the JMX exporter turns into the same name without the label.
ALL_TOPICS = {"kafka_server_brokertopicmetrics_messagesin", "kafka_server_brokertopicmetrics_bytesin",
              "kafka_server_brokertopicmetrics_bytesout"}


class WorkerMetrics:
    """The workers' counters and histograms (summed over their files) plus, for the
    per-topic counters, the all-topics sum."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Any]:
        from prometheus_client.multiprocess import MultiProcessCollector

        # A process creating its file (at its first request) leaves it empty for an
        # instant; such a file holds nothing yet and cannot be parsed, so it is skipped.
        files = []
        for path in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                if os.path.getsize(path) > 0 and _live_or_cumulative(path):
                    files.append(path)
            except OSError:
                continue
        for metric in MultiProcessCollector.merge(files, accumulate=True):
            if metric.name in ALL_TOPICS:
                totals = [s for s in metric.samples if s.name.endswith("_total")]
                if totals:
                    metric.add_sample(metric.name + "_total", {}, sum(s.value for s in totals))
            yield metric


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
    from kafkafast.metrics import recorder

    recorder.enable(directory)
    from prometheus_client import CollectorRegistry, start_http_server

    from kafkafast.metrics.state import BrokerState

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerMetrics(directory))
    state = BrokerState(config, workers=workers)
    registry.register(state)
    host = config.get("metrics.host") or "0.0.0.0"
    server, thread = start_http_server(int(port), addr=host, registry=registry)
    log.info("metrics on http://%s:%d/metrics", host, server.server_port)
    return MetricsEndpoint(server, thread, directory, state)
