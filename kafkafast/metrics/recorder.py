"""Per-request metrics, recorded in each worker (see the package docstring).

`begin()` is called by the connection as a request's handler starts and `observe(frame,
parts, started, arrived, handled, sent)` once it is answered: the request is counted by API
and version (and by worker, `kafkafast_worker_requests_total{worker}`), and its times go into
histograms per API, in ms, Kafka's RequestMetrics split:
* requestqueuetimems: from the frame being wholly read from the socket into the
  connection's queue to its handler starting (waiting behind the same connection's earlier
  requests and out a client quota's throttle delay; a frame still in the kernel while the
  connection does not read, the backpressure of full queues, is not yet counted);
* remotetimems: the handler's waits for something outside it, each wrapped in `remote()`
  (a Fetch long-poll waiting for data, acks=all waiting for the followers, a produce waiting
  for the partition's owner worker);
* localtimems: the rest of the handler's time;
* responsesendtimems: writing the response to the socket;
* totaltimems: all of these, frame read to response written.
Every histogram (these, the log flush time, ZooKeeper request latency) has fine buckets,
FINE_BUCKETS_MS, from which the endpoint computes the quantiles Kafka's JMX exporter serves
and serves the coarse TIME_BUCKETS_MS as the Prometheus histogram (kafkafast/metrics/server.py).

`answered(api_key, request, response)` is called by the broker for each client Produce and
Fetch it answers: per topic, Kafka's TotalProduceRequestsPerSec / FailedProduceRequestsPerSec
(and Fetch likewise) count each partition of the request as Kafka's ReplicaManager does — a
partition refused before it (not authorized, unknown topic) is in neither, and an error
Kafka counts as expected (not leader, unknown topic, too large, corrupt, storage error for
Produce; those and offset out of range, fenced or unknown leader epoch for Fetch) is not a
failure. For Produce (records and batch bytes per topic, from the request's batch headers)
and Fetch (bytes sent per topic, from the sendfile regions of the response) the per-topic
traffic: Produce traffic is counted as received (a partition whose append failed still
counts). Share group record events (acquired, redelivered, acknowledged by type, archived,
lock timeouts) come from the share-partitions (`share_event`). Nothing is recorded (`active` False, nothing imported) until `enable` is called,
before the workers are forked.
"""
from __future__ import annotations

import asyncio
import bisect
import contextvars
import os
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from kafkafast.protocol import _generated as gen
from kafkafast.protocol import api
from kafkafast.protocol.primitives import FileRegion
from kafkafast.records.batch import iter_entries
from kafkafast.storage import cleaner as storage_cleaner, log as storage_log

T = TypeVar("T")

active = False
worker = "0"  # this process's worker index (the label of the per-worker series)
worker_pids: dict[int, int] = {}  # in the supervisor: pid -> worker index of each worker forked
_children: dict[tuple[int, int], tuple[Any, ...]] = {}
_topic_metrics: dict[str, tuple[Any, Any, Any]] = {}
_rate_metrics: dict[tuple[int, str], tuple[Any, Any]] = {}
_REQUESTS: Any = None
_TIMES: dict[str, Any] = {}
_MESSAGES_IN: Any = None
_BYTES_IN: Any = None
_BYTES_OUT: Any = None
_RATES: dict[int, tuple[Any, Any]] = {}  # api key -> (total, failed) counters
_WORKER: dict[str, Any] = {}
_ISR_SHRINKS: Any = None
_UNCLEAN: Any = None
_ISR_EXPANDS: Any = None
_FLUSH_TIME: Any = None
_ZK_LATENCY: Any = None
_LOOP_LAG: Any = None
_GC_PAUSE: Any = None
_GC_FROZEN: Any = None
_AUTH_OK: Any = None
_AUTH_FAILED: Any = None
_UNCLEANABLE: Any = None
_FETCH_SESSIONS: dict[str, Any] = {}
_auth_children: dict[tuple[str, bool], Any] = {}
_NAMES: dict[int, str] = {}
_BATCH_COUNT_AT = 57  # recordsCount in a v2 batch header (see kafkafast/records/batch.py)
_pending: dict[Any, float] = {}  # multiprocess value -> what this event-loop iteration adds (see _add)
_flush_scheduled = False
_remote: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("kafkafast_remote_time", default=None)

# Served as the Prometheus histograms' buckets, in ms: sub-millisecond answers up to long-polling fetches.
TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, float("inf"))
# Recorded: ten bounds a decade (each at most a third above the one before), 0.01 ms to 80 s,
# holding every bound of TIME_BUCKETS_MS, so the served buckets are sums of these.
FINE_BUCKETS_MS = tuple(round(m * 10.0 ** e, 6) for e in range(-2, 5)
                        for m in (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)) + (float("inf"),)
# Kafka's RequestMetrics histograms, in the order `observe` records them.
REQUEST_TIMES = ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems")
REQUEST_TIME_PREFIX = "kafka_network_requestmetrics_"
FLUSH_TIME = "kafka_log_logflushstats_logflushrateandtimems"
ZK_LATENCY = "kafka_server_zookeeperclientmetrics_zookeeperrequestlatencyms"
LOOP_LAG = "kafkafast_eventloop_lag_ms"
GC_PAUSE = "kafkafast_gc_pause_ms"
GC_FROZEN = "kafkafast_gc_frozen_objects"
# Kafka's brokerTopicStats rates whose per-topic counters are also served summed over all topics.
RATES = {0: ("kafka_server_brokertopicmetrics_totalproducerequests", "kafka_server_brokertopicmetrics_failedproducerequests"),
         1: ("kafka_server_brokertopicmetrics_totalfetchrequests", "kafka_server_brokertopicmetrics_failedfetchrequests")}
# Errors of a partition refused before Kafka's ReplicaManager sees it (counted in neither rate):
# TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, INVALID_REQUIRED_ACKS, TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
_NOT_COUNTED = {29, 100, 21, 53}
# Errors Kafka's ReplicaManager answers without marking the failed rate ("expected" failures).
_EXPECTED = {0: {2, 3, 6, 10, 18, 56},  # CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
             #                            MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, KAFKA_STORAGE_ERROR
             1: {1, 3, 6, 9, 56, 74, 75}}  # OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
#                                           REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED/UNKNOWN_LEADER_EPOCH

clock = time.perf_counter


def enable(directory: str) -> None:
    """Turns recording on in this process and every process forked from it; `directory`
    holds the per-process files (prometheus_client's PROMETHEUS_MULTIPROC_DIR)."""
    global active, _REQUESTS, _MESSAGES_IN, _BYTES_IN, _BYTES_OUT, _ISR_SHRINKS, _ISR_EXPANDS, _UNCLEAN
    global _FLUSH_TIME, _ZK_LATENCY, _AUTH_OK, _AUTH_FAILED, _UNCLEANABLE, _LOOP_LAG, _GC_PAUSE, _GC_FROZEN
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import Counter, Gauge, Histogram, values  # deferred: reads the env set above

    values.ValueClass = values.MultiProcessValue()  # in case prometheus_client was imported before
    _NAMES.update(gen.API_NAMES)
    _REQUESTS = Counter("kafka_network_requestmetrics_requests", "Requests answered, by API and version",
                        ["request", "version"], registry=None)
    what = {"totaltimems": "from its frame wholly read to its response written",
            "requestqueuetimems": "from its frame wholly read to its handler starting",
            "localtimems": "in its handler, not waiting for something outside it",
            "remotetimems": "in its handler, waiting for data, followers or another worker",
            "responsesendtimems": "writing its response"}
    for t in REQUEST_TIMES:
        _TIMES[t] = Histogram(REQUEST_TIME_PREFIX + t, f"Time of a request {what[t]}, in ms",
                              ["request"], buckets=FINE_BUCKETS_MS, registry=None)
    _FLUSH_TIME = Histogram(FLUSH_TIME, "Time of each log flush (fdatasync of segments, indexes and the directory), in ms",
                            buckets=FINE_BUCKETS_MS, registry=None)
    _ZK_LATENCY = Histogram(ZK_LATENCY, "Time from a ZooKeeper request's sending to its answer, in ms",
                            buckets=FINE_BUCKETS_MS, registry=None)
    _LOOP_LAG = Histogram(LOOP_LAG, "How late the event loop ran a callback due every 5 ms (its lag), in ms",
                          buckets=FINE_BUCKETS_MS, registry=None)
    _GC_PAUSE = Histogram(GC_PAUSE, "Time of each garbage collection, by generation, in ms", ["generation"],
                          buckets=FINE_BUCKETS_MS, registry=None)
    _GC_FROZEN = Gauge(GC_FROZEN, "Objects in the garbage collector's permanent generation (gc.freeze() after start-up)",
                       multiprocess_mode="livesum", registry=None)
    _AUTH_OK = Counter("kafka_server_socket_server_metrics_successful_authentication",
                       "Connections authenticated (SSL at the end of the TLS handshake, SASL at the exchange's end)",
                       ["listener"], registry=None)
    _AUTH_FAILED = Counter("kafka_server_socket_server_metrics_failed_authentication",
                           "Connections closed because their TLS handshake or SASL authentication failed", ["listener"], registry=None)
    _UNCLEANABLE = Gauge("kafka_log_logcleanermanager_uncleanable_partitions_count",
                         "Partitions the log cleaner skips (a batch it cannot decode), per log dir",
                         ["logDirectory"], multiprocess_mode="livesum", registry=None)
    storage_log.flush_observer = _FLUSH_TIME.observe
    storage_cleaner.uncleanable_observer = _uncleanable
    _MESSAGES_IN = Counter("kafka_server_brokertopicmetrics_messagesin", "Records received in produce requests", ["topic"], registry=None)
    _BYTES_IN = Counter("kafka_server_brokertopicmetrics_bytesin", "Record batch bytes received in produce requests", ["topic"],
                        registry=None)
    _BYTES_OUT = Counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to fetchers", ["topic"],
                         registry=None)
    for key, (total, failed) in RATES.items():
        what = "produce" if key == 0 else "fetch"
        _RATES[key] = (Counter(total, f"Partitions of {what} requests handled", ["topic"], registry=None),
                       Counter(failed, f"Partitions of {what} requests that failed unexpectedly", ["topic"], registry=None))
    for name, doc in (("requests", "Requests answered by each worker"),
                      ("bytesin", "Record batch bytes received in produce requests by each worker"),
                      ("bytesout", "Record bytes sent to fetchers by each worker")):
        _WORKER[name] = Counter(f"kafkafast_worker_{name}", doc, ["worker"], registry=None)
    _ISR_SHRINKS = Counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here",
                           registry=None)
    _ISR_EXPANDS = Counter("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here",
                           registry=None)
    _UNCLEAN = Counter("kafka_controller_controllerstats_uncleanleaderelections",
                       "Leaders elected from outside the ISR by this broker's controller", registry=None)
    _FETCH_SESSIONS.update(
        sessions=Gauge("kafka_server_fetchsessioncache_numincrementalfetchsessions", "Incremental fetch sessions cached",
                       multiprocess_mode="livesum", registry=None),
        partitions=Gauge("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                         "Partitions in the cached incremental fetch sessions", multiprocess_mode="livesum", registry=None),
        evictions=Counter("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                          "Incremental fetch sessions evicted to make room for another", registry=None),
        requests=Counter("kafkafast_fetch_session_incremental_requests", "Incremental fetch requests answered",
                         ["follower"], registry=None),
        named=Counter("kafkafast_fetch_session_incremental_partitions", "Partitions named by incremental fetch requests",
                      ["follower"], registry=None))
    _SHARE.clear()
    for event, (name, doc) in SHARE_EVENTS.items():
        counter = _SHARE.get(name)
        if counter is None:
            counter = _SHARE[name] = Counter(name, doc, ["type"] if event in ACK_TYPES else [], registry=None)
        _SHARE[event] = counter.labels(ACK_TYPES[event]) if event in ACK_TYPES else counter
    _children.clear()
    _topic_metrics.clear()
    _rate_metrics.clear()
    _auth_children.clear()
    worker_pids.clear()
    active = True


def in_worker(index: int) -> None:
    """This process is worker `index` (called in the worker right after the fork)."""
    global worker, _flush_scheduled
    worker = str(index)
    _children.clear()  # children made in the supervisor were labelled for it
    _pending.clear()
    _flush_scheduled = False


def spawned(pid: int, index: int) -> None:
    """The supervisor forked worker `index` as `pid` (for the per-worker process series)."""
    worker_pids[pid] = index


def zookeeper_request(ms: float) -> None:
    """A ZooKeeper request answered after `ms` (Kafka's ZooKeeperRequestLatencyMs)."""
    if active:
        _ZK_LATENCY.observe(ms)


def loop_lag(ms: float) -> None:
    """The loop ran its lag probe `ms` late (see runtime/loop_watch.py)."""
    if active:
        _observe(_LOOP_LAG, ms)


def gc_pause(generation: int, ms: float) -> None:
    """A garbage collection of `generation` took `ms`."""
    if active:
        _observe(_GC_PAUSE.labels(str(generation)), ms)


def gc_frozen(objects: int) -> None:
    """`objects` were frozen out of the collector's reach after start-up."""
    if active:
        _GC_FROZEN.set(objects)


def begin() -> float:
    """A request's handler starts: opens its remote-time account; the `clock()` reading."""
    _remote.set([0.0])
    return clock()


async def remote(awaitable: Awaitable[T]) -> T:
    """Awaits `awaitable`, its time counted as the current request's remote time."""
    if not active:
        return await awaitable
    t = clock()
    try:
        return await awaitable
    finally:
        account = _remote.get()
        if account is not None:
            account[0] += clock() - t


# Share group record events (kafkafast.broker.share.partition.observer) -> counter name and help;
# and the parked ShareFetches woken (kafkafast.broker.share.manager).
SHARE_EVENTS = {
    "acquired": ("kafka_server_share_records_acquired", "Records acquired by share group members"),
    "redelivered": ("kafka_server_share_records_redelivered", "Records acquired again after a release or lock timeout"),
    "accepted": ("kafka_server_share_records_acknowledged", "Records acknowledged by share group members, by type"),
    "released": ("kafka_server_share_records_acknowledged", "Records acknowledged by share group members, by type"),
    "rejected": ("kafka_server_share_records_acknowledged", "Records acknowledged by share group members, by type"),
    "archived": ("kafka_server_share_records_archived", "Records archived at the delivery count limit or as gaps"),
    "lock_timeouts": ("kafka_server_share_lock_timeouts", "Acquired records released because their lock expired"),
    "fetch_wakeups": ("kafka_server_share_fetch_wakeups",
                      "Parked ShareFetches woken by a change in a share-partition that may let them acquire"),
}
ACK_TYPES = {"accepted": "accept", "released": "release", "rejected": "reject"}
_SHARE: dict[str, Any] = {}


def share_event(event: str, n: int) -> None:
    """`n` records of a share-partition event (kafkafast/broker/share/partition.py), or `n`
    parked ShareFetches woken ("fetch_wakeups", kafkafast/broker/share/manager.py)."""
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


def fetch_session_cache(sessions: int, partitions: int, evicted: int) -> None:
    """The fetch session cache changed (FetchSessionCache's metrics in Kafka): its size now,
    and the sessions it just evicted."""
    if active:
        _FETCH_SESSIONS["sessions"].set(sessions)
        _FETCH_SESSIONS["partitions"].set(partitions)
        if evicted:
            _add(_FETCH_SESSIONS["evictions"]._value, evicted)


def incremental_fetch(follower: bool, named: int) -> None:
    """An incremental fetch request that named `named` partitions (a steady one names none)."""
    if active:
        label = "true" if follower else "false"
        _add(_FETCH_SESSIONS["requests"].labels(label)._value, 1)
        if named:
            _add(_FETCH_SESSIONS["named"].labels(label)._value, named)


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


def observe(frame: Any, parts: list | None, started: float, arrived: float | None = None,
            handled: float | None = None, sent: float | None = None, remote_s: float | None = None) -> None:
    """Records one answered request (see the module docstring): `clock()` readings when its
    frame was wholly read (None: a forwarded request), its handler started, its handler
    returned and its response was written; `remote_s`, its remote time when not in the
    current request's account (a parked produce answered from another request's call).
    Never raises."""
    try:
        now = clock()
        handled = now if handled is None else handled
        sent = now if sent is None else sent
        api_key = int.from_bytes(frame[0:2], "big", signed=True)
        version = int.from_bytes(frame[2:4], "big", signed=True)
        children = _children.get((api_key, version))
        if children is None:
            name = _NAMES.get(api_key, str(api_key))
            children = _children[(api_key, version)] = (
                _REQUESTS.labels(name, str(version)), _WORKER["requests"].labels(worker),
                *(_TIMES[t].labels(name) for t in REQUEST_TIMES))
        _add(children[0]._value, 1.0)
        _add(children[1]._value, 1.0)
        if remote_s is None:
            account = _remote.get()
            remote_s = account[0] if account is not None else 0.0
        _observe(children[2], (sent - (started if arrived is None else arrived)) * 1000.0)
        if arrived is not None:
            _observe(children[3], (started - arrived) * 1000.0)
        _observe(children[4], (handled - started - remote_s) * 1000.0)
        _observe(children[5], remote_s * 1000.0)
        _observe(children[6], (sent - handled) * 1000.0)
        if api_key == 0:
            _produce(frame)
        elif api_key == 1 and parts:
            _fetch(parts)
    except Exception:  # noqa: BLE001 - metrics must never break serving
        pass


def _observe(child: Any, ms: float) -> None:
    """`child.observe(ms)` of a FINE_BUCKETS_MS histogram through `_add`, its bucket found by
    bisection rather than by prometheus_client's scan of all 71 bounds."""
    if ms > 0:
        _add(child._sum, ms)
    else:
        ms = 0.0
    _add(child._buckets[bisect.bisect_left(FINE_BUCKETS_MS, ms)], 1.0)


def _add(value: Any, amount: float) -> None:
    """Adds `amount` to a multiprocess value (a counter's, a histogram bucket's or sum) at the
    end of this event-loop iteration: each write to the mmap'd file takes a lock and packs the
    value, so the requests one iteration answers add to each value once (a scrape sees them
    an iteration later; a worker killed mid-iteration loses that iteration's). Called outside
    an event loop, at once."""
    global _flush_scheduled
    _pending[value] = _pending.get(value, 0.0) + amount
    if not _flush_scheduled:
        try:
            asyncio.get_running_loop().call_soon(_flush)
        except RuntimeError:
            _flush()
            return
        _flush_scheduled = True


def _flush() -> None:
    global _flush_scheduled
    _flush_scheduled = False
    pending = _pending.copy()
    _pending.clear()
    for value, amount in pending.items():
        value.inc(amount)


def answered(api_key: int, request: Any, response: Any) -> None:
    """A client's Produce (key 0) or Fetch (key 1) answered with `response` (None: acks=0):
    its partitions into the total and failed request rates (see the module docstring).
    Never raises."""
    try:
        if api_key == 0 and response is None:
            for t in request.topic_data:
                _add(_rates(0, t.name)[0]._value, len(t.partition_data))
            return
        expected = _EXPECTED[api_key]
        for t in response.responses:
            rows = t.partition_responses if api_key == 0 else t.partitions
            name = t.name if api_key == 0 else t.topic
            counted = [p.error_code for p in rows if p.error_code not in _NOT_COUNTED]
            if not counted or not name:
                continue
            if all(code == 3 for code in counted):  # an unknown topic: refused before the ReplicaManager
                continue
            total, failed = _rates(api_key, name)
            _add(total._value, len(counted))
            bad = sum(1 for code in counted if code and code not in expected)
            if bad:
                _add(failed._value, bad)
    except Exception:  # noqa: BLE001 - metrics must never break serving
        pass


def _rates(api_key: int, topic: str) -> tuple[Any, Any]:
    r = _rate_metrics.get((api_key, topic))
    if r is None:  # both are served from the topic's first request, as Kafka registers them together
        total, failed = _RATES[api_key]
        r = _rate_metrics[(api_key, topic)] = (total.labels(topic), failed.labels(topic))
    return r


def _produce(frame: Any) -> None:
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
            _add(m_in._value, count)
            _add(b_in._value, size)
            _add(_WORKER["bytesin"].labels(worker)._value, size)
    del req


def _fetch(parts: list) -> None:
    for part in parts:
        if isinstance(part, FileRegion) and part.length:
            topic = topic_of_fd(part.fd)
            if topic is not None:
                _add(_topic(topic)[2]._value, part.length)
                _add(_WORKER["bytesout"].labels(worker)._value, part.length)


def topic_of_fd(fd: int) -> str | None:
    """The topic of an open segment file: its directory is `<topic>-<partition>`."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    name = os.path.basename(os.path.dirname(path))
    topic, sep, partition = name.rpartition("-")
    return topic if sep and partition.isdigit() else None
