"""The fetch session cache's eviction rules that take Kafka's two minutes (EVICTION_MS) to
show, on a manual clock: a session unused that long goes first; otherwise a client's request
may only evict a client session older than that with fewer partitions, a follower's request
any client session, or a follower session older than that with fewer partitions."""
from __future__ import annotations

from kafkafast.broker.fetch_sessions import EVICTION_MS, FetchSession, FetchSessionCache
from kafkafast.protocol._generated.fetch import FetchRequest as F
from kafkafast.protocol._generated.fetch import FetchResponse as R

LATER = EVICTION_MS / 1000.0 + 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def full(cache: FetchSessionCache, partitions: int, replica_id: int = -1) -> int:
    """A full Fetch (epoch 0) of `partitions` partitions; the session id it gets."""
    req = F(replica_id=replica_id, session_id=0, session_epoch=0, forgotten_topics_data=[],
            topics=[F.FetchTopic(topic="t", partitions=[F.FetchPartition(partition=p) for p in range(partitions)])])
    return cache.context(req, 12, lambda _: None).respond([])[0]


def use(cache: FetchSessionCache, session_id: int) -> int:
    """An incremental Fetch naming nothing; its error code."""
    epoch = cache.sessions[session_id].epoch if session_id in cache.sessions else 1
    req = F(replica_id=-1, session_id=session_id, session_epoch=epoch, topics=[], forgotten_topics_data=[])
    return cache.context(req, 12, lambda _: None).error


def test_a_session_unused_for_two_minutes_is_evicted_first():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    follower, client = full(cache, 1, replica_id=2), full(cache, 50)
    clock.now += LATER - 2
    assert use(cache, client) == 0  # used: only the follower's is stale
    clock.now += 2
    newcomer = full(cache, 1)
    assert newcomer and set(cache.sessions) == {client, newcomer} and follower not in cache.sessions


def test_a_client_evicts_only_an_old_smaller_client_session():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    small, big = full(cache, 2), full(cache, 8)
    assert full(cache, 5) == 0  # both younger than two minutes
    clock.now += LATER
    for s in (small, big):
        assert use(cache, s) == 0  # not stale, but old
    newcomer = full(cache, 5)
    assert newcomer and set(cache.sessions) == {big, newcomer}  # the smallest went
    assert full(cache, 1) == 0  # smaller than every old one (the newcomer is young)


def test_a_client_never_evicts_a_follower_session_and_a_follower_evicts_an_old_smaller_one():
    clock = Clock()
    cache = FetchSessionCache(1, clock=clock)
    follower = full(cache, 3, replica_id=2)
    clock.now += LATER
    assert use(cache, follower) == 0
    assert full(cache, 100) == 0
    assert full(cache, 2, replica_id=3) == 0  # fewer partitions than the old follower session
    other = full(cache, 4, replica_id=3)
    assert other and set(cache.sessions) == {other}


def test_worker_caches_share_the_slots_and_draw_ids_from_their_own_range():
    caches = [FetchSessionCache(10, shard=i, shards=2) for i in range(2)]
    span = 0x7FFFFFFF // 2
    for i, cache in enumerate(caches):
        ids = [full(cache, 1) for _ in range(6)]
        assert ids[5] == 0 and all(i * span < s <= (i + 1) * span for s in ids[:5])


def test_the_lean_walk_is_dropped_whenever_the_session_order_or_partitions_change():
    """`FetchSession.lean` (what the follower-fetch lean path keeps between fetches) stays while
    the session's partitions and their order stay, and is dropped when a partition is added or
    forgotten, or an answer moves partitions to the end in another order."""
    s = FetchSession(1, True, False, 0.0)
    fp = [F.FetchPartition(partition=p) for p in range(4)]
    s.update([F.FetchTopic(topic="t", partitions=fp)], [])
    keys = [("t", p) for p in range(4)]
    s.lean = kept = object()
    s.update([F.FetchTopic(topic="t", partitions=[F.FetchPartition(partition=2, fetch_offset=9)])], [])
    assert s.lean is kept and s.partitions[("t", 2)].fetch.fetch_offset == 9  # new parameters only
    for tail in ([], keys[3:], keys[2:], keys):  # the last ones already, in order: nothing moves
        assert not s.move_to_end(tail) and s.lean is kept and list(s.partitions) == keys
    assert s.move_to_end([keys[1], keys[3]]) and s.lean is None
    assert list(s.partitions) == [keys[0], keys[2], keys[1], keys[3]]
    s.lean = kept
    assert s.move_to_end([keys[2], keys[3]]) and s.lean is None  # the last two, not in their order
    assert list(s.partitions) == [keys[0], keys[1], keys[2], keys[3]]
    s.lean = kept
    s.update([], [("t", 9)])  # forgetting one it does not have: nothing changes
    assert s.lean is kept
    s.update([], [("t", 0)])
    assert s.lean is None and list(s.partitions) == keys[1:]
    s.lean = kept
    s.update([F.FetchTopic(topic="u", partitions=[F.FetchPartition(partition=0)])], [])
    assert s.lean is None


def test_an_incremental_response_that_reorders_the_session_drops_the_lean_walk():
    cache = FetchSessionCache(4)
    sid = full(cache, 3, replica_id=2)
    session = cache.sessions[sid]
    session.lean = object()
    req = F(replica_id=2, session_id=sid, session_epoch=session.epoch, topics=[], forgotten_topics_data=[])
    ctx = cache.context(req, 12, lambda _: None)
    answered = [R.FetchableTopicResponse(topic="t", partitions=[
        R.PartitionData(partition_index=0, high_watermark=5, last_stable_offset=5, log_start_offset=0)])]
    assert ctx.respond(answered)[1] and list(session.partitions) == [("t", 1), ("t", 2), ("t", 0)]
    assert session.lean is None
