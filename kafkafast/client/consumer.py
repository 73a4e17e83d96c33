"""The asyncio consumer: `AIOConsumer`.

    consumer = await AIOConsumer("topic", bootstrap_servers="127.0.0.1:9092", group_id="g").start()
    batches = await consumer.getmany(timeout_ms=1000)  # {TopicPartition: [ConsumerRecord]}
    await consumer.commit(); await consumer.close()

Partitions come from `assign()` or from group membership after `subscribe()` (topics, or
a regular expression matched against the cluster's topics at every metadata refresh).

Fetching: one Fetch in flight per broker, covering every assigned, unpaused partition
that broker leads whose buffer is below `max_buffered_records`. When an answer arrives
the next Fetch goes out at once (its offsets read from the batch headers), and only then
are the records decoded (all codecs, control batches skipped, by the compiled record
codec) into the buffer that `getmany`/`getone` hand out: the broker prepares the next
answer while this one is decoded, so the buffer may exceed the limit by one answer.
Corrupt data raises CorruptMessageError from `getmany` after the records before it, and
again on every call until the application seeks past it. Each partition has a `position` (next offset handed to the
application) and a fetch offset (next offset to request); seek/pause/revoke bump the
partition's epoch so data fetched before is dropped. Unknown positions are resolved from
the committed offset, else `auto_offset_reset` ("earliest", "latest", or "none", which
raises OffsetOutOfRangeError).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

from kafkafast.client.cluster import Cluster, OffsetAndMetadata, TopicPartition
from kafkafast.client.connection import BrokerConnection
from kafkafast.client.group import GroupMembership
from kafkafast.client.lowlevel import EARLIEST, LATEST, fetch_request, list_offsets_with
from kafkafast.client.records import ConsumerRecord, decode_fetched, fetched_next_offset
from kafkafast.protocol.errors import CorruptMessageError, KafkaError, OffsetOutOfRangeError, for_code

logger = logging.getLogger("kafkafast.client.consumer")

_METADATA_ERRORS = {3, 5, 6, 13, 74, 75, 100}


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any: ...
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any: ...


class _PartitionState:
    __slots__ = ("position", "fetch_offset", "paused", "epoch", "high_watermark", "committed", "in_fetch",
                 "buffered", "halted")

    def __init__(self) -> None:
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.paused = False
        self.epoch = 0
        self.high_watermark = -1
        self.committed: int | None = None
        self.in_fetch = False
        self.buffered = 0
        self.halted = False  # corrupt data at fetch_offset: not fetched until the error is raised


class AIOConsumer:
    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | list[str],
        group_id: str | None = None,
        client_id: str = "kafkafast-consumer",
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        max_poll_records: int = 500,
        partition_assignment_strategy: Iterable[str] = ("range", "roundrobin"),
        session_timeout_ms: int = 45000,
        rebalance_timeout_ms: int = 300000,
        heartbeat_interval_ms: int = 3000,
        group_instance_id: str | None = None,
        isolation_level: str = "read_uncommitted",
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        allow_auto_create_topics: bool = True,
        max_buffered_records: int = 20000,
        security: Any = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval = auto_commit_interval_ms / 1000.0
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.isolation_level = 1 if isolation_level == "read_committed" else 0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.max_buffered_records = max_buffered_records
        self.cluster = Cluster(bootstrap_servers, client_id=client_id,
                               request_timeout_ms=max(request_timeout_ms, fetch_max_wait_ms + 5000),
                               metadata_max_age_ms=metadata_max_age_ms, retry_backoff_ms=retry_backoff_ms,
                               allow_auto_topic_creation=allow_auto_create_topics,
                               security=security)  # kafkafast.security.client.ClientSecurity, or None
        self.group: GroupMembership | None = None
        if group_id is not None:
            self.group = GroupMembership(self.cluster, group_id, assignors=list(partition_assignment_strategy),
                                         session_timeout_ms=session_timeout_ms,
                                         rebalance_timeout_ms=rebalance_timeout_ms,
                                         heartbeat_interval_ms=heartbeat_interval_ms,
                                         group_instance_id=group_instance_id, retry_backoff_ms=retry_backoff_ms)
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._buffer: deque[tuple[TopicPartition, int, list[ConsumerRecord]]] = deque()
        self._buffered = 0
        self._data_ready: asyncio.Event | None = None
        self._fetch_wakeup: asyncio.Event | None = None
        self._fetch_task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()  # refreshes, connects, resets: cancelled by close()
        self._commit_task: asyncio.Task | None = None
        self._watch_task: asyncio.Task | None = None
        self._in_fetch: set[int] = set()
        self._subscription: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self._listener: Any = None
        self._user_assigned = False
        self._error: BaseException | None = None
        self._closed = False
        self._initial_topics = list(topics)
        self._started = False

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> AIOConsumer:
        self._data_ready = asyncio.Event()
        self._fetch_wakeup = asyncio.Event()
        if self._initial_topics:
            self.cluster.add_topics(self._initial_topics)
        await self.cluster.start()
        self._started = True
        if self._initial_topics:
            self.subscribe(self._initial_topics)
        loop = asyncio.get_running_loop()
        self._fetch_task = loop.create_task(self._fetch_loop())
        if self.enable_auto_commit:
            self._commit_task = loop.create_task(self._auto_commit_loop())
        return self

    async def __aenter__(self) -> AIOConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in (self._fetch_task, self._commit_task, self._watch_task, *self._background):
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        if self.group is not None:
            if self.enable_auto_commit and self.group.generation >= 0:
                try:
                    await self.commit()
                except KafkaError as exc:
                    logger.info("commit on close failed: %r", exc)
            await self.group.leave()
        await self.cluster.close()

    # -- assignment ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Reads exactly these partitions (no group rebalancing)."""
        if self._subscription or self._pattern:
            raise ValueError("assign() after subscribe(); call unsubscribe() first")
        self._user_assigned = True
        self._set_assignment({TopicPartition(*tp) for tp in partitions})

    def _set_assignment(self, tps: set[TopicPartition]) -> None:
        for tp in list(self._states):
            if tp not in tps:
                del self._states[tp]
        for tp in tps:
            if tp not in self._states:
                self._states[tp] = _PartitionState()
        self.cluster.add_topics({tp.topic for tp in tps})
        self._drop_buffered(None)
        self._wake_fetcher()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Joins the group for these topics, or for every topic matching `pattern`."""
        if self.group is None:
            raise ValueError("subscribe() needs a group_id")
        if self._user_assigned:
            raise ValueError("subscribe() after assign(); call unsubscribe() first")
        if pattern is not None:
            self._pattern = re.compile(pattern)
            self.cluster.want_all_topics = True
            self._subscription = []
        else:
            self._subscription = sorted(set(topics or ()))
            self.cluster.add_topics(self._subscription)
        self._listener = listener
        self.group.needs_rejoin = True
        if self._started and self._watch_task is None:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch_topics())
        self._wake_fetcher()

    def unsubscribe(self) -> None:
        self._subscription = []
        self._pattern = None
        self._user_assigned = False
        self._set_assignment(set())

    def subscription(self) -> set[str]:
        return set(self._subscribed_topics())

    def _subscribed_topics(self) -> list[str]:
        if self._pattern is not None:
            return sorted(t for t, info in self.cluster.topics.items()
                          if not info.is_internal and not info.error_code and self._pattern.fullmatch(t))
        return self._subscription

    async def _watch_topics(self) -> None:
        """Rejoins when the set of topics matching the pattern (or their partition counts) changes."""
        seen: tuple = ()
        while not self._closed:
            if self._pattern is not None:
                try:
                    await self.cluster.refresh_metadata()
                except KafkaError:
                    pass
            now = tuple((t, len(self.cluster.partitions_for(t) or ())) for t in self._subscribed_topics())
            if seen and now != seen and self.group is not None:
                self.group.needs_rejoin = True
            seen = now
            await asyncio.sleep(min(self.cluster.metadata_max_age or 5.0, 5.0) if self._pattern is None
                                else max(self.cluster.metadata_max_age, 0.2))

    async def _ensure_group(self) -> None:
        group = self.group
        if group is None or not group.needs_rejoin or not (self._subscription or self._pattern):
            return
        if self._pattern is not None:
            await self.cluster.refresh_metadata()
        owned = sorted(self._states)
        if owned or group.generation >= 0:
            if self.enable_auto_commit and group.generation >= 0:
                try:
                    await self.commit()
                except KafkaError as exc:
                    logger.info("commit before rebalance failed: %r", exc)
            await self._call_listener("on_partitions_revoked", set(owned))
        self._set_assignment(set())
        topics = self._subscribed_topics()
        assigned = await group.join(topics, owned)
        self._set_assignment(set(assigned))
        await self._call_listener("on_partitions_assigned", set(assigned))

    async def _call_listener(self, name: str, tps: set[TopicPartition]) -> None:
        fn = getattr(self._listener, name, None)
        if fn is None:
            return
        result = fn(tps)
        if inspect.isawaitable(result):
            await result

    # -- positions -----------------------------------------------------------------------

    def _state(self, tp: TopicPartition | tuple[str, int]) -> _PartitionState:
        st = self._states.get(TopicPartition(*tp))
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return st

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        st = self._state(tp)
        st.position = st.fetch_offset = offset
        st.epoch += 1
        st.halted = False
        self._drop_buffered(TopicPartition(*tp))
        self._wake_fetcher()

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._seek_to(tps or tuple(self._states), EARLIEST)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._seek_to(tps or tuple(self._states), LATEST)

    async def _seek_to(self, tps: Iterable[TopicPartition], ts: int) -> None:
        offsets = await list_offsets_with(self.cluster, list(tps), ts, isolation_level=self.isolation_level)
        for tp, (off, _t) in offsets.items():
            self.seek(TopicPartition(*tp), off)

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        st = self._state(tp)
        if st.position is None:
            await self._resolve_positions()
        assert st.position is not None
        return st.position

    async def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        if self.group is None:
            raise ValueError("committed() needs a group_id")
        tp = TopicPartition(*tp)
        om = (await self.group.fetch_committed([tp])).get(tp)
        return None if om is None else om.offset

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int] | None]:
        out: dict[TopicPartition, tuple[int, int] | None] = {}
        for ts in set(timestamps.values()):
            tps = [tp for tp, t in timestamps.items() if t == ts]
            res = await list_offsets_with(self.cluster, tps, ts, isolation_level=self.isolation_level)
            for tp, (off, t) in res.items():
                out[TopicPartition(*tp)] = None if off < 0 else (off, t)
        return out

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        res = await list_offsets_with(self.cluster, list(tps), EARLIEST)
        return {TopicPartition(*tp): o for tp, (o, _t) in res.items()}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        res = await list_offsets_with(self.cluster, list(tps), LATEST, isolation_level=self.isolation_level)
        return {TopicPartition(*tp): o for tp, (o, _t) in res.items()}

    def pause(self, *tps: TopicPartition) -> None:
        for tp in tps:
            st = self._state(tp)
            st.paused = True
            st.epoch += 1
            st.fetch_offset = st.position
            self._drop_buffered(TopicPartition(*tp))

    def resume(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._state(tp).paused = False
        self._wake_fetcher()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._states.items() if st.paused}

    async def _resolve_positions(self) -> None:
        missing = [tp for tp, st in self._states.items() if st.position is None]
        if not missing:
            return
        if self.group is not None:
            committed = await self.group.fetch_committed(missing)
            for tp, om in committed.items():
                st = self._states.get(tp)
                if om is not None and st is not None and st.position is None:
                    st.position = st.fetch_offset = om.offset
            missing = [tp for tp in missing if tp in self._states and self._states[tp].position is None]
        if missing:
            await self._reset(missing)

    async def _reset(self, tps: list[TopicPartition], out_of_range: bool = False) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(
                f"{'offset out of range' if out_of_range else 'no committed offset'} for {sorted(tps)} "
                f"and auto_offset_reset is none")
        ts = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        offsets = await list_offsets_with(self.cluster, tps, ts, isolation_level=self.isolation_level)
        for tp, (off, _t) in offsets.items():
            st = self._states.get(TopicPartition(*tp))
            if st is not None:
                st.position = st.fetch_offset = off
                st.epoch += 1

    # -- commits -------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commits `offsets` (default: the current positions) and waits for the answer."""
        if self.group is None:
            raise ValueError("commit() needs a group_id")
        if offsets is None:
            to_commit = {tp: OffsetAndMetadata(st.position) for tp, st in self._states.items()
                         if st.position is not None and st.position != st.committed}
        else:
            to_commit = {TopicPartition(*tp): (v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v))
                         for tp, v in offsets.items()}
        await self.group.commit(to_commit, in_group=bool(self._subscription or self._pattern))
        for tp, om in to_commit.items():
            st = self._states.get(tp)
            if st is not None:
                st.committed = om.offset

    def commit_async(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(self.commit(offsets))

    async def _auto_commit_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.auto_commit_interval)
            try:
                if self.group is not None and (self.group.generation >= 0 or self._user_assigned):
                    await self.commit()
            except KafkaError as exc:
                logger.info("auto-commit failed: %r", exc)

    # -- fetching ------------------------------------------------------------------------

    def _wake_fetcher(self) -> None:
        if self._fetch_wakeup is not None:
            self._fetch_wakeup.set()

    def _drop_buffered(self, tp: TopicPartition | None) -> None:
        if tp is None:
            self._buffer.clear()
            self._buffered = 0
            for st in self._states.values():
                st.buffered = 0
            return
        state = self._states.get(tp)
        if state is not None:
            state.buffered = 0
        keep = deque(item for item in self._buffer if item[0] != tp)
        self._buffered = sum(len(item[2]) for item in keep)
        self._buffer = keep

    async def _fetch_loop(self) -> None:
        wake = self._fetch_wakeup
        assert wake is not None
        while not self._closed:
            try:
                await self._ensure_group()
                await self._resolve_positions()
                self._send_fetches()
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRangeError as exc:
                self._error = exc
                self._data_ready.set()  # type: ignore[union-attr]
            except KafkaError as exc:
                logger.info("fetch loop: %r", exc)
                if not exc.retriable:
                    self._error = exc
                    self._data_ready.set()  # type: ignore[union-attr]
                await asyncio.sleep(self.retry_backoff)
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), 1.0 if self.group is None else
                                       min(1.0, self.group.heartbeat_interval))
            except asyncio.TimeoutError:
                pass

    def _send_fetches(self) -> None:
        if self._buffered >= self.max_buffered_records:
            return
        by_node: dict[int, dict[str, list[tuple[int, int, int]]]] = {}
        requested: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
        unknown = False
        for tp, st in self._states.items():
            if (st.paused or st.halted or st.fetch_offset is None or st.in_fetch
                    or st.buffered >= self.max_buffered_records):
                continue
            leader = self.cluster.leader_for(tp)
            if leader < 0:
                unknown = True
                continue
            if leader in self._in_fetch:
                continue
            by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
                (tp.partition, st.fetch_offset, self.max_partition_fetch_bytes))
            requested.setdefault(leader, {})[tp] = (st.epoch, st.fetch_offset)
        if unknown:
            self._spawn(self._refresh())
        for node, parts in by_node.items():
            conn = self.cluster.connection_if_open(node)
            if conn is None:
                self._spawn(self._connect(node))
                continue
            req = fetch_request(parts, max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                                max_bytes=self.fetch_max_bytes, isolation_level=self.isolation_level)
            try:
                version = conn.version(1)
                fut = conn.send_nowait(req, version)
            except KafkaError:
                continue
            self._in_fetch.add(node)
            for tp in requested[node]:
                self._states[tp].in_fetch = True
            fut.add_done_callback(functools.partial(self._on_fetch, conn=conn, node=node, version=version,
                                                    requested=requested[node]))

    def _spawn(self, coro: Any) -> None:
        """Runs `coro` in the background, held (so it is not collected while it runs) until
        it ends or close() cancels it."""
        if self._closed:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _refresh(self) -> None:
        try:
            await asyncio.sleep(self.retry_backoff)
            await self.cluster.refresh_metadata()
        except KafkaError as exc:
            logger.info("metadata refresh: %r", exc)
        self._wake_fetcher()

    async def _connect(self, node: int) -> None:
        try:
            await self.cluster.connection(node)
        except KafkaError as exc:
            logger.info("connect to %d: %r", node, exc)
            await self._refresh()  # the leader may have moved (its broker died): ask again
            return
        self._wake_fetcher()

    def _on_fetch(self, fut: asyncio.Future, conn: BrokerConnection, node: int, version: int,
                  requested: dict[TopicPartition, tuple[int, int]]) -> None:
        """Takes a Fetch answer: asks for what follows at once (the broker prepares the next
        answer while this one is decoded), then decodes the records into the buffer.

        `requested`: partition -> (epoch, fetch offset) when the request was made; a
        partition's data is used only if both still hold (no seek, revoke or failed
        decode since)."""
        self._in_fetch.discard(node)
        states = self._states
        for tp in requested:
            st = states.get(tp)
            if st is not None:
                st.in_fetch = False
        try:
            if fut.cancelled():
                return
            if fut.exception() is not None:  # the connection failed: the leaders may have moved
                self._spawn(self._refresh())
                return
            resp = conn.decode(1, version, fut.result())
            if resp.error_code:
                logger.info("fetch from %d: %s", node, for_code(resp.error_code).__name__)
                return
            todo: list[tuple[TopicPartition, _PartitionState, int, Any]] = []
            reset: list[TopicPartition] = []
            aborted: dict[TopicPartition, list] = {}  # READ_COMMITTED: the aborted transactions per partition
            aborted_of = aborted.get
            for t in resp.responses:
                topic = t.topic
                for p in t.partitions:
                    tp = TopicPartition(topic, p.partition_index)
                    st = states.get(tp)
                    if st is None or requested.get(tp) != (st.epoch, st.fetch_offset):
                        continue
                    if p.error_code:
                        if p.error_code == OffsetOutOfRangeError.code:
                            reset.append(tp)
                        elif p.error_code in _METADATA_ERRORS:
                            self._spawn(self._refresh())
                        else:
                            logger.info("fetch %s: %s", tp, for_code(p.error_code).__name__)
                        continue
                    st.high_watermark = p.high_watermark
                    start = st.fetch_offset
                    assert start is not None
                    next_offset = fetched_next_offset(p.records, start)
                    if next_offset > start:
                        st.fetch_offset = next_offset
                        todo.append((tp, st, start, p.records))
                        if p.aborted_transactions:
                            aborted[tp] = p.aborted_transactions
            if todo:
                self._send_fetches()
            got = False
            for tp, st, start, data in todo:
                records: list[ConsumerRecord] = []
                try:
                    decode_fetched(data, tp.topic, tp.partition, start, out=records, aborted=aborted_of(tp))
                except CorruptMessageError as exc:
                    # Keep the records before the bad data, and stay at it (an answer already
                    # asked for beyond it is dropped: its offset no longer matches) until the
                    # application has seen the error.
                    st.fetch_offset = records[-1].offset + 1 if records else start
                    st.halted = True
                    self._error = exc
                    got = True
                if records:
                    self._buffer.append((tp, st.epoch, records))
                    st.buffered += len(records)
                    self._buffered += len(records)
                    got = True
            if reset:
                self._spawn(self._reset_out_of_range(reset))
            if got:
                self._data_ready.set()  # type: ignore[union-attr]
        finally:
            self._wake_fetcher()

    async def _reset_out_of_range(self, tps: list[TopicPartition]) -> None:
        try:
            await self._reset(tps, out_of_range=True)
        except OffsetOutOfRangeError as exc:
            self._error = exc
            self._data_ready.set()  # type: ignore[union-attr]
        self._wake_fetcher()

    # -- handing out records -------------------------------------------------------------

    def _take(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        n = 0
        buf = self._buffer
        while buf and n < max_records:
            tp, epoch, records = buf[0]
            st = self._states.get(tp)
            if st is None or st.epoch != epoch or st.paused:
                buf.popleft()
                self._buffered -= len(records)
                if st is not None and st.epoch == epoch:
                    st.buffered -= len(records)
                continue
            room = max_records - n
            if len(records) > room:
                part, rest = records[:room], records[room:]
                buf[0] = (tp, epoch, rest)
            else:
                part = records
                buf.popleft()
            self._buffered -= len(part)
            st.buffered -= len(part)
            if part[-1].offset + 1 > (st.position or 0):
                out.setdefault(tp, []).extend(r for r in part if r.offset >= (st.position or 0)) \
                    if part[0].offset < (st.position or 0) else out.setdefault(tp, []).extend(part)
                st.position = part[-1].offset + 1
                n += len(part)
        if not buf:
            self._data_ready.clear()  # type: ignore[union-attr]
        if self._buffered < self.max_buffered_records:
            self._wake_fetcher()
        return out

    def _raise_error(self) -> None:
        """Raises the pending error; partitions halted by corrupt data are fetched again
        (and raise again, as Kafka consumers do, until the application seeks past it)."""
        err, self._error = self._error, None
        for st in self._states.values():
            st.halted = False
        self._wake_fetcher()
        assert err is not None
        raise err

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far (waiting up to timeout_ms for the first), by partition."""
        if self._error is not None:
            self._raise_error()
        limit = max_records or self.max_poll_records
        out = self._take(limit)
        if out or timeout_ms <= 0:
            return out
        ready = self._data_ready
        assert ready is not None
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            try:
                await asyncio.wait_for(ready.wait(), left)
            except asyncio.TimeoutError:
                return {}
            if self._error is not None:
                self._raise_error()
            out = self._take(limit)
            if out:
                return out

    async def getone(self) -> ConsumerRecord:
        while True:
            got = await self.getmany(timeout_ms=1000, max_records=1)
            for records in got.values():
                return records[0]

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for records in (await self.getmany(timeout_ms=1000)).values():
                for r in records:
                    yield r


__all__ = ["AIOConsumer", "RebalanceListener"]
