"""The checker: what the producers were told (delivery reports) against what the cluster
holds after healing (the read-back of every partition from offset 0).

- lost: acknowledged, and the value is nowhere in the read-back although its partition was
  read up to the high watermark (or at least past the acknowledged offset);
- unreadable: acknowledged, not read, and its offset lies where the read-back of its
  partition stopped short (a fetch error, or no progress before the high watermark);
- duplicates: extra copies of a value in the read-back;
- divergent: a (partition, offset) acknowledged with two different values;
- misplaced: acknowledged at one offset, read back at another (Kafka never moves a record);
- order: per partition, a producer's records read back out of their send order;
- unavailability: per partition, the longest time without an acknowledgement while the
  load ran (windows longer than `window_s` are listed).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable

from tests.nemesis.load import Ack, ReadBack


@dataclass
class Verdict:
    acked: int = 0
    delivery_errors: int = 0
    lost: int = 0
    unreadable: int = 0
    duplicates: int = 0
    divergent: int = 0
    misplaced: int = 0
    out_of_order: int = 0
    max_unavailable_s: float = 0.0
    unavailable_windows: list[tuple[int, float, float]] = field(default_factory=list)  # (partition, from_s, length_s)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _seq(value: str) -> tuple[str, int]:
    producer, _, seq = value.rpartition("-")
    return producer, int(seq)


def check(acks: Iterable[Ack], read: ReadBack, *, delivery_errors: int = 0, load_start: float, load_end: float,
          window_s: float = 5.0) -> Verdict:
    acks = list(acks)
    v = Verdict(acked=len(acks), delivery_errors=delivery_errors)
    ex: dict[str, list[str]] = defaultdict(list)
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, records in read.records.items():
        for offset, value in records:
            where[value].append((p, offset))
    copies = Counter({value: len(places) for value, places in where.items()})
    v.duplicates = sum(n - 1 for n in copies.values() if n > 1)
    ex["duplicates"] = [f"{value} at {where[value]}" for value, n in copies.items() if n > 1][:5]

    by_offset: dict[tuple[int, int], set[str]] = defaultdict(set)
    for a in acks:
        if a.offset is not None:  # (a delivery report may come without an offset: librdkafka's
            by_offset[(a.partition, a.offset)].add(a.value)  # OFFSET_INVALID, e.g. for a retried batch)
        if a.value in where:
            placed = (a.partition, a.offset) in where[a.value] if a.offset is not None else \
                any(p == a.partition for p, _ in where[a.value])
            if not placed:
                v.misplaced += 1
                ex["misplaced"].append(f"{a.value} acked p{a.partition}@{a.offset}, read at {where[a.value]}")
            continue
        stop = read.unreadable_from.get(a.partition)
        if stop is not None and a.offset is not None and a.offset >= stop:
            v.unreadable += 1
            ex["unreadable"].append(f"{a.value} p{a.partition}@{a.offset} (read stopped at {stop})")
        else:
            v.lost += 1
            ex["lost"].append(f"{a.value} p{a.partition}@{a.offset} (high watermark "
                              f"{read.high_watermarks.get(a.partition)})")
    for (p, offset), values in by_offset.items():
        if len(values) > 1:
            v.divergent += 1
            ex["divergent"].append(f"p{p}@{offset}: {sorted(values)}")

    for p, records in read.records.items():
        last: dict[str, int] = {}
        for _, value in records:
            producer, seq = _seq(value)
            if seq < last.get(producer, -1):
                v.out_of_order += 1
                ex["out_of_order"].append(f"p{p}: {value} after {producer}-{last[producer]:08d}")
            last[producer] = max(seq, last.get(producer, -1))

    times: dict[int, list[float]] = defaultdict(list)
    for a in acks:
        times[a.partition].append(a.at)
    for p in read.high_watermarks:
        marks = [load_start] + sorted(t for t in times[p] if load_start <= t <= load_end) + [load_end]
        for before, after in zip(marks, marks[1:]):
            gap = after - before
            v.max_unavailable_s = max(v.max_unavailable_s, round(gap, 1))
            if gap > window_s:
                v.unavailable_windows.append((p, round(before - load_start, 1), round(gap, 1)))
    v.examples = {k: items[:5] for k, items in ex.items() if items}
    return v


def acks_all_targets_met(v: Verdict) -> bool:
    return v.lost == 0 and v.unreadable == 0 and v.duplicates == 0 and v.divergent == 0
