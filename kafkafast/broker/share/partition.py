"""One share-partition: the delivery state of a topic partition's records for one share group.

As Kafka 4.2's `SharePartition`: the share-partition start offset (SPSO) is the first offset
not yet acknowledged or archived; the end offset (SPEO) the first offset never acquired. The
records in between are in flight, each with a state and a delivery count:

    Available --acquire--> Acquired --accept--> Acknowledged
        ^                     |  --reject / gap--> Archived
        +--release / lock timeout (delivery count below the limit; else Archived)

Acquisition takes the Available in-flight records first, then new ones from the log, whole
batches at a time, and stops once `max_records` are acquired or once
`group.share.partition.max.record.locks` records are in flight; either way the batch in
progress is finished (as Kafka's `SharePartition` acquires up to the end of the log batch
holding the last record within both limits), so the records in flight may pass the lock limit
by less than one batch, and no batch is acquired in pieces (each piece would be answered with
the whole batch's bytes again). Control batches (transaction markers) and offsets missing from the log
(compacted away) are archived as they are passed. Each acquisition holds a lock for the
group's record lock duration; when it expires, the records still acquired under it become
Available again (or Archived at the delivery count limit). When the records from the SPSO on
are acknowledged or archived the SPSO moves past them and they leave the in-flight map.

Only the member that acquired a record may acknowledge it (else INVALID_RECORD_STATE, and
nothing of that acknowledgement batch is applied). An acceptance, rejection or gap is final only
once the state write holding it succeeded (`confirm`): until then its records keep their former
state in `undo` and the SPSO stops before them; a failed write restores it (the member's
acquisition again, under its lock, as Kafka's SharePartition rolls back). State changes are handed to `persist` as
the offset ranges that changed; `state_batches` gives their state batches (first offset, last
offset, delivery state, delivery count), acquired records written as Available, so a restart
redelivers what was acquired and not acknowledged.

The in-flight map is a list of `InFlight` ranges, sorted and contiguous from the SPSO to the
SPEO, each of one state, delivery count, member and lock: an acquired log batch is one range,
so acquiring, accepting or releasing it costs the same whatever its record count. A range is
cut only where its records' states diverge (an acknowledgement of part of it, one type per
offset), as Kafka's in-flight batch keeps per-offset state only then; neighbours that agree
again are joined. Its size is bounded by the record-lock limit.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain, groupby
from typing import Callable, Iterable

from kafkafast.metrics import recorder as request_metrics

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4  # Kafka's RecordState ids
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3  # acknowledge types on the wire
_DONE = (ACKNOWLEDGED, ARCHIVED)

StateBatch = tuple[int, int, int, int]  # first offset, last offset, delivery state, delivery count


def _event(name: str, n: int) -> None:
    """A share-partition event for the metrics (when they are on): (event, records) for "acquired",
    "redelivered" (acquired again), "accepted", "released", "rejected", "archived" (released or
    timed out at the delivery count limit, or acknowledged as a gap) and "lock_timeouts"."""
    if request_metrics.active and n:
        request_metrics.share_event(name, n)


def overlay(base: Iterable[StateBatch], newer: Iterable[StateBatch], start_offset: int = 0) -> list[StateBatch]:
    """The state batches of `newer` laid over `base` (a later batch wins where they overlap),
    sorted, without the offsets below `start_offset`, adjacent batches of the same state and
    delivery count joined. The work is per batch, not per offset."""
    out: list[StateBatch] = []
    for a, b, s, c in chain(base, newer):
        a = max(a, start_offset)
        if a > b:
            continue
        i = bisect_left(out, a, key=_last)  # out[i:j]: the batches overlapping [a, b]
        j = bisect_right(out, b, key=_first)
        put = [(a, b, s, c)]
        if i < j and out[i][0] < a:
            put.insert(0, (out[i][0], a - 1, out[i][2], out[i][3]))
        if i < j and out[j - 1][1] > b:
            put.append((b + 1, out[j - 1][1], out[j - 1][2], out[j - 1][3]))
        out[i:j] = put
    joined: list[StateBatch] = []
    for a, b, s, c in out:
        if joined and joined[-1][1] == a - 1 and joined[-1][2] == s and joined[-1][3] == c:
            joined[-1] = (joined[-1][0], b, s, c)
        else:
            joined.append((a, b, s, c))
    return joined


def _first(batch: StateBatch) -> int:
    return batch[0]


def _last(batch: StateBatch) -> int:
    return batch[1]


class InvalidRecordState(Exception):
    """An acknowledgement of records that are not acquired by this member."""


class InFlight:
    """The in-flight records first..last, all of one state and delivery count, and while
    acquired, of one member and acquisition lock (`token`). `undo`: (state, count, member,
    token) before an acknowledgement (accept, reject, gap) whose state write is not yet
    confirmed, restored if it fails."""
    __slots__ = ("first", "last", "state", "count", "member", "token", "undo")

    def __init__(self, first: int, last: int, state: int, count: int, member: str | None = None,
                 token: int = 0, undo: tuple[int, int, str | None, int] | None = None) -> None:
        self.first, self.last, self.state, self.count = first, last, state, count
        self.member, self.token, self.undo = member, token, undo

    def __repr__(self) -> str:
        return f"InFlight({self.first}-{self.last}, state={self.state}, count={self.count}, member={self.member!r})"

    def persisted_state(self) -> int:
        return AVAILABLE if self.state == ACQUIRED else self.state

    def same(self, other: "InFlight") -> bool:
        return (self.state == other.state and self.count == other.count and self.member == other.member
                and self.token == other.token and self.undo == other.undo)


def _entry_first(entry: InFlight) -> int:
    return entry.first


class SharePartition:
    __slots__ = ("group_id", "topic", "partition", "start_offset", "end_offset", "inflight", "state_epoch",
                 "leader_epoch", "topic_id", "persist", "_token", "_cut_any", "locks", "unconfirmed")

    def __init__(self, group_id: str, topic: str, partition: int, start_offset: int,
                 batches: Iterable[StateBatch] = (), state_epoch: int = 0,
                 persist: Callable[["SharePartition", list[tuple[int, int]]], None] | None = None) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.state_epoch = state_epoch
        self.leader_epoch = 0  # the partition's leader epoch it was loaded at...
        self.topic_id = b""  # ...and the topic id (a topic deleted and created again has a new one)
        self.persist = persist
        self._token = 0
        self._cut_any = False
        self.locks: set[int] = set()  # the acquisition locks not expired yet
        self.unconfirmed: list[tuple[int, int]] = []  # acknowledged since the last state write (`take_unconfirmed`)
        stored = overlay((), batches, start_offset)
        self.end_offset = max([start_offset] + [b + 1 for _, b, _, _ in stored])
        self.inflight: list[InFlight] = []
        at = start_offset
        for a, b, s, c in stored:
            if a > at:  # offsets the persisted batches skipped: never delivered
                self.inflight.append(InFlight(at, a - 1, AVAILABLE, 0))
            self.inflight.append(InFlight(a, b, s if s in _DONE else AVAILABLE, c))
            at = b + 1
        self._advance()

    # -- the in-flight ranges ------------------------------------------------------------------
    def _cut(self, off: int) -> int:
        """Makes an in-flight range start at `off` (splitting the one holding it); its index
        (0 at or below the SPSO, the number of ranges at or past the SPEO)."""
        fl = self.inflight
        if off >= self.end_offset:
            return len(fl)
        if off <= self.start_offset:
            return 0
        i = bisect_right(fl, off, key=_entry_first) - 1
        e = fl[i]
        if e.first == off:
            return i
        fl.insert(i + 1, InFlight(off, e.last, e.state, e.count, e.member, e.token, e.undo))
        e.last = off - 1
        self._cut_any = True
        return i + 1

    def _overlapping(self, a: int, b: int) -> list[InFlight]:
        """The in-flight ranges holding any of the offsets a..b, uncut."""
        fl = self.inflight
        i = max(bisect_right(fl, a, key=_entry_first) - 1, 0)
        j = bisect_right(fl, b, key=_entry_first)
        return fl[i:j]

    def _join(self) -> None:
        """Joins neighbouring ranges that agree again (after cuts)."""
        if not self._cut_any:
            return
        self._cut_any = False
        joined: list[InFlight] = []
        for e in self.inflight:
            if joined and joined[-1].same(e):
                joined[-1].last = e.last
            else:
                joined.append(e)
        self.inflight = joined

    def _append(self, n: int, state: int, count: int, member: str | None = None, token: int = 0) -> InFlight:
        e = InFlight(self.end_offset, self.end_offset + n - 1, state, count, member, token)
        self.inflight.append(e)
        self.end_offset += n
        return e

    # -- acquisition ---------------------------------------------------------------------------
    def next_candidate(self) -> int | None:
        """The first offset acquisition would look at: an Available in-flight record, else the end offset."""
        for e in self.inflight:
            if e.state == AVAILABLE:
                return e.first
        return self.end_offset

    def holds_acquired(self) -> bool:
        return any(e.state == ACQUIRED for e in self.inflight)

    def in_flight(self) -> int:
        """The records holding record locks (`group.share.partition.max.record.locks`), those
        acknowledged but not yet confirmed counted free (as they are once confirmed)."""
        return self.end_offset - self.write_start_offset()

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int, bool]], max_records: int, max_locks: int,
                first_offset: int) -> tuple[list[tuple[int, int, int]], int, list[int]]:
        """Acquires records of the log's `batches` ((base offset, last offset, is control), from
        the one holding `first_offset` on) for `member_id`. Returns the acquired ranges
        ((first, last, delivery count), contiguous and of one delivery count), the lock token,
        and the indexes of the batches that hold acquired records. `batches` is taken lazily:
        no batch is taken after `max_records` are acquired or once the record-lock limit stops
        the acquisition (later batches could add nothing), so a caller may read the log as it goes."""
        self._token += 1
        token = self._token
        ranges: list[list[int]] = []
        used: list[int] = []
        acquired = 0
        expected = first_offset
        changed: list[tuple[int, int]] = []
        walk = iter(batches)
        i = -1
        while acquired < max_records:
            batch = next(walk, None)
            if batch is None:
                break
            i += 1
            base, last, control = batch
            took: list[InFlight] = []
            if expected <= self.end_offset < base:  # offsets missing from the log: archived
                n = min(base - self.end_offset, max_locks - self.in_flight())
                if n > 0:
                    e = self._append(n, ARCHIVED, 0)
                    changed.append((e.first, e.last))
            lo = max(base, first_offset)
            if lo < self.end_offset:  # records in flight: the Available ones are taken
                hi = min(last, self.end_offset - 1)
                start, stop = self._cut(lo), self._cut(hi + 1)
                for e in self.inflight[start:stop]:
                    if e.state != AVAILABLE:
                        continue
                    if control:
                        e.state = ARCHIVED
                    else:
                        e.state, e.count, e.member, e.token = ACQUIRED, e.count + 1, member_id, token
                        took.append(e)
                    changed.append((e.first, e.last))
            if lo <= self.end_offset <= last:  # new records: the rest of the batch, if begun below the limit
                n = last - self.end_offset + 1 if self.in_flight() < max_locks else 0
                if n > 0:
                    if control:
                        e = self._append(n, ARCHIVED, 0)
                    else:
                        e = self._append(n, ACQUIRED, 1, member_id, token)
                        took.append(e)
                    changed.append((e.first, e.last))
            for e in took:
                acquired += e.last - e.first + 1
                if ranges and ranges[-1][1] == e.first - 1 and ranges[-1][2] == e.count:
                    ranges[-1][1] = e.last
                else:
                    ranges.append([e.first, e.last, e.count])
            if took:
                used.append(i)
            expected = last + 1
            if self.end_offset <= last:
                break  # the record-lock limit stopped it inside this batch: later batches add nothing
        if ranges:
            self.locks.add(token)
        if changed:
            self._join()
            self._advance()
            self._persist(changed)
        if request_metrics.active:
            _event("acquired", acquired)
            _event("redelivered", sum(b - a + 1 for a, b, c in ranges if c > 1))
        return [(a, b, c) for a, b, c in ranges], token, used

    # -- release and acknowledgement --------------------------------------------------------
    def release_lock(self, member_id: str, token: int, ranges: Iterable[tuple[int, int, int]], limit: int) -> int:
        """The lock of acquisition `token` (its acquired `ranges`) expired: its records still
        acquired under it go back. Returns how many did."""
        self.locks.discard(token)
        held = {id(e): e for a, b, _ in ranges for e in self._overlapping(a, b)
                if e.state == ACQUIRED and e.token == token and e.member == member_id}
        n = self._release_all(list(held.values()), limit)
        _event("lock_timeouts", n)
        return n

    def release_member(self, member_id: str, limit: int) -> int:
        """The member left (or closed its share session): everything it holds goes back."""
        return self._release_all([e for e in self.inflight if e.state == ACQUIRED and e.member == member_id], limit)

    def _release_all(self, entries: list[InFlight], limit: int) -> int:
        n = 0
        for e in entries:
            self._release(e, limit)
            n += e.last - e.first + 1
        if entries:
            self._cut_any = True  # released neighbours may agree now
            changed = [(e.first, e.last) for e in entries]
            self._join()
            self._advance()
            self._persist(changed)
        return n

    @staticmethod
    def _release(e: InFlight, limit: int) -> None:
        e.state = ARCHIVED if e.count >= limit else AVAILABLE
        e.member = None
        e.token = 0
        _event("archived" if e.state == ARCHIVED else "released", e.last - e.first + 1)

    def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]], limit: int,
                    released: list[int]) -> None:
        """Applies acknowledgement batches (first, last, types: one for the range or one per
        offset); `released[0]` counts the records made Available again. Raises InvalidRecordState,
        applying none of a batch that names a record not acquired by the member (batches before
        it stay applied)."""
        changed: list[tuple[int, int]] = []
        try:
            for first, last, types in batches:
                if last < first or (len(types) != 1 and len(types) != last - first + 1):
                    raise InvalidRecordState(f"acknowledgement batch {first}-{last} with {len(types)} types")
                runs = self._runs(first, last, types, member_id)
                for a, b, kind in runs:
                    start, stop = self._cut(a), self._cut(b + 1)
                    for e in self.inflight[start:stop]:
                        n = e.last - e.first + 1
                        if kind != RELEASE:  # (a release needs no undo: acquired records are stored Available)
                            e.undo = (e.state, e.count, e.member, e.token)
                        if kind == ACCEPT:
                            e.state, e.member, e.token = ACKNOWLEDGED, None, 0
                            _event("accepted", n)
                        elif kind == RELEASE:
                            self._release(e, limit)
                            released[0] += n if e.state == AVAILABLE else 0
                        else:
                            e.state, e.member, e.token = ARCHIVED, None, 0
                            _event("rejected" if kind == REJECT else "archived", n)
                    changed.append((a, b))
                    if kind != RELEASE:
                        self.unconfirmed.append((a, b))
        finally:
            if changed:
                self._cut_any = True
                self._join()
                self._advance()
                self._persist(changed)

    def _runs(self, first: int, last: int, types: list[int], member_id: str) -> list[tuple[int, int, int]]:
        """An acknowledgement batch as runs (first, last, type) of in-flight offsets, each of one
        type; raises InvalidRecordState unless every offset named is acquired by the member (a
        gap may name offsets no longer or never in flight)."""
        if len(types) == 1:
            grouped = [(first, last, types[0])]
        else:
            grouped = []
            at = first
            for kind, same in groupby(types):
                n = sum(1 for _ in same)
                grouped.append((at, at + n - 1, kind))
                at += n
        runs = []
        for a, b, kind in grouped:
            if kind not in (GAP, ACCEPT, RELEASE, REJECT):
                raise InvalidRecordState(f"unknown acknowledge type {kind}")
            if kind == GAP:
                a, b = max(a, self.start_offset), min(b, self.end_offset - 1)
                if a > b:
                    continue
            bad = a if a < self.start_offset else b if b >= self.end_offset else next(
                (max(e.first, a) for e in self._overlapping(a, b) if e.state != ACQUIRED or e.member != member_id),
                None)
            if bad is not None:
                raise InvalidRecordState(f"offset {bad} of {self.topic}-{self.partition} is not acquired "
                                         "by this member")
            runs.append((a, b, kind))
        return runs

    # -- state ---------------------------------------------------------------------------------
    def take_unconfirmed(self) -> list[tuple[int, int]]:
        """The offset ranges acknowledged since the last call: the state write about to be made
        holds them (`confirm` them with its outcome)."""
        spans, self.unconfirmed = self.unconfirmed, []
        return spans

    def confirm(self, spans: list[tuple[int, int]], ok: bool, limit: int) -> int:
        """The state write holding the acknowledgements of `spans` succeeded (`ok`: they are
        final, and the SPSO may move past them) or failed: their records are acquired again, by
        the member and under the lock they had (redelivered when it expires; as Kafka's
        SharePartition rolls back a failed write), or released at once if that lock expired
        meanwhile. Returns how many records were released."""
        entries = {id(e): e for a, b in spans for e in self._overlapping(a, b) if e.undo is not None}
        expired = []
        for e in entries.values():
            if not ok:
                e.state, e.count, e.member, e.token = e.undo
                if e.token not in self.locks:
                    expired.append(e)
            e.undo = None
        self._cut_any = self._cut_any or bool(entries)
        self._join()
        self._advance()
        return self._release_all(expired, limit)

    def write_start_offset(self) -> int:
        """The SPSO a state write carries: past the records acknowledged or archived, those whose
        acknowledgement is not confirmed yet too (the write confirms them; the SPSO here moves
        past them only once it did)."""
        fl = self.inflight
        if not fl or fl[0].undo is None:
            return self.start_offset
        n = 0
        while n < len(fl) and fl[n].state in _DONE:
            n += 1
        return fl[n].first if n < len(fl) else self.end_offset

    def _advance(self) -> None:
        fl = self.inflight
        n = 0
        while n < len(fl) and fl[n].state in _DONE and fl[n].undo is None:
            n += 1
        if n:
            del fl[:n]
            self.start_offset = fl[0].first if fl else self.end_offset

    def reset_to(self, offset: int) -> None:
        """The log start moved past the SPSO (retention, DeleteRecords): the records before it
        are gone, and the SPSO moves on past the acknowledged or archived ones after them."""
        if offset <= self.start_offset:
            return
        del self.inflight[:self._cut(offset)]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance()
        self._persist([])

    def state_batches(self, spans: Iterable[tuple[int, int]]) -> list[StateBatch]:
        """The in-flight records of the offset ranges `spans` as state batches, acquired ones as Available."""
        return overlay((), [(max(a, e.first), min(b, e.last), e.persisted_state(), e.count)
                            for a, b in sorted(spans) for e in self._overlapping(a, b)], self.write_start_offset())

    def _persist(self, spans: list[tuple[int, int]]) -> None:
        if self.persist is not None:
            self.persist(self, spans)
        elif self.unconfirmed:  # nothing is written: nothing to wait for
            self.confirm(self.take_unconfirmed(), True, 0)
