"""Incremental fetch sessions (KIP-227), both ends: the broker's cache of sessions and the
request builder a follower's fetcher uses. No I/O here.

A Fetch (v7+) names a session by (session_id, session_epoch):
* epoch 0: a full request. Any session it names is closed; a new one is made from the
  partitions it lists if the cache has room (else the response's session id is 0, and the
  client goes on without one). The first incremental request then carries epoch 1.
* epoch -1: sessionless (a full request with no session); a session it names is closed.
* epoch n > 0: an incremental request on the session. Its listed partitions are added to
  the session or update their fetch parameters there; `forgotten_topics_data` removes
  partitions; the fetch reads every partition of the session (at the fetch offsets it
  holds), and the response lists only the partitions with something to say: records, or a
  high watermark, last stable offset or log start offset other than the last one the
  session sent, or an error (errors always go; a partition sent with an error is sent again
  when the error is gone). Answered partitions move to the end of the session, so a byte
  limit does not starve the ones behind them. An unknown id answers
  FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's INVALID_FETCH_SESSION_EPOCH
  (the session stays), a session made with topic names used with topic ids (v13+) or the
  reverse FETCH_SESSION_TOPIC_ID_ERROR. A request that leaves the session empty closes it
  and is answered sessionless.

The cache holds `max.incremental.fetch.session.cache.slots` sessions (Kafka's default 1000)
and evicts as Kafka's FetchSessionCache does when a full request wants a session and it is
full: first the least recently used session if unused for EVICTION_MS (two minutes);
otherwise a follower's request (privileged) may evict the smallest client session, or a
follower session older than EVICTION_MS with fewer partitions than its own, and a client's
request only a session older than EVICTION_MS that is not a follower's and has fewer
partitions (ties by id). A request that finds no room gets session id 0.

With worker processes each worker has its own cache (a client connection stays on one
worker): worker i of N holds slots // N sessions and draws its ids from the i-th of N equal
ranges of the positive int32s (as Kafka 3.9 shards its cache), so an id is never reused by
another worker, and another worker's id is unknown here (FETCH_SESSION_ID_NOT_FOUND).
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

from kafkafast.metrics import recorder
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.fetch import FetchRequest

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000
Key = tuple[str, int]


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class CachedPartition:
    """A session's partition: the request's fetch parameters (`fetch`, a FetchPartition) and
    what the session last answered for it."""
    __slots__ = ("topic_id", "fetch", "high_watermark", "last_stable_offset", "log_start_offset")

    def __init__(self, topic_id: Any, fetch: Any) -> None:
        self.topic_id = topic_id
        self.fetch = fetch
        self.high_watermark = self.last_stable_offset = self.log_start_offset = -1

    def unchanged(self, high_watermark: int, last_stable_offset: int, log_start_offset: int) -> bool:
        """Whether an answer with these offsets, no records and no error would be left out of an
        incremental response (`must_respond` False, nothing recorded)."""
        return (high_watermark == self.high_watermark and last_stable_offset == self.last_stable_offset
                and log_start_offset == self.log_start_offset)

    def must_respond(self, p: Any) -> bool:
        """Whether the partition's answer `p` (a PartitionData) goes in an incremental
        response; records what it tells."""
        if p.error_code:
            self.high_watermark = -1  # resent once the error is gone
            return True
        return self.answered(p.high_watermark, p.last_stable_offset, p.log_start_offset,
                             (p.records is not None and len(p.records) > 0) or p.preferred_read_replica >= 0)

    def answered(self, high_watermark: int, last_stable_offset: int, log_start_offset: int, news: bool) -> bool:
        """`must_respond` for an answer without an error given as its offsets and whether it has
        `news` (records, a preferred read replica)."""
        if (high_watermark, last_stable_offset, log_start_offset) != (
                self.high_watermark, self.last_stable_offset, self.log_start_offset):
            self.high_watermark, self.last_stable_offset = high_watermark, last_stable_offset
            self.log_start_offset = log_start_offset
            return True
        return news


class FetchSession:
    """One session. `lean`: what the follower-fetch lean path (handlers/fetch.py `follower_fetch`)
    built from the partitions in their order, kept between fetches; None whenever the order or
    the partitions change other than through that path (`update`, `incremental_responses`,
    `move_to_end`), so the next lean fetch builds it again."""
    __slots__ = ("id", "privileged", "uses_topic_ids", "epoch", "created", "last_used", "partitions", "lean")

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool, now: float) -> None:
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created = self.last_used = now
        self.partitions: dict[Key, CachedPartition] = {}  # in fetch order
        self.lean: Any = None

    def update(self, topics: list, forgotten: list[Key]) -> None:
        for ft in topics:
            for fp in ft.partitions:
                key = (ft.topic, fp.partition)
                cp = self.partitions.get(key)
                if cp is None:
                    self.partitions[key] = CachedPartition(ft.topic_id, fp)
                    self.lean = None
                else:
                    cp.fetch = fp
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                self.lean = None

    def move_to_end(self, keys: list[Key]) -> bool:
        """Moves the answered partitions `keys` (in session order) to the end of the session, as
        an incremental response does; whether the order changed (then `lean` is None)."""
        partitions = self.partitions
        n = len(keys)
        if n == len(partitions):  # already the last ones, in that order: nothing moves
            if list(partitions) == keys:
                return False
        elif n < len(partitions):
            tail = list(islice(reversed(partitions), n))
            tail.reverse()
            if tail == keys:
                return False
        for key in keys:
            partitions[key] = partitions.pop(key)
        self.lean = None
        return True

    def fetch_topics(self) -> list:
        """The session's partitions as the FetchTopics of a request (consecutive partitions
        of one topic grouped)."""
        topics: list = []
        for (topic, _), cp in self.partitions.items():
            if not topics or topics[-1].topic != topic:
                topics.append(FetchRequest.FetchTopic(topic=topic, topic_id=cp.topic_id, partitions=[]))
            topics[-1].partitions.append(cp.fetch)
        return topics


class FetchContext:
    """How one Fetch is answered: `error` (a top-level error code, nothing read), or the
    partitions to read (set in the request) and `respond` for the response's session id and
    partitions."""
    __slots__ = ("cache", "error", "session", "create", "privileged", "uses_topic_ids", "topics")

    def __init__(self, cache: FetchSessionCache, error: int = 0, session: FetchSession | None = None,
                 create: bool = False, privileged: bool = False, uses_topic_ids: bool = False,
                 topics: list | None = None) -> None:
        self.cache = cache
        self.error = error
        self.session = session  # an incremental request's session
        self.create = create  # a full request asking for a session
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.topics = topics  # a full request's partitions

    def respond(self, responses: list) -> tuple[int, list]:
        """(session id, topic responses) of the answer whose partitions read `responses`."""
        if self.session is not None:
            return self.session.id, self.cache.incremental_responses(self.session, responses)
        if self.create and self.topics is not None:
            return self.cache.maybe_create(self.privileged, self.uses_topic_ids, self.topics, responses), responses
        return 0, responses


def _span(shards: int) -> int:
    """How many session ids each shard of a cache split `shards` ways hands out."""
    return 0x7FFFFFFF // max(shards, 1)


def session_shard(session_id: int, shards: int) -> int:
    """The shard (worker index) whose ids include `session_id`, in a cache split `shards` ways."""
    return (session_id - 1) // _span(shards)


class FetchSessionCache:
    def __init__(self, slots: int, shard: int = 0, shards: int = 1, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = max(slots, 0) // max(shards, 1)
        span = _span(shards)
        self.id_range = (shard * span + 1, (shard + 1) * span)
        self.eviction_s = eviction_ms / 1000.0
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.partitions_cached = 0

    def _changed(self, partitions: int, evicted: int = 0) -> None:
        self.partitions_cached += partitions
        recorder.fetch_session_cache(len(self.sessions), self.partitions_cached, evicted)

    def _remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._changed(-len(session.partitions))

    def context(self, req: Any, version: int, name_of_id: Callable[[bytes], str | None]) -> FetchContext:
        """The context of request `req` (its topics already named); for an incremental one,
        `req.topics` becomes the session's partitions. `name_of_id` names v13+ forgotten topics."""
        privileged = req.replica_id >= 0
        if version < 7 or req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if version >= 7 and req.session_id:
                self._remove(req.session_id)
            create = version >= 7 and req.session_epoch == INITIAL_EPOCH
            return FetchContext(self, create=create, privileged=privileged, uses_topic_ids=version >= 13,
                                topics=req.topics)
        session = self.sessions.get(req.session_id)
        if session is None:
            return FetchContext(self, E.ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != req.session_epoch:
            return FetchContext(self, E.ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (version >= 13):
            return FetchContext(self, E.ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        forgotten = []
        for ft in req.forgotten_topics_data or ():
            name = name_of_id(bytes(ft.topic_id)) if version >= 13 else ft.topic
            forgotten.extend((name, p) for p in ft.partitions)
        recorder.incremental_fetch(privileged, sum(len(ft.partitions) for ft in req.topics))
        before = len(session.partitions)
        session.update(req.topics, forgotten)
        if len(session.partitions) != before:
            self._changed(len(session.partitions) - before)
        if not session.partitions:
            self._remove(session.id)
            return FetchContext(self, topics=req.topics)
        session.last_used = self.clock()
        session.epoch = next_epoch(session.epoch)
        req.topics = session.fetch_topics()
        return FetchContext(self, session=session)

    def incremental_responses(self, session: FetchSession, responses: list) -> list:
        """The topic responses with only the partitions that must be sent; those move to the
        end of the session."""
        out = []
        for t in responses:
            kept = []
            for p in t.partitions:
                key = (t.topic, p.partition_index)
                cp = session.partitions.get(key)
                if cp is None or cp.must_respond(p):
                    kept.append(p)
                    if cp is not None:
                        session.partitions[key] = session.partitions.pop(key)
                        session.lean = None
            if kept:
                t.partitions = kept
                out.append(t)
        return out

    def maybe_create(self, privileged: bool, uses_topic_ids: bool, topics: list, responses: list) -> int:
        """A new session of a full request's `topics`, answered `responses`; its id, 0 when
        the cache has no room."""
        size = sum(len(ft.partitions) for ft in topics)
        now = self.clock()
        if size == 0 or not (len(self.sessions) < self.slots or self._evict_for(privileged, size, now)):
            return 0
        session = FetchSession(self._new_id(), privileged, uses_topic_ids, now)
        session.update(topics, [])
        answered = {(t.topic, p.partition_index): p for t in responses for p in t.partitions}
        for key, cp in session.partitions.items():
            p = answered.get(key)
            if p is not None:
                cp.must_respond(p)
        self.sessions[session.id] = session
        self._changed(len(session.partitions))
        return session.id

    def _evict_for(self, privileged: bool, size: int, now: float) -> bool:
        if not self.sessions:
            return False
        victim = min(self.sessions.values(), key=lambda s: s.last_used)
        if now - victim.last_used <= self.eviction_s:
            old = [s for s in self.sessions.values() if now - s.created > self.eviction_s
                   or (privileged and not s.privileged)]
            if not old:
                return False
            victim = min(old, key=lambda s: (s.privileged, len(s.partitions), s.id))
            if (privileged, size, 0) < (victim.privileged, len(victim.partitions), victim.id):
                return False
        self.sessions.pop(victim.id)
        self._changed(-len(victim.partitions), evicted=1)
        return True

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(*self.id_range)
            if session_id not in self.sessions:
                return session_id


class SessionRequests:
    """A fetcher's side of one session (Kafka's FetchSessionHandler): `build` turns the
    partitions it wants into a full or incremental request's topics, `answered` takes the
    response's error and session id."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.sent: dict[Key, tuple] = {}  # what the session holds: partition -> its fetch parameters
        self.full = True

    def build(self, wanted: dict[Key, Any]) -> tuple[int, int, list, list]:
        """(session id, epoch, topics, forgotten topics) of the request for `wanted`, its
        FetchPartitions by partition: all of them when full, else only those added or
        changed since the session last had them."""
        session_id, epoch, topics, forgotten = self.build_params({
            key: (fp.partition, fp.current_leader_epoch, fp.fetch_offset, fp.last_fetched_epoch,
                  fp.log_start_offset, fp.partition_max_bytes) for key, fp in wanted.items()})
        return (session_id, epoch,
                [FetchRequest.FetchTopic(topic=t, partitions=[wanted[(t, p[0])] for p in ps]) for t, ps in topics.items()],
                [FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()])

    def build_params(self, params: dict[Key, tuple]) -> tuple[int, int, dict[str, list[tuple]], dict[str, list[int]]]:
        """`build` over plain fetch parameters (`protocol/fetch_ask.py`'s Params tuples, by
        partition): (session id, epoch, the named partitions' parameters by topic, the
        forgotten partitions by topic)."""
        self.full = self.epoch == INITIAL_EPOCH
        sent = self.sent
        topics: dict[str, list[tuple]] = {}
        forgotten: dict[str, list[int]] = {}
        if self.full:
            for key, p in params.items():
                topics.setdefault(key[0], []).append(p)
        else:
            for key, p in params.items():
                if sent.get(key) != p:
                    topics.setdefault(key[0], []).append(p)
            for key in sent.keys() - params.keys():
                forgotten.setdefault(key[0], []).append(key[1])
        self.sent = params
        return self.session_id, self.epoch, topics, forgotten

    def answered(self, error_code: int, session_id: int) -> None:
        if error_code == E.ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self.session_id, self.epoch = 0, INITIAL_EPOCH
        elif error_code:
            self.failed()
        elif self.full or not session_id:  # a new session, none, or the broker closed it
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id else INITIAL_EPOCH
        else:
            self.epoch = next_epoch(self.epoch)

    def failed(self) -> None:
        """The request got no answer or an error: the next one is full, closing the session."""
        self.epoch = INITIAL_EPOCH
