"""Follower replication (Kafka's `ReplicaFetcherThread`, as asyncio tasks on the broker's loop).

`num.replica.fetchers` fetchers per source broker; a partition goes to fetcher
`hash(topic, partition) % num.replica.fetchers` of its leader. A partition added to a fetcher
(it became a follower) first truncates by leader epoch (KIP-101/279): it sends
OffsetForLeaderEpoch with its latest epoch; the leader answers with the largest epoch it
has at or below it and where that epoch ends; the follower truncates to the smaller of
that end and its own end of the same epoch, asking again with its own earlier epoch when
it does not have the leader's one. Only without any epoch information does it fall back
to its high watermark. Then it fetches (Fetch v12 with replica_id and the current leader
epoch, long-polled with replica.fetch.wait.max.ms) in an incremental fetch session (KIP-227,
`SessionRequests` in kafkafast/broker/fetch_sessions.py): once the session exists a request
names only the partitions whose fetch offset or leader epoch changed and forgets those it
no longer fetches (the request packed from the partitions' fetch parameters,
`protocol/fetch_ask.py`: no generated objects), and the leader answers only partitions with records or a new high
watermark; an unknown session or a wrong epoch (the leader restarted or evicted it, a
reconnection reached another worker) or a failed request starts a full session again.
The leader's worker: in a broker of N worker processes the fetchers of worker i fetch the
partitions worker i owns, which the leader's worker i owns as well when it runs as many workers
(the same hash). The kernel spreads connections over the leader's workers, and a fetch served
by a worker that does not own the partitions reads their state from shared memory and pokes
their owner to move the high watermark (an acks=all produce then waits one more hop). So a
fetcher whose new session's id (the leader's workers draw ids from separate ranges,
`fetch_sessions.session_shard`) says another worker took it makes its connection again, a
few times at most (`_home_or_reconnect`). It appends the leader's batches byte for
byte at the leader's offsets, and takes the leader's high watermark (bounded by its own log
end). The answer is received into the fetcher's `ReceiveBuffer` (one buffer reused for every
answer, never allocated or zero-filled per answer: the fetcher has one request in flight and is
done with an answer before it sends the next), walked in place (`protocol/fetch_walk.py`: only
the fields used here, no generated objects), and each partition's records are appended from a
view of that buffer (`Log.append_as_follower`: one CRC and header pass, one `os.pwrite`; a
batch cut off by the fetch size is dropped and fetched again from the new log end). A leader that does not answer a request within half of replica.lag.time.max.ms (past the
fetch's own long-poll wait; replica.socket.timeout.ms if that is shorter), or a connection that
is not made within it, is given up on: the connection is closed and made again. A follower that
waits longer falls out of the ISR anyway, and after a network cut the requests sent during it are
lost packets that only TCP's retransmission back-off would bring back, seconds after the cut
healed. An error backs the partition off (so does a partition left out of an OffsetForLeaderEpoch
answer, or the follower would ask again at once, in a loop): FIRST_BACKOFF_S after its first error
in a row, twice as long after each next one, at most replica.fetch.backoff.ms (Kafka's fixed wait
is that cap).
While a partition backs off, the fetch of the others asks the leader to hold it only until that
back-off ends; else the partition would wait for their long poll, whatever its back-off.
The common error is a leader that does not know the partition yet: the controller's LeaderAndIsr
reaches the follower first, or, with worker processes, the leader's worker serving the fetch has
not applied it yet (the worker that took it passes it on to the others before it answers). A
fixed second would hold the first acks=all produces to a new topic or a new leader that long
(seen on half the partitions of a new topic on a `--workers 2` cluster). A leader change
comes as a LeaderAndIsr request that moves the partition to another fetcher. Throttled
replicas (`throttle.py`) are left out of the requests while the broker's
follower.replication.throttled.rate is used up.
"""
from __future__ import annotations

import asyncio
import logging
import time
import zlib
from typing import Any

from kafkafast.broker.fetch_sessions import SessionRequests, session_shard
from kafkafast.client.connection import BrokerConnection, ReceiveBuffer
from kafkafast.broker.replication_throttle import ReplicationQuota, throttled
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kafkafast.protocol.fetch_ask import FETCH_ASK_VERSION, encode_fetch_ask
from kafkafast.protocol.fetch_walk import FETCH_WALK_VERSION, FetchAnswer

log = logging.getLogger("kafkafast.replica_fetcher")
TP = tuple[str, int]
FETCH_VERSION = FETCH_WALK_VERSION
assert FETCH_ASK_VERSION == FETCH_VERSION
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
MAX_TRUNCATION_ROUNDS = 8
# Reconnections in a row to reach the leader's worker of the same index. The leader's kernel
# spreads connections over its N workers at random (SO_REUSEPORT), so each lands there with
# chance 1/N: with 2 workers, 8 tries all missed once in 256 fetchers (each then served by the
# other worker for REHOME_AGAIN_S); 24 miss once in ~17 million (4 workers: once in ~1000).
MAX_REHOMES = 24
FIRST_BACKOFF_S = 0.05  # a partition's wait after its first error in a row (module docstring)
REHOME_AGAIN_S = 30.0  # after which a fetcher that did not reach it tries again (a worker was being replaced)
OFFSET_OUT_OF_RANGE = E.ErrorCode.OFFSET_OUT_OF_RANGE
SESSION_ERRORS = (E.ErrorCode.FETCH_SESSION_ID_NOT_FOUND, E.ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                  E.ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)


class FetchState:
    __slots__ = ("part", "epoch", "truncating", "request_epoch", "rounds", "delay_until", "errors")

    def __init__(self, part: Any, epoch: int) -> None:
        self.part = part
        self.epoch = epoch
        self.truncating = True
        self.request_epoch: int | None = None
        self.rounds = 0
        self.delay_until = 0.0
        self.errors = 0  # errors in a row: the next back-off doubles with each

    def back_off(self, now: float, cap_s: float) -> None:
        """After an error for this partition: not fetched (nor its truncation asked) before
        FIRST_BACKOFF_S x 2^(errors in a row before this one), at most `cap_s` from `now`."""
        self.delay_until = now + min(cap_s, FIRST_BACKOFF_S * (1 << min(self.errors, 20)))
        self.errors += 1


class ReplicaFetcher:
    def __init__(self, broker: Any, leader_id: int, host: str, port: int, quota: ReplicationQuota) -> None:
        self.broker = broker
        self.quota = quota  # the broker's follower.replication.throttled.rate, shared by its fetchers
        self.leader_id = leader_id
        self.host, self.port = host, port
        cfg = broker.config
        self.wait_ms = cfg.get_int("replica.fetch.wait.max.ms")
        self.min_bytes = cfg.get_int("replica.fetch.min.bytes")
        self.max_bytes = cfg.get_int("replica.fetch.max.bytes")
        self.response_max_bytes = cfg.get_int("replica.fetch.response.max.bytes")
        self.backoff_s = cfg.get_int("replica.fetch.backoff.ms") / 1000.0
        self.timeout_s = cfg.get_int("replica.socket.timeout.ms") / 1000.0
        # how long the leader may stay silent beyond a fetch's long poll (module docstring)
        self.liveness_s = max(0.5, min(self.timeout_s, cfg.get_int("replica.lag.time.max.ms") / 2000.0))
        self.partitions: dict[TP, FetchState] = {}
        self.conn: BrokerConnection | None = None
        # Fetch answers land here, reused across answers and connections (module docstring)
        # (an answer may pass replica.fetch.response.max.bytes by one partition's first batch, KIP-74)
        self.receive_buffer = ReceiveBuffer(cap=self.response_max_bytes + self.max_bytes)
        self.session = SessionRequests()  # KIP-227: a steady fetch names only partitions whose offset moved
        placement = broker.placement  # (module docstring, "the leader's worker")
        self.worker, self.workers = placement.index, placement.workers
        self.rehomes = 0
        self.rehome_after = 0.0
        self.changed = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def add(self, tp: TP, part: Any, epoch: int) -> None:
        self.partitions[tp] = FetchState(part, epoch)
        self.changed.set()

    def remove(self, tp: TP) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        if self.conn is not None:
            self.conn.close()

    async def _connection(self) -> BrokerConnection:
        if self.conn is None or self.conn.closed:
            self.conn = await BrokerConnection(
                self.host, self.port, node_id=self.leader_id, client_id=f"broker-{self.broker.node_id}-fetcher",
                request_timeout_ms=int(self.liveness_s * 1000), security=self.broker.control.node.inter_broker,
                receive_buffer=self.receive_buffer).connect(timeout=self.liveness_s)
        return self.conn

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self.changed.clear()
                await self.changed.wait()
                continue
            try:
                conn = await self._connection()
                if any(s.truncating for s in self.partitions.values()):
                    await self._truncate(conn)
                await self._fetch(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("fetcher for leader %d: %r; retrying", self.leader_id, exc)
                self.session.failed()
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                await asyncio.sleep(self.backoff_s)

    def _unchanged(self, tp: TP, asked: tuple | None) -> FetchState | None:
        """The partition's state if it is still the one a request was sent for (same object,
        same leader epoch); None when a LeaderAndIsr moved or replaced it meanwhile."""
        s = self.partitions.get(tp)
        if s is None or asked is None or asked[0] is not s or s.epoch != asked[1]:
            return None
        return s

    # -- truncation by leader epoch ------------------------------------------------------------
    async def _truncate(self, conn: BrokerConnection) -> None:
        R = OffsetForLeaderEpochRequest
        topics: dict[str, list] = {}
        asked: dict[TP, tuple[FetchState, int]] = {}
        now = time.monotonic()
        for tp, s in self.partitions.items():
            if not s.truncating or s.delay_until > now:
                continue
            lg = s.part.log
            epoch = s.request_epoch if s.request_epoch is not None else lg.leader_epochs.latest_epoch
            if epoch < 0 or s.rounds >= MAX_TRUNCATION_ROUNDS:
                self._truncate_to(tp, s, lg.state.high_watermark, "no leader epoch: to the high watermark")
                continue
            asked[tp] = (s, s.epoch)
            topics.setdefault(tp[0], []).append(R.OffsetForLeaderPartition(
                partition=tp[1], current_leader_epoch=s.epoch, leader_epoch=epoch))
        if not topics:
            return
        req = R(replica_id=self.broker.node_id, topics=[R.OffsetForLeaderTopic(topic=t, partitions=ps)
                                                          for t, ps in topics.items()])
        resp = await conn.send(req, version=OFFSET_FOR_LEADER_EPOCH_VERSION, timeout=self.liveness_s)
        now = time.monotonic()
        for tr in resp.topics:
            for pr in tr.partitions:
                tp = (tr.topic, pr.partition)
                s = self._unchanged(tp, asked.pop(tp, None))
                if s is None:
                    continue
                if pr.error_code:
                    s.back_off(now, self.backoff_s)
                    continue
                s.errors = 0
                lg = s.part.log
                if pr.leader_epoch < 0 or pr.end_offset < 0:
                    self._truncate_to(tp, s, lg.state.high_watermark, "leader has no epoch: to the high watermark")
                    continue
                own_epoch, own_end = lg.leader_epochs.end_offset_for(pr.leader_epoch, lg.log_end_offset)
                if own_epoch == pr.leader_epoch or own_epoch < 0:
                    self._truncate_to(tp, s, min(pr.end_offset, own_end if own_epoch >= 0 else lg.log_end_offset),
                                      f"leader epoch {pr.leader_epoch} ends at {pr.end_offset}")
                else:  # we do not have the leader's epoch: ask about our own largest one below it
                    s.request_epoch = own_epoch
                    s.rounds += 1
        for tp, sent in asked.items():  # left out of the answer (a leader not keeping to the protocol):
            s = self._unchanged(tp, sent)  # as an error, or they would be asked again at once, in a loop
            if s is not None:
                s.back_off(now, self.backoff_s)

    def _truncate_to(self, tp: TP, s: FetchState, offset: int, why: str) -> None:
        lg = s.part.log
        if offset < lg.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (%s)", tp[0], tp[1], lg.log_end_offset, offset, why)
            lg.truncate_to(offset)
            s.part.wake_everywhere()
        s.truncating = False
        s.request_epoch = None
        s.rounds = 0

    # -- fetching ------------------------------------------------------------------------------
    async def _fetch(self, conn: BrokerConnection) -> None:
        now = time.monotonic()
        ready = {}
        resume = None  # when the first partition left out (backing off, or to truncate) is due
        for tp, s in self.partitions.items():
            if s.delay_until > now:
                if resume is None or s.delay_until < resume:
                    resume = s.delay_until
            elif s.truncating:
                resume = now
            else:
                ready[tp] = s
        quota = self.quota
        node = self.broker.node_id
        is_throttled = set() if quota.unlimited else {
            tp for tp, s in ready.items()
            if throttled(s.part.log.config.follower_replication_throttled_replicas, tp[1], node)}
        if is_throttled and quota.exceeded():
            for tp in is_throttled:
                ready.pop(tp)
            if not ready:
                await asyncio.sleep(min(max(quota.wait_s(), 0.01), self.backoff_s))
                return
        if not ready:  # every partition backs off or truncates: until the first back-off ends
            wait = min(self.backoff_s, max(0.0, (resume or now) - now))  # (None: removed meanwhile)
            if wait > 0:
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            return
        params = {}
        sent: dict[TP, tuple[FetchState, int, int]] = {}
        max_bytes = self.max_bytes
        for tp, s in ready.items():
            lg = s.part.log
            end = lg.log_end_offset
            sent[tp] = (s, s.epoch, end)
            params[tp] = (tp[1], s.epoch, end, -1, lg.log_start_offset, max_bytes)
        session_id, epoch, topics, forgotten = self.session.build_params(params)
        # the leader holds a request until data comes or its wait ends: no longer than until a
        # partition left out is due (else it would wait for that, up to replica.fetch.wait.max.ms)
        wait_ms = self.wait_ms if resume is None else min(self.wait_ms, int((resume - now) * 1000) + 1)
        req = encode_fetch_ask(self.broker.node_id, wait_ms, self.min_bytes, self.response_max_bytes, 0,
                               session_id, epoch, topics, forgotten)
        frame = await conn.send_frame(req, version=FETCH_VERSION, timeout=self.liveness_s + self.wait_ms / 1000.0)
        resp = FetchAnswer(frame)
        full = self.session.full
        self.session.answered(resp.error_code, resp.session_id)
        if resp.error_code in SESSION_ERRORS:  # the next request is full: a new session
            log.info("fetcher for leader %d: %s; starting a new fetch session", self.leader_id,
                     E.ErrorCode(resp.error_code).name)
            return
        if resp.error_code:
            raise E.for_code(resp.error_code)()
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        partitions = self.partitions
        for pd in resp.partitions():
            tp = (pd.topic, pd.partition)
            asked = sent.get(tp)  # (_unchanged, inline: once per answered partition)
            if asked is None:
                continue
            s, asked_epoch, asked_end = asked
            if partitions.get(tp) is not s or s.epoch != asked_epoch:
                continue
            lg = s.part.log
            if lg.log_end_offset != asked_end:
                continue
            if pd.error_code:
                if pd.error_code == OFFSET_OUT_OF_RANGE:
                    s.truncating = True
                s.back_off(now, self.backoff_s)
                continue
            if s.errors:
                s.errors = 0
            records = pd.records
            if records is not None and len(records):
                if tp in is_throttled:
                    quota.record(len(records))
                try:
                    lg.append_as_follower(records, now_ms=now_ms)
                except E.KafkaError as exc:
                    log.warning("%s-%d: follower append failed: %s", tp[0], tp[1], exc)
                    s.truncating = True
                    s.delay_until = now + self.backoff_s
                    continue
            st = lg.state
            hw = min(pd.high_watermark, lg.log_end_offset)
            if hw != st.high_watermark:
                st.high_watermark = hw
                st.last_stable_offset = lg.last_stable_offset(hw)
            s.part.wake_everywhere()
        session_id = self.session.session_id
        if session_id and (full or self.rehomes >= MAX_REHOMES):
            self._home_or_reconnect(session_id)

    def _home_or_reconnect(self, session_id: int) -> None:
        """After a new session (or, once it gave up, each answer): when its id says another
        worker of the leader holds it than the one of this worker's index (the leader's workers
        split the session ids as this broker's do), the connection is closed and made again (the
        next request is a full one), at most MAX_REHOMES times in a row (a leader of another
        worker count may never look home, its worker may be being replaced), then again after
        REHOME_AGAIN_S."""
        if session_shard(session_id, self.workers) == self.worker:
            self.rehomes = 0
            return
        if self.rehomes >= MAX_REHOMES:
            now = time.monotonic()
            if self.rehome_after == 0.0:
                self.rehome_after = now + REHOME_AGAIN_S
            if now < self.rehome_after:
                return
            self.rehomes, self.rehome_after = 0, 0.0
        self.rehomes += 1
        self.session.failed()
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class FetcherManager:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.count = max(1, broker.config.get_int("num.replica.fetchers"))
        self.quota = ReplicationQuota(broker.config.get_int("follower.replication.throttled.rate"))
        self.fetchers: dict[tuple[int, int, str, int], ReplicaFetcher] = {}
        self.assigned: dict[TP, tuple[int, int, str, int]] = {}

    def add(self, tp: TP, part: Any, leader_id: int, host: str, port: int, epoch: int) -> None:
        self.remove(tp)
        key = (leader_id, zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.count, host, port)
        f = self.fetchers.get(key)
        if f is None:
            f = self.fetchers[key] = ReplicaFetcher(self.broker, leader_id, host, port, self.quota)
        f.add(tp, part, epoch)
        self.assigned[tp] = key

    def remove(self, tp: TP) -> None:
        key = self.assigned.pop(tp, None)
        if key is not None and key in self.fetchers:
            self.fetchers[key].remove(tp)

    async def close(self) -> None:
        for f in list(self.fetchers.values()):
            await f.close()
        self.fetchers.clear()
        self.assigned.clear()
