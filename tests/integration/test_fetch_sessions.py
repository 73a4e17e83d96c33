"""Incremental fetch sessions (KIP-227) over the wire: full and incremental requests, the
epoch rules, forgotten partitions, eviction by `max.incremental.fetch.session.cache.slots`,
sessions per worker; and real consumers (librdkafka, kafka-python) reading with them."""
from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkafast.broker.fetch_sessions import SessionRequests
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol.errors import ErrorCode
from tests.support.kafka_python import group_consumer
from tests.support.raw_client import RawClient

F = FetchRequest
SPAN = 0x7FFFFFFF // 2  # the session ids of worker i of 2: i * SPAN + 1 .. (i + 1) * SPAN


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=partition)
    assert p.flush(10) == 0


def fetch(c: RawClient, session_id: int, epoch: int, parts: dict[int, int] | None = None, topic: str = "s",
          forget: list[int] | None = None, replica_id: int = -1, version: int = 12):
    """A Fetch of `topic`'s partitions {partition: fetch offset} that never waits."""
    ps = [F.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in (parts or {}).items()]
    return c.request(F(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id,
                       session_epoch=epoch, topics=[F.FetchTopic(topic=topic, partitions=ps)] if ps else [],
                       forgotten_topics_data=[F.ForgottenTopic(topic=topic, partitions=forget)] if forget else []),
                     version)


def answered(resp) -> dict[int, tuple[int, int]]:
    """{partition: (high watermark, bytes of records)} of a response."""
    return {p.partition_index: (p.high_watermark, len(p.records or b"")) for t in resp.responses for p in t.partitions}


def test_full_fetch_makes_a_session_and_incremental_fetches_list_only_what_changed(broker):
    make_topic(broker.bootstrap, "s", 3)
    produce(broker.bootstrap, "s", 0, 2)
    with RawClient(broker.port) as c:
        full = fetch(c, 0, 0, {0: 0, 1: 0, 2: 0})
        sid = full.session_id
        assert full.error_code == 0 and sid > 0
        got = answered(full)
        assert got[0][0] == 2 and got[0][1] > 0 and got[1] == (0, 0) and got[2] == (0, 0)
        # Partition 0 read up to its end: nothing new anywhere, nothing listed.
        inc = fetch(c, sid, 1, {0: 2})
        assert (inc.error_code, inc.session_id, answered(inc)) == (0, sid, {})
        produce(broker.bootstrap, "s", 1, 1)
        inc = fetch(c, sid, 2)  # names no partition: the session's offsets are read
        got = answered(inc)
        assert list(got) == [1] and got[1][0] == 1 and got[1][1] > 0
        # Partition 1's offset is still 0 in the session: its record again, its watermark unchanged.
        got = answered(fetch(c, sid, 3))
        assert list(got) == [1] and got[1][1] > 0
        assert answered(fetch(c, sid, 4, {1: 1})) == {}


def test_incremental_fetches_add_and_forget_partitions(broker):
    make_topic(broker.bootstrap, "s", 3)
    with RawClient(broker.port) as c:
        sid = fetch(c, 0, 0, {0: 0}).session_id
        assert sid > 0
        assert answered(fetch(c, sid, 1, {2: 0})) == {2: (0, 0)}  # added: listed once
        assert answered(fetch(c, sid, 2)) == {}
        produce(broker.bootstrap, "s", 0, 1)
        produce(broker.bootstrap, "s", 2, 1)
        got = answered(fetch(c, sid, 3, forget=[0]))
        assert list(got) == [2]  # partition 0 left the session: its new record is not read
        # Forgetting the last partition closes the session (answered sessionless).
        last = fetch(c, sid, 4, forget=[2])
        assert (last.error_code, last.session_id, answered(last)) == (0, 0, {})
        gone = fetch(c, sid, 5, {0: 0})
        assert (gone.error_code, gone.session_id, gone.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])


def test_wrong_epoch_answers_invalid_fetch_session_epoch_and_keeps_the_session(broker):
    make_topic(broker.bootstrap, "s", 1)
    with RawClient(broker.port) as c:
        sid = fetch(c, 0, 0, {0: 0}).session_id
        for epoch in (2, 7, 1 << 30):
            bad = fetch(c, sid, epoch)
            assert (bad.error_code, bad.session_id, bad.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        assert fetch(c, sid, 1).error_code == 0
        assert fetch(c, sid, 1).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # epoch 1 is used up
        assert fetch(c, sid, 2).error_code == 0


def test_unknown_session_id_answers_fetch_session_id_not_found(broker):
    make_topic(broker.bootstrap, "s", 1)
    with RawClient(broker.port) as c:
        sid = fetch(c, 0, 0, {0: 0}).session_id
        assert sid > 0
        for other in (sid + 1, sid - 1, 12345):
            resp = fetch(c, other, 1, {0: 0})
            assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        assert (fetch(c, sid, 1).error_code, fetch(c, sid, 2).session_id) == (0, sid)


def test_final_epoch_closes_the_session_and_full_epoch_replaces_it(broker):
    make_topic(broker.bootstrap, "s", 2)
    produce(broker.bootstrap, "s", 0, 1)
    with RawClient(broker.port) as c:
        sid = fetch(c, 0, 0, {0: 0}).session_id
        closing = fetch(c, sid, -1, {0: 0, 1: 0})  # sessionless: every partition listed, no new session
        assert (closing.error_code, closing.session_id) == (0, 0) and set(answered(closing)) == {0, 1}
        assert fetch(c, sid, 1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        sid = fetch(c, 0, 0, {0: 0}).session_id
        renewed = fetch(c, sid, 0, {1: 0})  # epoch 0 naming a session: closed, a new one made
        assert renewed.session_id not in (0, sid) and set(answered(renewed)) == {1}
        assert fetch(c, sid, 1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert answered(fetch(c, renewed.session_id, 1)) == {}


def test_session_of_topic_names_refuses_topic_ids(broker):
    make_topic(broker.bootstrap, "s", 1)
    with RawClient(broker.port) as c:
        sid = fetch(c, 0, 0, {0: 0}).session_id
        resp = c.request(F(replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=sid, session_epoch=1, topics=[],
                           forgotten_topics_data=[]), 13)
        assert (resp.error_code, resp.session_id) == (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, 0)


def test_topic_id_sessions_forget_by_topic_id(broker):
    make_topic(broker.bootstrap, "s", 2)
    produce(broker.bootstrap, "s", 1, 1)
    with RawClient(broker.port) as c:
        meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="s")]), 12)
        tid = meta.topics[0].topic_id

        def by_id(sid, epoch, parts, forget=()):
            return c.request(F(replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=sid, session_epoch=epoch,
                               topics=[F.FetchTopic(topic_id=tid, partitions=[
                                   F.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                                   for p in parts])] if parts else [],
                               forgotten_topics_data=[F.ForgottenTopic(topic_id=tid, partitions=list(forget))]
                               if forget else []), 13)

        full = by_id(0, 0, [0, 1])
        assert full.session_id > 0 and full.responses[0].topic_id == tid and set(answered(full)) == {0, 1}
        sid = full.session_id
        assert answered(by_id(sid, 1, [])) == {1: (1, answered(full)[1][1])}  # its offset is 0: read again
        assert answered(by_id(sid, 2, [], forget=[1])) == {}
        assert by_id(sid, 3, [], forget=[0]).session_id == 0  # empty: closed


def test_the_follower_session_names_only_moved_partitions_and_starts_over_after_session_errors(broker):
    """The replica fetcher's side (SessionRequests) against the broker: a session lost on the
    broker (FETCH_SESSION_ID_NOT_FOUND) or a wrong epoch (INVALID_FETCH_SESSION_EPOCH) makes
    the next request a full one, which gets a new session."""
    make_topic(broker.bootstrap, "s", 3)
    produce(broker.bootstrap, "s", 1, 2)
    offsets = {0: 0, 1: 0, 2: 0}
    fs = SessionRequests()

    def follower_fetch(c: RawClient):
        wanted = {("s", p): F.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                  for p, o in offsets.items()}
        sid, epoch, topics, forgotten = fs.build(wanted)
        named = {p.partition for t in topics for p in t.partitions}
        resp = c.request(F(replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=sid, session_epoch=epoch,
                           topics=topics, forgotten_topics_data=forgotten), 12)
        fs.answered(resp.error_code, resp.session_id)
        return resp, named

    with RawClient(broker.port) as c, RawClient(broker.port) as other:
        resp, named = follower_fetch(c)
        assert named == {0, 1, 2} and resp.session_id > 0 and fs.session_id == resp.session_id
        offsets[1] = 2
        resp, named = follower_fetch(c)
        assert named == {1} and answered(resp) == {}
        resp, named = follower_fetch(c)
        assert named == set() and resp.error_code == 0
        lost = fs.session_id
        fetch(other, lost, -1)  # closed behind the fetcher's back
        resp, named = follower_fetch(c)
        assert resp.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and (fs.session_id, fs.epoch) == (0, 0)
        resp, named = follower_fetch(c)
        assert named == {0, 1, 2} and resp.session_id not in (0, lost)
        fs.epoch += 5  # out of step with the broker
        stale = fs.session_id
        resp, named = follower_fetch(c)
        assert resp.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and (fs.session_id, fs.epoch) == (stale, 0)
        resp, named = follower_fetch(c)  # full, closing the old session
        assert named == {0, 1, 2} and resp.session_id not in (0, stale)
        assert fetch(other, stale, 1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        del offsets[2]
        resp, named = follower_fetch(c)  # forgets partition 2
        assert named == set() and resp.error_code == 0 and resp.session_id == fs.session_id
        produce(broker.bootstrap, "s", 2, 1)
        resp, named = follower_fetch(c)
        assert named == set() and answered(resp) == {}


@pytest.fixture
def one_slot(broker_factory):
    return broker_factory(settings={"max.incremental.fetch.session.cache.slots": "1"})


def test_a_full_cache_refuses_clients_and_a_follower_evicts_a_client_session(one_slot):
    b = one_slot
    make_topic(b.bootstrap, "s", 2)
    with RawClient(b.port) as c1, RawClient(b.port) as c2, RawClient(b.port) as replica:
        first = fetch(c1, 0, 0, {0: 0}).session_id
        assert first > 0
        refused = fetch(c2, 0, 0, {0: 0, 1: 0})  # a client may not evict a young client session
        assert refused.error_code == 0 and refused.session_id == 0 and set(answered(refused)) == {0, 1}
        assert fetch(c1, first, 1).error_code == 0
        follower = fetch(replica, 0, 0, {0: 0}, replica_id=1)  # privileged: evicts the client's
        assert follower.session_id > 0
        assert fetch(c1, first, 2).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert fetch(c2, 0, 0, {0: 0}).session_id == 0  # nor a young follower session
        assert fetch(replica, follower.session_id, 1, replica_id=1).error_code == 0


def test_zero_slots_mean_no_sessions(broker_factory, one_slot):
    zero = broker_factory("zero", settings={"max.incremental.fetch.session.cache.slots": "0"})
    for b in (zero, one_slot):
        make_topic(b.bootstrap, "s", 1)
    with RawClient(zero.port) as c, RawClient(one_slot.port) as c1:
        resp = fetch(c, 0, 0, {0: 0})
        assert (resp.error_code, resp.session_id, set(answered(resp))) == (0, 0, {0})
        assert fetch(c1, 0, 0, {0: 0}).session_id > 0


def test_each_worker_has_its_sessions_and_another_workers_id_is_not_found(broker_factory):
    b = broker_factory(workers=2)
    make_topic(b.bootstrap, "s", 1)
    by_worker: dict[int, tuple[RawClient, int]] = {}
    clients = []
    try:
        for _ in range(40):  # connections are spread over the workers by the kernel
            c = RawClient(b.port)
            clients.append(c)
            sid = fetch(c, 0, 0, {0: 0}).session_id
            assert 0 < sid <= 2 * SPAN
            by_worker.setdefault((sid - 1) // SPAN, (c, sid))
            if len(by_worker) == 2:
                break
        assert len(by_worker) == 2, "40 connections all landed on one worker"
        (c0, sid0), (c1, sid1) = by_worker[0], by_worker[1]
        assert fetch(c1, sid0, 1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert fetch(c0, sid1, 1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert fetch(c0, sid0, 1).error_code == 0 and fetch(c1, sid1, 1).error_code == 0
    finally:
        for c in clients:
            c.close()


class FetchLog(logging.Handler):
    """kafka-python's fetch session debug lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def read_until(poll, want: set, timeout: float = 30.0) -> set:
    got: set = set()
    deadline = time.monotonic() + timeout
    while not want <= got and time.monotonic() < deadline:
        got |= poll()
    return got


@pytest.mark.parametrize("workers", [0, 2])
def test_consumers_read_everything_with_sessions_on(broker_factory, workers):
    """kafka-python keeps an incremental session per broker (its debug log says so); records
    produced after the session settled arrive through incremental fetches. librdkafka (2.16)
    sends sessionless fetches (session epoch -1) and reads the same."""
    b = broker_factory(workers=workers)
    make_topic(b.bootstrap, "t", 6)
    for p in range(6):
        produce(b.bootstrap, "t", p, 50)
    first = {(p, b"v%d" % i) for p in range(6) for i in range(50)}
    later = {(p, b"v%d" % i) for p in (1, 4) for i in range(3)}

    log = FetchLog()
    logging.getLogger("kafka.consumer.fetcher").addHandler(log)
    logging.getLogger("kafka.consumer.fetcher").setLevel(logging.DEBUG)
    k = group_consumer(["t"], bootstrap_servers=b.bootstrap, group_id=f"kp{workers}", auto_offset_reset="earliest",
                       enable_auto_commit=False, fetch_max_wait_ms=50)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"rd{workers}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    try:
        def kp_poll() -> set:
            return {(m.partition, m.value) for ms in k.poll(200).values() for m in ms}

        def rd_poll() -> set:
            return {(m.partition(), m.value()) for m in c.consume(100, 0.2) if not m.error()}

        c.subscribe(["t"])
        assert read_until(kp_poll, first) == first
        assert read_until(rd_poll, first) == first
        for p in (1, 4):
            produce(b.bootstrap, "t", p, 3)  # the same values again, at offsets 50-52
        assert read_until(kp_poll, later) == later
        assert read_until(rd_poll, later) == later
    finally:
        k.close()
        c.close()
        logging.getLogger("kafka.consumer.fetcher").removeHandler(log)
    created = [line for line in log.lines if "created a new incremental fetch session" in line]
    continued = [line for line in log.lines if "sent an incremental fetch response for session" in line]
    assert created and continued, "kafka-python used no session:\n" + "\n".join(log.lines[-20:])
