"""Regex subscriptions of the consumer group protocol (ConsumerGroupHeartbeat v1
SubscribedTopicRegex, as Kafka 4.0 serves them): the regex matches whole topic names,
internal topics excluded; a member with names and a regex gets the union; topics created
or deleted later are picked up (the group epoch moves, the member gets the new
partitions); an invalid regex answers INVALID_REGULAR_EXPRESSION. Raw heartbeats and
librdkafka (`subscribe(["^prefix.*"])` with group.protocol=consumer), a restart, and a
topic created through another worker of a multi-worker broker."""
from __future__ import annotations

import time
import uuid

from confluent_kafka.admin import AdminClient

from kafkafast.protocol._generated.consumer_group_describe import ConsumerGroupDescribeRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.integration.test_consumer_group_protocol import (
    HB,
    SETTINGS,
    beat,
    cbroker,  # noqa: F401  (fixture)
    create_topics,
    new_consumer,
    owned,
    produce,
    settle,
    topic_id,
)
from tests.support.raw_client import RawClient


def join_regex(c: RawClient, group: str, regex: str, names: list[str] | None = None, **kw):
    return c.request(HB(group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rebalance_timeout_ms=10000,
                        subscribed_topic_names=names or [], subscribed_topic_regex=regex, topic_partitions=[], **kw), 1)


def test_regex_matches_whole_names_unions_with_names_and_follows_topic_changes(cbroker):
    bs = cbroker.bootstrap
    create_topics(bs, {"rx-a": 2, "named": 1, "xrx-b": 1, "rx": 1})
    with RawClient(cbroker.port) as c:
        ids = {t: topic_id(c, t) for t in ("rx-a", "named", "xrx-b", "rx")}
        r = join_regex(c, "grx", "rx-.*", ["named"])
        assert r.error_code == 0 and r.member_epoch == 1
        m, epoch, held = r.member_id, r.member_epoch, owned(r)
        # "xrx-b" and "rx" contain a match but are not one: the whole name must match.
        assert held == {ids["rx-a"]: {0, 1}, ids["named"]: {0}}
        d = c.request(ConsumerGroupDescribeRequest(group_ids=["grx"]), 1).groups[0]
        assert [(x.subscribed_topic_names, x.subscribed_topic_regex) for x in d.members] == [(["named"], "rx-.*")]

        # Internal topics never match (__consumer_offsets exists: the group above wrote to it).
        r = join_regex(c, "ginternal", "__.*")
        assert r.error_code == 0 and not owned(r)

        # A topic created later is picked up on the next heartbeat: the epoch moves on.
        create_topics(bs, {"rx-new": 3})
        new_id = topic_id(c, "rx-new")
        r = beat(c, "grx", m, epoch, held)
        assert r.error_code == 0 and r.member_epoch == epoch + 1
        epoch, held = r.member_epoch, owned(r)
        assert held == {ids["rx-a"]: {0, 1}, ids["named"]: {0}, new_id: {0, 1, 2}}

        # A deleted one goes away (the member revokes it first, then moves on).
        admin = AdminClient({"bootstrap.servers": bs})
        assert admin.delete_topics(["rx-a"])["rx-a"].result(15) is None
        before, deadline = epoch, time.monotonic() + 20
        while time.monotonic() < deadline:  # the answer drops it; the next heartbeat acknowledges that
            r = beat(c, "grx", m, epoch, held)
            assert r.error_code == 0
            epoch, held = r.member_epoch, owned(r) if owned(r) is not None else held
            if epoch > before:
                break
        assert epoch == before + 1 and held == {ids["named"]: {0}, new_id: {0, 1, 2}}
        d = c.request(ConsumerGroupDescribeRequest(group_ids=["grx"]), 1).groups[0]
        assert d.group_epoch == epoch and d.group_state == "Stable"

        # Changing the regex to one matching nothing leaves only the named topic.
        r = beat(c, "grx", m, epoch, held, subscribed_topic_regex="nothing-[0-9]+")
        assert r.error_code == 0
        r = beat(c, "grx", m, r.member_epoch, owned(r))
        assert r.error_code == 0 and owned(r) in (None, {ids["named"]: {0}})


def test_invalid_regex_answers_invalid_regular_expression(cbroker):
    create_topics(cbroker.bootstrap, {"bad-rx": 1})
    with RawClient(cbroker.port) as c:
        for regex in ("rx-(", "[z-a]", "(?<=x)y", "a{2,1001}"):  # the last: over RE2's repeat limit
            r = join_regex(c, "gbad", regex)
            assert r.error_code == EC.INVALID_REGULAR_EXPRESSION == 128, regex
            assert regex in r.error_message
        r = join_regex(c, "gbad", "bad-.*")
        assert r.error_code == 0 and owned(r) == {topic_id(c, "bad-rx"): {0}}
        # A member changing its regex to an invalid one is refused and keeps what it had.
        bad = beat(c, "gbad", r.member_id, r.member_epoch, owned(r), subscribed_topic_regex="(")
        assert bad.error_code == EC.INVALID_REGULAR_EXPRESSION
        d = c.request(ConsumerGroupDescribeRequest(group_ids=["gbad"]), 1).groups[0]
        assert [x.subscribed_topic_regex for x in d.members] == ["bad-.*"]
        # A hostile pattern for backtracking engines is matched in linear time.
        r = join_regex(c, "gslow", "(a+)+$")
        assert r.error_code == 0
        assert beat(c, "gslow", r.member_id, r.member_epoch, {}).error_code == 0


def test_regex_subscription_survives_a_restart(cbroker):
    create_topics(cbroker.bootstrap, {"keep-1": 2})
    with RawClient(cbroker.port) as c:
        r = join_regex(c, "gkeep", "keep-[0-9]")
        assert r.error_code == 0
        m, epoch, held = r.member_id, r.member_epoch, owned(r)
    cbroker.restart()
    with RawClient(cbroker.port) as c:
        deadline = time.monotonic() + 20
        while True:  # the coordinator may still be loading its partitions
            r = beat(c, "gkeep", m, epoch, held)
            if r.error_code != EC.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # The regex and the topics' metadata were stored: no new epoch, same partitions.
        assert r.error_code == 0 and r.member_epoch == epoch and owned(r) in (None, held)
        d = c.request(ConsumerGroupDescribeRequest(group_ids=["gkeep"]), 1).groups[0]
        assert d.group_epoch == epoch and [x.subscribed_topic_regex for x in d.members] == ["keep-[0-9]"]


def test_librdkafka_regex_subscription_picks_up_a_new_topic(cbroker):
    bs = cbroker.bootstrap
    create_topics(bs, {"lrx-1": 2, "other-lrx": 1})
    produce(bs, "lrx-1", 2, 3, tag="a")
    records: dict[bytes, int] = {}
    c1 = new_consumer(bs, "glrx", ["^lrx-.*"])
    c2 = new_consumer(bs, "glrx", ["^lrx-.*"])
    try:
        parts = settle([c1, c2], 2, records, sizes=[1, 1])
        assert set().union(*parts) == {("lrx-1", 0), ("lrx-1", 1)}
        create_topics(bs, {"lrx-2": 2})
        produce(bs, "lrx-2", 2, 3, tag="b")
        parts = settle([c1, c2], 4, records, sizes=[2, 2], timeout=60)
        assert set().union(*parts) == {("lrx-1", 0), ("lrx-1", 1), ("lrx-2", 0), ("lrx-2", 1)}
        deadline = time.monotonic() + 30
        while len(records) < 12 and time.monotonic() < deadline:
            for cons in (c1, c2):
                msg = cons.poll(0.05)
                if msg is not None and msg.error() is None:
                    records[msg.value()] = records.get(msg.value(), 0) + 1
        assert {v.decode() for v in records} == {f"{t}{p}-{i}" for t in "ab" for p in range(2) for i in range(3)}
    finally:
        c1.close()
        c2.close()


def test_regex_picks_up_a_topic_created_through_another_worker(broker_factory):
    b = broker_factory("rx-mw", workers=2, settings=SETTINGS)
    create_topics(b.bootstrap, {"mw-rx-1": 2})
    with RawClient(b.port) as c:
        r = join_regex(c, "gmw-rx", "mw-rx-[0-9]+")
        assert r.error_code == 0 and owned(r) == {topic_id(c, "mw-rx-1"): {0, 1}}
        m, epoch = r.member_id, r.member_epoch
        for i in range(2, 5):  # each created on whichever worker the admin client reaches
            create_topics(b.bootstrap, {f"mw-rx-{i}": 1})
        r = beat(c, "gmw-rx", m, epoch, owned(r))
        assert r.error_code == 0 and r.member_epoch == epoch + 1
        assert owned(r) == {topic_id(c, "mw-rx-1"): {0, 1}, **{topic_id(c, f"mw-rx-{i}"): {0} for i in range(2, 5)}}
