"""The share-partition's in-flight ranges (kafkafast/broker/share/partition.py) against a model
that keeps one state per offset: seeded random sequences of appends to the log, acquisitions,
acknowledgements (accept, release, reject, gap; one type per batch or one per offset; valid and
invalid), lock timeouts, members leaving and log-start moves. After every step the ranges must
be sorted, disjoint and cover [start offset, end offset) exactly, the first one not done, an
acquired range must name its member and lock, and every offset's state, delivery count and
member must be the model's; the persisted state batches must give the model's states back
(acquired as Available), and a share-partition loaded from them must hold the same."""
from __future__ import annotations

import random

import pytest

from kafkafast.broker.share.partition import (ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, REJECT,
                                              RELEASE, InvalidRecordState, SharePartition)

LIMIT = 3  # delivery count limit
DONE = (ACKNOWLEDGED, ARCHIVED)


class Model:
    """The share-partition, offset by offset: offset -> [state, delivery count, member, lock token]."""

    def __init__(self, start: int) -> None:
        self.start = self.end = start
        self.recs: dict[int, list] = {}

    def release(self, o: int) -> None:
        r = self.recs[o]
        r[0] = ARCHIVED if r[1] >= LIMIT else AVAILABLE
        r[2], r[3] = None, 0

    def advance(self) -> None:
        while self.start < self.end and self.recs[self.start][0] in DONE:
            del self.recs[self.start]
            self.start += 1

    def next_candidate(self) -> int:
        return next((o for o in range(self.start, self.end) if self.recs[o][0] == AVAILABLE), self.end)

    def acquire(self, member: str, token: int, batches: list[tuple[int, int, bool]], max_records: int,
                max_locks: int, first: int) -> dict[int, int]:
        got: dict[int, int] = {}
        expected = first
        for base, last, control in batches:
            if len(got) >= max_records:
                break
            for o in range(self.end, base) if expected <= self.end else ():  # missing from the log
                if self.end - self.start >= max_locks:
                    break
                self.recs[o] = [ARCHIVED, 0, None, 0]
                self.end += 1
            room = None  # new records: the rest of the batch, if it is begun below the lock limit
            for o in range(max(base, first), last + 1):
                if o >= self.end:
                    room = self.end - self.start < max_locks if room is None else room
                    if not room:
                        break
                    self.recs[o] = [AVAILABLE, 0, None, 0]
                    self.end += 1
                r = self.recs[o]
                if r[0] != AVAILABLE:
                    continue
                if control:
                    r[0] = ARCHIVED
                else:
                    r[:] = [ACQUIRED, r[1] + 1, member, token]
                    got[o] = r[1]
            expected = last + 1
            if self.end <= last:
                break
        self.advance()
        return got

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]]) -> bool:
        """Applies the batches up to the first invalid one; False when there was one."""
        ok = True
        for first, last, types in batches:
            kinds = types * (last - first + 1) if len(types) == 1 else types
            todo = []
            for o, kind in zip(range(first, last + 1), kinds):
                if kind == GAP and not self.start <= o < self.end:
                    continue
                r = self.recs.get(o) if self.start <= o < self.end else None
                if r is None or r[0] != ACQUIRED or r[2] != member:
                    ok = False
                    break
                todo.append((o, kind))
            if not ok:
                break
            for o, kind in todo:
                if kind == ACCEPT:
                    self.recs[o][:] = [ACKNOWLEDGED, self.recs[o][1], None, 0]
                elif kind == RELEASE:
                    self.release(o)
                else:
                    self.recs[o][:] = [ARCHIVED, self.recs[o][1], None, 0]
        self.advance()
        return ok

    def release_where(self, pick) -> int:
        held = [o for o, r in self.recs.items() if r[0] == ACQUIRED and pick(r)]
        for o in held:
            self.release(o)
        self.advance()
        return len(held)

    def reset_to(self, offset: int) -> None:
        if offset <= self.start:
            return
        for o in range(self.start, min(offset, self.end)):
            del self.recs[o]
        self.start, self.end = offset, max(self.end, offset)
        self.advance()


def per_offset(sp: SharePartition) -> dict[int, list]:
    out = {}
    for e in sp.inflight:
        for o in range(e.first, e.last + 1):
            out[o] = [e.state, e.count, e.member, e.token]
    return out


def check(sp: SharePartition, m: Model, where: str) -> None:
    assert (sp.start_offset, sp.end_offset) == (m.start, m.end), where
    at = sp.start_offset
    for e in sp.inflight:  # sorted, disjoint, no hole, each range of one member and lock while acquired
        assert e.first == at and e.first <= e.last, (where, sp.inflight)
        assert (e.member is not None and e.token > 0) == (e.state == ACQUIRED), (where, e)
        at = e.last + 1
    assert at == sp.end_offset, (where, sp.inflight)
    assert not sp.inflight or sp.inflight[0].state not in DONE, (where, sp.inflight)
    assert per_offset(sp) == m.recs, where
    if m.end > m.start:
        stored = sp.state_batches([(m.start, m.end - 1)])
        persisted = {o: (AVAILABLE if r[0] == ACQUIRED else r[0], r[1]) for o, r in m.recs.items()}
        assert {o: (s, c) for a, b, s, c in stored for o in range(a, b + 1)} == persisted, where
        again = SharePartition("g", "t", 0, sp.start_offset, stored)
        assert again.end_offset <= m.end
        assert {o: (r[0], r[1]) for o, r in per_offset(again).items()} == {
            o: v for o, v in persisted.items() if o < again.end_offset and (o >= again.start_offset)}, where


def run(seed: int, steps: int) -> None:
    rnd = random.Random(seed)
    log: list[tuple[int, int, bool]] = []  # (base, last, control)
    log_end = start = rnd.randrange(0, 5)
    sp, m = SharePartition("g", "t", 0, start), Model(start)
    locks: list[tuple[str, int, list[tuple[int, int, int]]]] = []
    members = ["a", "b", "c"]
    max_locks = rnd.choice([4, 10, 40])
    for step in range(steps):
        op = rnd.random()
        where = f"seed {seed} step {step} ({op:.2f})"
        if op < 0.2:  # an append: a batch, a control batch, or offsets missing (compacted away) before it
            log_end += rnd.choice([0, 0, 0, 1, 3])
            n = 1 if rnd.random() < 0.15 else rnd.randint(1, 8)
            log.append((log_end, log_end + n - 1, n == 1 and rnd.random() < 0.5))
            log_end += n
        elif op < 0.5:
            member = rnd.choice(members)
            first = sp.next_candidate()
            assert first == m.next_candidate(), where
            batches = [b for b in log if b[1] >= first]
            max_records = rnd.randint(1, 12)
            ranges, token, used = sp.acquire(member, iter(batches), max_records, max_locks, first)
            got = m.acquire(member, token, batches, max_records, max_locks, first)
            assert {o: c for a, b, c in ranges for o in range(a, b + 1)} == got, where
            assert all(a <= b for a, b, _ in ranges) and ranges == sorted(ranges), where
            assert all(any(batches[i][0] <= a <= batches[i][1] for i in used) for a, _, _ in ranges), where
            if ranges:
                locks.append((member, token, ranges))
        elif op < 0.8:
            member = rnd.choice(members)
            held = sorted(o for o, r in m.recs.items() if r[0] == ACQUIRED and r[2] == member)
            batches = []
            for _ in range(rnd.randint(1, 3)):
                if held and rnd.random() < 0.85:  # mostly records the member holds
                    a = rnd.choice(held)
                    b = a
                    while b + 1 in held and rnd.random() < 0.7:
                        b += 1
                else:  # anything near the window
                    a = rnd.randrange(max(m.start - 2, 0), m.end + 3)
                    b = a + rnd.randint(0, 3)
                if rnd.random() < 0.5:
                    types = [rnd.choice([ACCEPT, RELEASE, REJECT, GAP])]
                else:
                    types = [rnd.choice([ACCEPT, RELEASE, REJECT, GAP]) for _ in range(b - a + 1)]
                batches.append((a, b, types))
            ok = m.acknowledge(member, batches)
            try:
                sp.acknowledge(member, batches, LIMIT, [0])
                assert ok, (where, batches)
            except InvalidRecordState:
                assert not ok, (where, batches)
        elif op < 0.9 and locks:  # an acquisition lock expires
            member, token, ranges = locks.pop(rnd.randrange(len(locks)))
            n = sp.release_lock(member, token, ranges, LIMIT)
            assert n == m.release_where(lambda r: r[2] == member and r[3] == token), where
        elif op < 0.97:  # a member's session ends
            member = rnd.choice(members)
            n = sp.release_member(member, LIMIT)
            assert n == m.release_where(lambda r: r[2] == member), where
        else:  # the log start moves (retention, DeleteRecords)
            offset = rnd.randrange(m.start, m.end + 3)
            sp.reset_to(offset)
            m.reset_to(offset)
        check(sp, m, where)


@pytest.mark.parametrize("seed", range(40))
def test_in_flight_ranges_agree_with_a_per_offset_model(seed):
    run(seed, 400)


def test_an_acknowledgement_is_final_only_once_its_state_write_is_confirmed():
    """Accepted or rejected records keep their acquisition (`undo`) until the write holding the
    acknowledgement is confirmed: the SPSO moves past them only then (the write carries the SPSO
    past them, and the record-lock count frees them at once); a failed write makes them the
    member's again under the same lock, or releases them at once if that lock expired meanwhile."""
    writes: list = []
    sp = SharePartition("g", "t", 0, 0, persist=lambda _sp, spans: writes.append(spans))
    ranges, token, _ = sp.acquire("m", [(0, 9, False)], 100, 100, 0)
    assert ranges == [(0, 9, 1)]
    sp.acknowledge("m", [(0, 4, [ACCEPT])], LIMIT, [0])
    acked = sp.take_unconfirmed()
    assert (acked, sp.start_offset, sp.write_start_offset(), sp.in_flight()) == ([(0, 4)], 0, 5, 5)
    assert sp.state_batches([(0, 9)]) == [(5, 9, AVAILABLE, 1)]
    assert sp.confirm(acked, False, LIMIT) == 0
    assert [(e.first, e.last, e.state, e.member, e.token) for e in sp.inflight] == [(0, 9, ACQUIRED, "m", token)]
    sp.acknowledge("m", [(0, 4, [ACCEPT])], LIMIT, [0])
    sp.confirm(sp.take_unconfirmed(), True, LIMIT)
    assert sp.start_offset == 5
    sp.acknowledge("m", [(5, 9, [REJECT])], LIMIT, [0])
    assert sp.release_lock("m", token, ranges, LIMIT) == 0  # the lock expires while the write is out
    assert sp.confirm(sp.take_unconfirmed(), False, LIMIT) == 5
    assert [(e.first, e.last, e.state, e.count, e.member) for e in sp.inflight] == [(5, 9, AVAILABLE, 1, None)]
