"""The fetch session cache's eviction rules that take Kafka's two minutes (EVICTION_MS) to
show, on a manual clock: a session unused that long goes first; otherwise a client's request
may only evict a client session older than that with fewer partitions, a follower's request
any client session, or a follower session older than that with fewer partitions."""
from __future__ import annotations

from kafkafast.broker.fetch_sessions import EVICTION_MS, FetchSessionCache
from kafkafast.protocol._generated.fetch import FetchRequest as F

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
