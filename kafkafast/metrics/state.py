"""Gauges computed at scrape time, in the process that serves /metrics (see the package
docstring). The broker is asked over its own listener with kafkafast's admin client, so
the numbers are what clients see, however many workers serve them."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kafkafast.client.admin import AdminClient, admin_version
from kafkafast.client.cluster import TopicPartition
from kafkafast.metrics import recorder
from kafkafast.protocol import _generated as gen

ListOffsetsTopic = gen.ListOffsetsRequest.ListOffsetsTopic

TCP_ESTABLISHED = "01"
TICKS = os.sysconf("SC_CLK_TCK")
MIN_ISR = "min.insync.replicas"
LEADER_TIMEOUT_S = 2.0


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
        yield from self._loops()
        yield from process_families(self.restarts.serving() if self.restarts.workers > 0 else {})
        yield from self._log_sizes()
        try:
            yield from asyncio.run(asyncio.wait_for(self._ask_broker(), self.timeout))
            up = 1.0
        except Exception:  # noqa: BLE001 - a broker that does not answer shows as down, not as a 500
            up = 0.0
        g = GaugeMetricFamily("kafkafast_broker_up", "1 when the broker answered the scrape's requests")
        g.add_metric([], up)
        yield g

    def _loops(self) -> Iterator[Metric]:
        """Each worker's event-loop busy fraction and the idle ratios Kafka reports for its
        network and request-handler threads (in kafkafast one event loop per worker is both)."""
        busy = GaugeMetricFamily("kafkafast_worker_busy_ratio",
                                 f"Fraction of the last {WorkerWatch.BUSY_WINDOW_S:g} s the worker's event loop ran",
                                 labels=["worker"])
        cpu = CounterMetricFamily("kafkafast_worker_busy_seconds",
                                  "CPU seconds of the worker's event-loop thread (this incarnation)", labels=["worker"])
        ratios = []
        for label, ratio, seconds in self.restarts.loops():
            cpu.add_metric([label], seconds)
            if ratio is not None:
                busy.add_metric([label], ratio)
                ratios.append(ratio)
        yield busy
        yield cpu
        idle = 1.0 - sum(ratios) / len(ratios) if ratios else 1.0
        for name, doc in (("kafka_network_socketserver_networkprocessoravgidlepercent",
                           "Idle fraction of the network threads (the workers' event loops), 0 to 1"),
                          ("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
                           "Idle fraction of the request handlers (the workers' event loops), 0 to 1")):
            yield _one(GaugeMetricFamily(name, doc), idle)

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
        """The gauges asked of this broker alone (Metadata, DescribeConfigs, ListOffsets,
        ListGroups, OffsetFetch, DescribeGroups on one connection): a stopped or unreachable
        other broker does not blank them; only the log ends of partitions a group committed
        and another broker leads are asked of their leaders, within LEADER_TIMEOUT_S."""
        lst = self.listeners[0]
        host = "127.0.0.1" if lst.host in ("", "0.0.0.0", "::") else lst.host
        out: list[Metric] = []
        async with AdminClient(f"{host}:{lst.port}", client_id="kafkafast-metrics",
                               request_timeout_ms=int(self.timeout * 1000)) as admin:
            conn = await admin.cluster.connection(self.node_id)
            meta = await conn.send(gen.MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                   version=conn.version(3))
            parts = [(t.name, p) for t in meta.topics for p in t.partitions]
            mine = [(t, p) for t, p in parts if self.node_id in p.replica_nodes or p.leader_id == self.node_id]
            led = [(t, p) for t, p in mine if p.leader_id == self.node_id]
            controller = meta.controller_id == self.node_id
            g = GaugeMetricFamily
            out.append(_one(g("kafka_server_replicamanager_partitioncount", "Partitions with a replica here"),
                            len(mine)))
            out.append(_one(g("kafka_server_replicamanager_leadercount", "Partitions led here"), len(led)))
            out.append(_one(g("kafka_server_replicamanager_underreplicatedpartitions",
                              "Partitions led here whose ISR is smaller than their replica set"),
                            sum(1 for _, p in led if len(p.isr_nodes) < len(p.replica_nodes))))
            out.append(_one(g("kafka_controller_kafkacontroller_activecontrollercount",
                              "1 on the broker that is the active controller"), 1 if controller else 0))
            out.append(_one(g("kafka_controller_kafkacontroller_offlinepartitionscount",
                              "Partitions without a live leader (reported by the controller)"),
                            sum(1 for _, p in parts if p.leader_id < 0) if controller else 0))
            out.append(_one(g("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                              "Partitions not led by their first replica (reported by the controller)"),
                            sum(1 for _, p in parts if p.replica_nodes and p.leader_id >= 0
                                and p.leader_id != p.replica_nodes[0]) if controller else 0))
            out.extend(await self._min_isr(conn, led))
            out.append(_one(g("kafka_server_replicamanager_offlinereplicacount",
                              "Partitions whose replica here is offline (its log dir failed)"),
                            sum(1 for _, p in mine if self.node_id in (p.offline_replicas or ()))))
            ends = await self._offsets(conn, led, -1)
            starts = await self._offsets(conn, led, -2)
            leo = g("kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"])
            current = g("kafka_topic_partition_current_offset", "Log end offset of a partition led here",
                        labels=["topic", "partition"])
            oldest = g("kafka_topic_partition_oldest_offset", "Log start offset of a partition led here",
                       labels=["topic", "partition"])
            for tp, off in sorted(ends.items()):
                leo.add_metric([tp.topic, str(tp.partition)], float(off))
                current.add_metric([tp.topic, str(tp.partition)], float(off))
            for tp, off in sorted(starts.items()):
                oldest.add_metric([tp.topic, str(tp.partition)], float(off))
            out.extend((leo, current, oldest))
            out.extend(await self._groups(admin, conn, ends))
        return out

    async def _offsets(self, conn: Any, led: list, timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets (-1: log end, -2: log start) of the partitions led here."""
        if not led:
            return {}
        topics: dict[str, Any] = {}
        for t, p in led:
            topics.setdefault(t, ListOffsetsTopic(name=t, partitions=[])).partitions.append(
                ListOffsetsTopic.ListOffsetsPartition(partition_index=p.partition_index, timestamp=timestamp))
        resp = await conn.send(gen.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=list(topics.values())))
        return {TopicPartition(t.name, p.partition_index): p.offset
                for t in resp.topics for p in t.partitions if p.error_code == 0}

    async def _min_isr(self, conn: Any, led: list) -> list[Metric]:
        """Kafka's ReplicaManager UnderMinIsrPartitionCount and AtMinIsrPartitionCount: partitions
        led here whose ISR is smaller than, or exactly, their topic's min.insync.replicas."""
        minimum: dict[str, int] = {}
        if led:
            R = gen.DescribeConfigsRequest.DescribeConfigsResource
            resp = await conn.send(gen.DescribeConfigsRequest(
                resources=[R(resource_type=2, resource_name=t, configuration_keys=[MIN_ISR]) for t in sorted({t for t, _ in led})],
                include_synonyms=False, include_documentation=False))
            minimum = {r.resource_name: int(c.value) for r in resp.results if not r.error_code
                       for c in r.configs if c.name == MIN_ISR and c.value}
        under = sum(1 for t, p in led if len(p.isr_nodes) < minimum.get(t, 1))
        at = sum(1 for t, p in led if len(p.isr_nodes) == minimum.get(t, 1))
        return [_one(GaugeMetricFamily("kafka_server_replicamanager_underminisrpartitioncount",
                                       "Partitions led here with fewer in-sync replicas than min.insync.replicas"), under),
                _one(GaugeMetricFamily("kafka_server_replicamanager_atminisrpartitioncount",
                                       "Partitions led here with exactly min.insync.replicas in-sync replicas"), at)]

    async def _groups(self, admin: Any, conn: Any, ends: dict) -> list[Metric]:
        """The groups this broker coordinates (as Kafka's GroupMetadataManager reports them):
        their committed offsets, lag and members, with kafka_exporter's names."""
        listed = await conn.send(gen.ListGroupsRequest(states_filter=[], types_filter=[]),
                                 version=admin_version(conn, 16))
        groups = sorted(g.group_id for g in listed.groups)
        n = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups", "Consumer groups coordinated here")
        n.add_metric([], float(len(groups)))
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus the group's committed offset",
                                labels=["consumergroup", "topic", "partition"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag of a group over a topic's partitions",
                                    labels=["consumergroup", "topic"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset",
                                    labels=["consumergroup", "topic", "partition"])
        current_sum = GaugeMetricFamily("kafka_consumergroup_current_offset_sum",
                                        "The group's committed offsets summed over a topic's partitions",
                                        labels=["consumergroup", "topic"])
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group",
                                    labels=["consumergroup"])
        committed: dict[str, dict[TopicPartition, int]] = {}
        for group in groups:
            resp = await conn.send(gen.OffsetFetchRequest(group_id=group, topics=None, require_stable=False),
                                   version=min(conn.version(9), 7))
            committed[group] = {TopicPartition(t.name, p.partition_index): p.committed_offset for t in resp.topics
                                for p in t.partitions if not p.error_code and p.committed_offset >= 0}
        elsewhere = sorted({tp for offsets in committed.values() for tp in offsets} - set(ends))
        if elsewhere:
            try:
                ends = {**ends, **await asyncio.wait_for(admin.list_offsets(elsewhere, -1), LEADER_TIMEOUT_S)}
            except Exception:  # noqa: BLE001 - a leader that does not answer: no lag for its partitions
                pass
        for group in groups:
            totals: dict[str, list[int]] = {}  # topic -> [lag, committed]
            for tp, offset in sorted(committed[group].items()):
                current.add_metric([group, tp.topic, str(tp.partition)], float(offset))
                sums = totals.setdefault(tp.topic, [0, 0])
                sums[1] += offset
                if tp in ends:
                    value = max(0, ends[tp] - offset)
                    sums[0] += value
                    lag.add_metric([group, tp.topic, str(tp.partition)], float(value))
            for topic, (lags, offsets) in sorted(totals.items()):
                lag_sum.add_metric([group, topic], float(lags))
                current_sum.add_metric([group, topic], float(offsets))
        if groups:
            described = await conn.send(gen.DescribeGroupsRequest(groups=groups, include_authorized_operations=False),
                                        version=admin_version(conn, 15))
            for d in described.groups:
                if not d.error_code:
                    members.add_metric([d.group_id], float(len(d.members)))
        return [n, lag, lag_sum, current, current_sum, members]


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


def process_families(workers: dict[int, str]) -> Iterator[Metric]:
    """The standard process_* series (prometheus_client's ProcessCollector: CPU seconds,
    resident and virtual memory, open and maximum fds, start time) of this process, without
    labels, and of each worker in `workers` (pid -> index), with its `worker` label."""
    families: dict[str, Metric] = {}
    for pid, label in [(None, ""), *workers.items()]:
        collector = ProcessCollector(registry=None) if pid is None else ProcessCollector(pid=lambda p=pid: p, registry=None)
        for m in collector.collect():
            family = families.setdefault(m.name, Metric(m.name, m.documentation, m.type))
            family.samples.extend(s._replace(labels={**s.labels, "worker": label}) if label else s for s in m.samples)
    yield from families.values()


def loop_thread_seconds(pid: int) -> float | None:
    """CPU seconds (user and system) of the main thread of `pid`, a worker's event loop."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", encoding="ascii") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()  # fields from the third (state) on
    return (int(fields[11]) + int(fields[12])) / TICKS


class WorkerWatch:
    """Counts worker replacements and samples each worker's event loop: the supervisor's
    children are listed every 0.5 s and each pid beyond the first `workers` is a restart (a
    worker that lives less than the interval between two looks can be missed; the supervisor
    also logs every replacement). At each look the CPU time of each worker's main thread (its
    event loop; the process itself with --workers 0) is read: the loop's busy fraction is its
    growth over the last BUSY_WINDOW_S (time the loop waited in epoll is not CPU time; a
    blocking disk wait inside the loop, not CPU either, shows as idle)."""

    INTERVAL = 0.5
    BUSY_WINDOW_S = 10.0

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pid = os.getpid()
        self.seen: set[int] = set()
        self.samples: dict[int, deque[tuple[float, float]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkafast-worker-watch", daemon=True)
        self._thread.start()

    def _children(self) -> set[int]:
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children", encoding="ascii") as fh:
                return {int(x) for x in fh.read().split()}
        except OSError:
            return set()

    def serving(self) -> dict[int, str]:
        """pid -> worker index (as a label) of each live worker."""
        if self.workers <= 0:
            return {self.pid: "0"}
        pids = recorder.worker_pids
        return {pid: str(pids[pid]) for pid in sorted(self._children()) if pid in pids}

    def _run(self) -> None:
        while True:
            if self.workers > 0:
                self.seen |= self._children()
            self._sample()
            if self._stop.wait(self.INTERVAL):
                return

    def _sample(self) -> None:
        now = time.monotonic()
        serving = self.serving()
        with self._lock:
            for pid in list(self.samples):
                if pid not in serving:
                    del self.samples[pid]
            for pid in serving:
                seconds = loop_thread_seconds(pid)
                if seconds is None:
                    continue
                window = self.samples.setdefault(pid, deque())
                window.append((now, seconds))
                while len(window) > 2 and now - window[1][0] >= self.BUSY_WINDOW_S:
                    window.popleft()

    def loops(self) -> list[tuple[str, float | None, float]]:
        """(worker label, busy fraction over the window or None before two looks, CPU seconds)
        of each worker's event loop."""
        self._sample()
        out = []
        with self._lock:
            for pid, label in self.serving().items():
                window = self.samples.get(pid)
                if not window:
                    continue
                (t0, c0), (t1, c1) = window[0], window[-1]
                ratio = min(1.0, max(0.0, (c1 - c0) / (t1 - t0))) if t1 - t0 >= self.INTERVAL else None
                out.append((label, ratio, c1))
        return out

    def restarts(self) -> int:
        if self.workers <= 0:
            return 0
        self.seen |= self._children()
        return max(0, len(self.seen) - self.workers)

    def stop(self) -> None:
        self._stop.set()
