"""Per-request metrics, recorded in each worker (see the package docstring).

`observe(frame, parts, started, arrived)` is called by the connection once a request is
answered: it counts the request by API and version, its total time and its queue time into
histograms per API (queue time: from the frame being wholly read from the socket into the
connection's queue to its handler starting — waiting behind the same connection's earlier
requests and out a client quota's throttle delay; a frame still in the kernel while the
connection does not read, the backpressure of full queues, is not yet counted), and
for Produce (records and batch bytes per topic, from the request's batch headers) and
Fetch (bytes sent per topic, from the sendfile regions of the response) the per-topic
traffic; share group record events (acquired, redelivered, acknowledged by type, archived,
lock timeouts) come from `broker.share.partition.observer`. Produce traffic is counted as received: the response is not decoded (that
would double the cost of the hook), so a partition whose append failed still counts, and
Kafka's FailedProduceRequestsPerSec is not served. It is inert (`active` False, nothing
imported) until `enable` is called, before the workers are forked.
"""
from __future__ import annotations

import os
import time
from typing import Any

active = False
_children: dict[tuple[int, int], tuple[Any, Any]] = {}
_topic_metrics: dict[str, tuple[Any, Any, Any]] = {}
_REQUESTS: Any = None
_TOTAL_TIME: Any = None
_MESSAGES_IN: Any = None
_BYTES_IN: Any = None
_BYTES_OUT: Any = None
_ISR_SHRINKS: Any = None
_UNCLEAN: Any = None
_ISR_EXPANDS: Any = None
_QUEUE_TIME: Any = None
_FLUSH_TIME: Any = None
_AUTH_OK: Any = None
_AUTH_FAILED: Any = None
_UNCLEANABLE: Any = None
_auth_children: dict[tuple[str, bool], Any] = {}
_NAMES: dict[int, str] = {}
_BATCH_COUNT_AT = 57  # recordsCount in a v2 batch header (see kafkafast/records/batch.py)

# Request time buckets in ms: sub-millisecond answers up to long-polling fetches.
TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, float("inf"))

clock = time.perf_counter


def enable(directory: str) -> None:
    """Turns recording on in this process and every process forked from it; `directory`
    holds the per-process files (prometheus_client's PROMETHEUS_MULTIPROC_DIR)."""
    global active, _REQUESTS, _TOTAL_TIME, _MESSAGES_IN, _BYTES_IN, _BYTES_OUT, _ISR_SHRINKS, _ISR_EXPANDS, _UNCLEAN
    global _QUEUE_TIME, _FLUSH_TIME, _AUTH_OK, _AUTH_FAILED, _UNCLEANABLE
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import Counter, Gauge, Histogram, values

    values.ValueClass = values.MultiProcessValue()  # in case prometheus_client was imported before
    from kafkafast.protocol import _generated as gen

    _NAMES.update(gen.API_NAMES)
    _REQUESTS = Counter("kafka_network_requestmetrics_requests", "Requests answered, by API and version",
                        ["request", "version"], registry=None)
    _TOTAL_TIME = Histogram("kafka_network_requestmetrics_totaltimems",
                            "Time from a request's arrival at the handler to its response written, in ms",
                            ["request"], buckets=TIME_BUCKETS_MS, registry=None)
    _QUEUE_TIME = Histogram("kafka_network_requestmetrics_requestqueuetimems",
                            "Time from a request's frame being wholly read to its handler starting, in ms",
                            ["request"], buckets=TIME_BUCKETS_MS, registry=None)
    _FLUSH_TIME = Histogram("kafka_log_logflushstats_logflushrateandtimems",
                            "Time of each log flush (fdatasync of segments, indexes and the directory), in ms",
                            buckets=TIME_BUCKETS_MS, registry=None)
    _AUTH_OK = Counter("kafka_server_socket_server_metrics_successful_authentication",
                       "Connections authenticated (SSL at the end of the TLS handshake, SASL at the exchange's end)",
                       ["listener"], registry=None)
    _AUTH_FAILED = Counter("kafka_server_socket_server_metrics_failed_authentication",
                           "Connections closed because their TLS handshake or SASL authentication failed", ["listener"], registry=None)
    _UNCLEANABLE = Gauge("kafka_log_logcleanermanager_uncleanable_partitions_count",
                         "Partitions the log cleaner skips (a batch it cannot decode), per log dir",
                         ["logDirectory"], multiprocess_mode="livesum", registry=None)
    from kafkafast.storage import cleaner as storage_cleaner, log as storage_log

    storage_log.flush_observer = _FLUSH_TIME.observe
    storage_cleaner.uncleanable_observer = _uncleanable
    _MESSAGES_IN = Counter("kafka_server_brokertopicmetrics_messagesin", "Records received in produce requests", ["topic"], registry=None)
    _BYTES_IN = Counter("kafka_server_brokertopicmetrics_bytesin", "Record batch bytes received in produce requests", ["topic"],
                        registry=None)
    _BYTES_OUT = Counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to fetchers", ["topic"],
                         registry=None)
    _ISR_SHRINKS = Counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here",
                           registry=None)
    _ISR_EXPANDS = Counter("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here",
                           registry=None)
    _UNCLEAN = Counter("kafka_controller_controllerstats_uncleanleaderelections",
                       "Leaders elected from outside the ISR by this broker's controller", registry=None)
    from kafkafast.broker.share import partition as share_partition

    share_partition.observer = _share_event
    _SHARE.clear()
    for event, (name, doc) in SHARE_EVENTS.items():
        counter = _SHARE.get(name)
        if counter is None:
            counter = _SHARE[name] = Counter(name, doc, ["type"] if event in ACK_TYPES else [], registry=None)
        _SHARE[event] = counter.labels(ACK_TYPES[event]) if event in ACK_TYPES else counter
    _children.clear()
    _topic_metrics.clear()
    _auth_children.clear()
    active = True


# Share group record events (kafkafast.broker.share.partition.observer) -> counter name and help.
SHARE_EVENTS = {
    "acquired": ("kafka_server_share_records_acquired", "Records acquired by share group members"),
    "redelivered": ("kafka_server_share_records_redelivered", "Records acquired again after a release or lock timeout"),
    "accepted": ("kafka_server_share_records_acknowledged", "Records acknowledged by share group members, by type"),
    "released": ("kafka_server_share_records_acknowledged", "Records acknowledged by share group members, by type"),
    "rejected": ("kafka_server_share_records_acknowledged", "Records acknowledged by share group members, by type"),
    "archived": ("kafka_server_share_records_archived", "Records archived at the delivery count limit or as gaps"),
    "lock_timeouts": ("kafka_server_share_lock_timeouts", "Acquired records released because their lock expired"),
}
ACK_TYPES = {"accepted": "accept", "released": "release", "rejected": "reject"}
_SHARE: dict[str, Any] = {}


def _share_event(event: str, n: int) -> None:
    _SHARE[event].inc(n)


def _uncleanable(counts: dict[str, int]) -> None:
    for directory, n in counts.items():
        _UNCLEANABLE.labels(directory).set(n)


def authentication(listener: str, ok: bool) -> None:
    """A connection authenticated (ok) or closed for a failed authentication, on `listener`
    (Kafka's socket-server-metrics successful-/failed-authentication-total)."""
    if active:
        _auth_child(listener, ok).inc()


def listener_served(listener: str) -> None:
    """Both authentication counters of `listener` are served from its start, at 0 until
    something is counted (Kafka registers them with the listener)."""
    if active:
        _auth_child(listener, True)
        _auth_child(listener, False)


def _auth_child(listener: str, ok: bool) -> Any:
    child = _auth_children.get((listener, ok))
    if child is None:
        child = _auth_children[(listener, ok)] = (_AUTH_OK if ok else _AUTH_FAILED).labels(listener)
    return child


def unclean_election() -> None:
    """The controller elected a leader from outside the ISR (Kafka's
    ControllerStats UncleanLeaderElectionsPerSec)."""
    if active:
        _UNCLEAN.inc()


def isr_changed(old: list[int], new: list[int]) -> None:
    """A leader's ISR change accepted by the controller (Kafka's IsrShrinksPerSec /
    IsrExpandsPerSec count on the leader): one shrink and/or one expansion."""
    if not active:
        return
    if set(old) - set(new):
        _ISR_SHRINKS.inc()
    if set(new) - set(old):
        _ISR_EXPANDS.inc()


def _topic(topic: str) -> tuple[Any, Any, Any]:
    t = _topic_metrics.get(topic)
    if t is None:
        t = _topic_metrics[topic] = (_MESSAGES_IN.labels(topic), _BYTES_IN.labels(topic), _BYTES_OUT.labels(topic))
    return t


def observe(frame: Any, parts: list | None, started: float, arrived: float | None = None) -> None:
    """Records one answered request (see the module docstring): `started` and `arrived`
    are `clock()` readings when its handler started and when its frame was wholly read.
    Never raises."""
    try:
        elapsed_ms = (clock() - started) * 1000.0
        api_key = int.from_bytes(frame[0:2], "big", signed=True)
        version = int.from_bytes(frame[2:4], "big", signed=True)
        children = _children.get((api_key, version))
        if children is None:
            name = _NAMES.get(api_key, str(api_key))
            children = _children[(api_key, version)] = (
                _REQUESTS.labels(name, str(version)), _TOTAL_TIME.labels(name), _QUEUE_TIME.labels(name))
        children[0].inc()
        children[1].observe(elapsed_ms)
        if arrived is not None:
            children[2].observe(max(0.0, (started - arrived) * 1000.0))
        if api_key == 0:
            _produce(frame)
        elif api_key == 1 and parts:
            _fetch(parts)
    except Exception:  # noqa: BLE001 - metrics must never break serving
        pass


def _produce(frame: Any) -> None:
    from kafkafast.protocol import api
    from kafkafast.records.batch import iter_entries

    _, req = api.decode_request(frame)
    for t in req.topic_data:
        count = size = 0
        for p in t.partition_data:
            records = p.records
            if records is None:
                continue
            for pos, _size, magic in iter_entries(records):
                if magic == 2:
                    count += int.from_bytes(records[pos + _BATCH_COUNT_AT:pos + _BATCH_COUNT_AT + 4], "big")
            size += len(records)
            del records
        if size:
            m_in, b_in, _ = _topic(t.name)
            m_in.inc(count)
            b_in.inc(size)
    del req


def _fetch(parts: list) -> None:
    from kafkafast.protocol.primitives import FileRegion

    for part in parts:
        if isinstance(part, FileRegion) and part.length:
            topic = topic_of_fd(part.fd)
            if topic is not None:
                _topic(topic)[2].inc(part.length)


def topic_of_fd(fd: int) -> str | None:
    """The topic of an open segment file: its directory is `<topic>-<partition>`."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    name = os.path.basename(os.path.dirname(path))
    topic, sep, partition = name.rpartition("-")
    return topic if sep and partition.isdigit() else None
