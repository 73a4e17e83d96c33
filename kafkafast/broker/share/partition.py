"""One share-partition: the delivery state of a topic partition's records for one share group.

As Kafka 4.2's `SharePartition`: the share-partition start offset (SPSO) is the first offset
not yet acknowledged or archived; the end offset (SPEO) the first offset never acquired. The
records in between are in flight, each with a state and a delivery count:

    Available --acquire--> Acquired --accept--> Acknowledged
        ^                     |  --reject / gap--> Archived
        +--release / lock timeout (delivery count below the limit; else Archived)

Acquisition takes the Available in-flight records first, then new ones from the log, whole
batches at a time, and stops once `max_records` are acquired (the batch in progress is
finished, as Kafka aligns to batch boundaries) or once `group.share.partition.max.record.locks`
records are in flight. Control batches (transaction markers) and offsets missing from the log
(compacted away) are archived as they are passed. Each acquisition holds a lock for the
group's record lock duration; when it expires, the records still acquired under it become
Available again (or Archived at the delivery count limit). When the records from the SPSO on
are acknowledged or archived the SPSO moves past them and they leave the in-flight map.

Only the member that acquired a record may acknowledge it (else INVALID_RECORD_STATE, and
nothing of that acknowledgement batch is applied). State changes are handed to `persist` as
state batches (first offset, last offset, delivery state, delivery count), acquired records
written as Available, so a restart redelivers what was acquired and not acknowledged.

The in-flight map holds one small list per record: [state, delivery count, member id, lock
token]; its size is bounded by the record-lock limit.
"""
from __future__ import annotations

from typing import Callable, Iterable

from kafkafast.metrics import recorder as request_metrics

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4  # Kafka's RecordState ids
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3  # acknowledge types on the wire

StateBatch = tuple[int, int, int, int]  # first offset, last offset, delivery state, delivery count

def _event(name: str, n: int) -> None:
    """A share-partition event for the metrics (when they are on): (event, records) for "acquired",
    "redelivered" (acquired again), "accepted", "released", "rejected", "archived" (released or
    timed out at the delivery count limit, or acknowledged as a gap) and "lock_timeouts"."""
    if request_metrics.active and n:
        request_metrics.share_event(name, n)


class InvalidRecordState(Exception):
    """An acknowledgement of records that are not acquired by this member."""


class SharePartition:
    __slots__ = ("group_id", "topic", "partition", "start_offset", "end_offset", "records", "state_epoch",
                 "leader_epoch", "persist", "_token")

    def __init__(self, group_id: str, topic: str, partition: int, start_offset: int,
                 batches: Iterable[StateBatch] = (), state_epoch: int = 0,
                 persist: Callable[["SharePartition", list[StateBatch]], None] | None = None) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, list] = {}
        self.state_epoch = state_epoch
        self.leader_epoch = 0  # the partition's leader epoch it was loaded at
        self.persist = persist
        self._token = 0
        for first, last, state, count in batches:
            for off in range(max(first, start_offset), last + 1):
                self.records[off] = [ARCHIVED if state == ARCHIVED else ACKNOWLEDGED if state == ACKNOWLEDGED
                                     else AVAILABLE, count, None, 0]
            self.end_offset = max(self.end_offset, last + 1)
        for off in range(start_offset, self.end_offset):  # offsets the persisted batches skipped: never delivered
            self.records.setdefault(off, [AVAILABLE, 0, None, 0])
        self._advance()

    # -- acquisition ---------------------------------------------------------------------------
    def next_candidate(self) -> int | None:
        """The first offset acquisition would look at: an Available in-flight record, else the end offset."""
        for off in range(self.start_offset, self.end_offset):
            if self.records[off][0] == AVAILABLE:
                return off
        return self.end_offset

    def holds_acquired(self) -> bool:
        return any(rec[0] == ACQUIRED for rec in self.records.values())

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

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
        changed: list[int] = []
        walk = iter(batches)
        i = -1
        while acquired < max_records:
            batch = next(walk, None)
            if batch is None:
                break
            i += 1
            base, last, control = batch
            took = False
            for off in range(max(expected, self.end_offset), base):  # missing from the log: archived
                if self.in_flight() >= max_locks:
                    break
                self.records[off] = [ARCHIVED, 0, None, 0]
                self.end_offset = off + 1
                changed.append(off)
            for off in range(max(base, first_offset), last + 1):
                if off >= self.end_offset:
                    if off > self.end_offset or self.in_flight() >= max_locks:
                        break
                    self.records[off] = [AVAILABLE, 0, None, 0]
                    self.end_offset = off + 1
                rec = self.records.get(off)
                if rec is None or rec[0] != AVAILABLE:
                    continue
                if control:
                    rec[0] = ARCHIVED
                    changed.append(off)
                    continue
                rec[0], rec[1], rec[2], rec[3] = ACQUIRED, rec[1] + 1, member_id, token
                changed.append(off)
                acquired += 1
                took = True
                if ranges and ranges[-1][1] == off - 1 and ranges[-1][2] == rec[1]:
                    ranges[-1][1] = off
                else:
                    ranges.append([off, off, rec[1]])
            if took:
                used.append(i)
            expected = last + 1
            if self.end_offset <= last:
                break  # the record-lock limit stopped it inside this batch: later batches add nothing
        if changed:
            self._advance()
            self._persist(changed)
        if request_metrics.active:
            _event("acquired", acquired)
            _event("redelivered", sum(b - a + 1 for a, b, c in ranges if c > 1))
        return [(a, b, c) for a, b, c in ranges], token, used

    # -- release and acknowledgement --------------------------------------------------------
    def release_lock(self, member_id: str, token: int, offsets: Iterable[int], limit: int) -> int:
        """The lock of acquisition `token` expired: its records still acquired under it go back.
        Returns how many did."""
        n = self._release_all([off for off in offsets
                               if (rec := self.records.get(off)) is not None and rec[0] == ACQUIRED
                               and rec[3] == token and rec[2] == member_id], limit)
        _event("lock_timeouts", n)
        return n

    def release_member(self, member_id: str, limit: int) -> int:
        """The member left (or closed its share session): everything it holds goes back."""
        return self._release_all([off for off, rec in self.records.items() if rec[0] == ACQUIRED and rec[2] == member_id],
                                 limit)

    def _release_all(self, changed: list[int], limit: int) -> int:
        for off in changed:
            self._release(self.records[off], limit)
        if changed:
            self._advance()
            self._persist(changed)
        return len(changed)

    @staticmethod
    def _release(rec: list, limit: int) -> None:
        rec[0] = ARCHIVED if rec[1] >= limit else AVAILABLE
        rec[2] = None
        rec[3] = 0
        _event("archived" if rec[0] == ARCHIVED else "released", 1)

    def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]], limit: int,
                    released: list[int]) -> None:
        """Applies acknowledgement batches (first, last, types: one for the range or one per
        offset); `released[0]` counts the records made Available again. Raises InvalidRecordState,
        applying none of a batch that names a record not acquired by the member (batches before
        it stay applied)."""
        changed: list[int] = []
        try:
            for first, last, types in batches:
                if last < first or (len(types) != 1 and len(types) != last - first + 1):
                    raise InvalidRecordState(f"acknowledgement batch {first}-{last} with {len(types)} types")
                for off in range(first, last + 1):
                    kind = types[0] if len(types) == 1 else types[off - first]
                    if kind not in (GAP, ACCEPT, RELEASE, REJECT):
                        raise InvalidRecordState(f"unknown acknowledge type {kind}")
                    rec = self.records.get(off)
                    if kind == GAP and (rec is None or off < self.start_offset):
                        continue
                    if rec is None or rec[0] != ACQUIRED or rec[2] != member_id:
                        raise InvalidRecordState(f"offset {off} of {self.topic}-{self.partition} is not acquired "
                                                 "by this member")
                for off in range(first, last + 1):
                    kind = types[0] if len(types) == 1 else types[off - first]
                    rec = self.records.get(off)
                    if rec is None or rec[0] != ACQUIRED:
                        continue
                    if kind == ACCEPT:
                        rec[0], rec[2], rec[3] = ACKNOWLEDGED, None, 0
                        _event("accepted", 1)
                    elif kind == RELEASE:
                        self._release(rec, limit)
                        released[0] += rec[0] == AVAILABLE
                    else:
                        rec[0], rec[2], rec[3] = ARCHIVED, None, 0
                        _event("rejected" if kind == REJECT else "archived", 1)
                    changed.append(off)
        finally:
            if changed:
                self._advance()
                self._persist(changed)

    # -- state ---------------------------------------------------------------------------------
    def _advance(self) -> None:
        off = self.start_offset
        records = self.records
        while off < self.end_offset and records[off][0] in (ACKNOWLEDGED, ARCHIVED):
            del records[off]
            off += 1
        self.start_offset = off

    def reset_to(self, offset: int) -> None:
        """The log start moved past the SPSO (retention, DeleteRecords): the records before it are gone."""
        if offset <= self.start_offset:
            return
        for off in range(self.start_offset, min(offset, self.end_offset)):
            self.records.pop(off, None)
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._persist([])

    def state_batches(self, offsets: Iterable[int] | None = None) -> list[StateBatch]:
        """The in-flight records (or those of `offsets`) as state batches, acquired ones as Available."""
        out: list[list[int]] = []
        offs = sorted(self.records) if offsets is None else sorted(o for o in set(offsets) if o in self.records)
        for off in offs:
            state, count = self.records[off][0], self.records[off][1]
            state = AVAILABLE if state == ACQUIRED else state
            if out and out[-1][1] == off - 1 and out[-1][2] == state and out[-1][3] == count:
                out[-1][1] = off
            else:
                out.append([off, off, state, count])
        return [(a, b, c, d) for a, b, c, d in out]

    def _persist(self, offsets: list[int]) -> None:
        if self.persist is not None:
            self.persist(self, self.state_batches(offsets))
