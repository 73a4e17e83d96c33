"""Gauges computed at scrape time, in the process that serves /metrics (see the package
docstring). The broker is asked over its own listener with kafkafast's admin client, so
the numbers are what clients see, however many workers serve them."""
from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

TCP_ESTABLISHED = "01"


class BrokerState:
    """A prometheus_client collector for one broker."""

    def __init__(self, config: Any, *, workers: int, timeout: float = 5.0) -> None:
        self.config = config
        self.node_id = config.node_id
        self.log_dirs = list(config.log_dirs)
        self.listeners = config.listeners()
        self.timeout = timeout
        self.restarts = WorkerWatch(workers)

    def collect(self) -> Iterator[Metric]:
        conns = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                  "Open client connections per listener", labels=["listener"])
        for lst in self.listeners:  # before our own connection below, which is not a client's
            conns.add_metric([lst.name], float(established_connections(lst.port)))
        yield conns
        restarts = CounterMetricFamily("kafkafast_worker_restarts", "Worker processes replaced after they died")
        restarts.add_metric([], float(self.restarts.restarts()))
        yield restarts
        yield from self._log_sizes()
        try:
            yield from asyncio.run(asyncio.wait_for(self._ask_broker(), self.timeout))
            up = 1.0
        except Exception:  # noqa: BLE001 - a broker that does not answer shows as down, not as a 500
            up = 0.0
        g = GaugeMetricFamily("kafkafast_broker_up", "1 when the broker answered the scrape's requests")
        g.add_metric([], up)
        yield g

    def _log_sizes(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's segment files",
                                 labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of a partition",
                                     labels=["topic", "partition"])
        for d in self.log_dirs:
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                topic, sep, part = e.name.rpartition("-")
                if not sep or not part.isdigit() or not e.is_dir():
                    continue
                total = n = 0
                try:
                    for f in os.scandir(e.path):
                        if f.name.endswith(".log"):
                            total += f.stat().st_size
                            n += 1
                except OSError:
                    continue
                size.add_metric([topic, part], float(total))
                segments.add_metric([topic, part], float(n))
        yield size
        yield segments

    async def _ask_broker(self) -> list[Metric]:
        from kafkafast.client.admin import AdminClient

        lst = self.listeners[0]
        host = "127.0.0.1" if lst.host in ("", "0.0.0.0", "::") else lst.host
        out: list[Metric] = []
        async with AdminClient(f"{host}:{lst.port}", client_id="kafkafast-metrics",
                               request_timeout_ms=int(self.timeout * 1000)) as admin:
            cluster = await admin.describe_cluster()
            topics = await admin.describe_topics(include_internal=True)
            parts = [(t.name, p) for t in topics for p in t.partitions]
            mine = [(t, p) for t, p in parts if self.node_id in p.replicas or p.leader == self.node_id]
            g = GaugeMetricFamily
            out.append(_one(g("kafka_server_replicamanager_partitioncount", "Partitions with a replica here"),
                            len(mine)))
            out.append(_one(g("kafka_server_replicamanager_leadercount", "Partitions led here"),
                            sum(1 for _, p in mine if p.leader == self.node_id)))
            out.append(_one(g("kafka_server_replicamanager_underreplicatedpartitions",
                              "Partitions led here whose ISR is smaller than their replica set"),
                            sum(1 for _, p in mine if p.leader == self.node_id and len(p.isr) < len(p.replicas))))
            out.append(_one(g("kafka_controller_kafkacontroller_activecontrollercount",
                              "1 on the broker that is the active controller"),
                            1 if cluster.controller_id == self.node_id else 0))
            out.append(_one(g("kafka_controller_kafkacontroller_offlinepartitionscount",
                              "Partitions without a live leader (reported by the controller)"),
                            sum(1 for _, p in parts if p.leader < 0) if cluster.controller_id == self.node_id else 0))
            out.append(_one(g("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                              "Partitions not led by their first replica (reported by the controller)"),
                            sum(1 for _, p in parts if p.replicas and p.leader >= 0 and p.leader != p.replicas[0])
                            if cluster.controller_id == self.node_id else 0))
            ends = await admin.list_offsets([(t, p.partition) for t, p in mine if p.leader == self.node_id], -1)
            leo = g("kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"])
            for tp, off in sorted(ends.items()):
                leo.add_metric([tp.topic, str(tp.partition)], float(off))
            out.append(leo)
            out.extend(await self._groups(admin, ends))
        return out

    async def _groups(self, admin: Any, ends: dict) -> list[Metric]:
        groups = await admin.list_groups()
        n = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups", "Consumer groups")
        n.add_metric([], float(len(groups)))
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus the group's committed offset",
                                labels=["consumergroup", "topic", "partition"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag of a group over its partitions",
                                    labels=["consumergroup"])
        for g in groups:
            offsets = await admin.group_offsets(g.group_id)
            total = 0
            for tp, (committed, end) in sorted(offsets.rows.items()):
                if committed is None:
                    continue
                value = max(0, ends.get(tp, end) - committed)
                total += value
                lag.add_metric([g.group_id, tp.topic, str(tp.partition)], float(value))
            lag_sum.add_metric([g.group_id], float(total))
        return [n, lag, lag_sum]


def _one(metric: GaugeMetricFamily, value: float) -> GaugeMetricFamily:
    metric.add_metric([], float(value))
    return metric


def established_connections(port: int) -> int:
    """ESTABLISHED TCP sockets whose local port is `port` (the kernel's tables)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == TCP_ESTABLISHED and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except OSError:
            continue
    return n


class WorkerWatch:
    """Counts worker replacements: the supervisor's children are listed every 0.5 s and
    each pid beyond the first `workers` is a restart (a worker that lives less than the
    interval between two looks can be missed; the supervisor also logs every replacement)."""

    INTERVAL = 0.5

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pid = os.getpid()
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if workers > 0:
            self._thread = threading.Thread(target=self._run, name="kafkafast-worker-watch", daemon=True)
            self._thread.start()

    def _children(self) -> set[int]:
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children", encoding="ascii") as fh:
                return {int(x) for x in fh.read().split()}
        except OSError:
            return set()

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            self.seen |= self._children()

    def restarts(self) -> int:
        if self.workers <= 0:
            return 0
        self.seen |= self._children()
        return max(0, len(self.seen) - self.workers)

    def stop(self) -> None:
        self._stop.set()
