"""Partition assignors run by the group leader, under the names Java and librdkafka use.

* `range` (RangeAssignor): per topic, its partitions in order divided over the members
  subscribed to it, sorted by member id; the first `partitions % members` members get
  one extra. 5 partitions over C1-0, C1-1, C2-0 -> [0,1] [2,3] [4]; 6 -> [0,1] [2,3] [4,5].
* `roundrobin` (RoundRobinAssignor): all subscribed topic-partitions, sorted, dealt to
  the sorted members in turn (a member not subscribed to a topic is skipped for it).
* `sticky` (eager StickyAssignor): as balanced as possible (partition counts differ by
  at most one among members with the same subscription), then keeping as many
  partitions as possible where they were (owned partitions from the subscription, or
  the previous assignment in the user data).

An assignor is `assign(partitions_per_topic, subscriptions) -> {member: [(topic, p)]}`.
"""
from __future__ import annotations

from collections.abc import Callable

from kafkafast.client.consumer_protocol import Subscription, decode_sticky_user_data

TP = tuple[str, int]
Assignor = Callable[[dict[str, int], dict[str, Subscription]], dict[str, list[TP]]]


def range_assign(partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]) -> dict[str, list[TP]]:
    out: dict[str, list[TP]] = {m: [] for m in subscriptions}
    by_topic: dict[str, list[str]] = {}
    for member, sub in subscriptions.items():
        for t in sub.topics:
            by_topic.setdefault(t, []).append(member)
    for topic in sorted(by_topic):
        n = partitions_per_topic.get(topic)
        if not n:
            continue
        members = sorted(by_topic[topic])
        per, extra = divmod(n, len(members))
        for i, m in enumerate(members):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + length))
    return out


def roundrobin_assign(partitions_per_topic: dict[str, int],
                      subscriptions: dict[str, Subscription]) -> dict[str, list[TP]]:
    out: dict[str, list[TP]] = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    subscribed = {m: set(subscriptions[m].topics) for m in members}
    topics = sorted({t for s in subscribed.values() for t in s if partitions_per_topic.get(t)})
    i = 0
    for topic in topics:
        for p in range(partitions_per_topic[topic]):
            for _ in range(len(members)):
                m = members[i % len(members)]
                i += 1
                if topic in subscribed[m]:
                    out[m].append((topic, p))
                    break
    return out


def sticky_assign(partitions_per_topic: dict[str, int],
                  subscriptions: dict[str, Subscription]) -> dict[str, list[TP]]:
    members = sorted(subscriptions)
    subscribed = {m: set(subscriptions[m].topics) for m in members}
    all_tps = [(t, p) for t in sorted(partitions_per_topic)
               if any(t in s for s in subscribed.values()) for p in range(partitions_per_topic[t])]
    valid = set(all_tps)
    # Previous ownership: owned partitions (subscription v1+) or the user data; the
    # claim with the highest generation wins when two members claim one partition.
    claims: dict[TP, tuple[int, str]] = {}
    for m in members:
        sub = subscriptions[m]
        owned, generation = sub.owned_partitions, sub.generation_id
        if not owned and sub.user_data:
            owned, generation = decode_sticky_user_data(sub.user_data)
        for tp in owned:
            tp = (tp[0], tp[1])
            if tp in valid and tp[0] in subscribed[m]:
                prev = claims.get(tp)
                if prev is None or generation > prev[0]:
                    claims[tp] = (generation, m)
    assignment: dict[str, list[TP]] = {m: [] for m in members}
    for tp, (_g, m) in sorted(claims.items()):
        assignment[m].append(tp)

    def eligible(tp: TP) -> list[str]:
        return [m for m in members if tp[0] in subscribed[m]]

    # Quota when everyone could take everything: nobody above ceil(N/M).
    if members:
        total = len(all_tps)
        hi = -(-total // len(members))
        lo = total // len(members)
        n_hi = total - lo * len(members)  # members allowed to keep `hi`
        unassigned: list[TP] = [tp for tp in all_tps if tp not in claims]
        for m in sorted(members, key=lambda m: -len(assignment[m])):
            cap = hi if n_hi > 0 else lo
            if len(assignment[m]) >= hi and n_hi > 0:
                n_hi -= 1
                cap = hi
            if len(assignment[m]) > cap:
                unassigned.extend(assignment[m][cap:])
                assignment[m] = assignment[m][:cap]
        for tp in sorted(unassigned):
            cands = eligible(tp)
            if cands:
                target = min(cands, key=lambda m: (len(assignment[m]), m))
                assignment[target].append(tp)
        # Balance what subscriptions allow: move from the fullest to the emptiest member.
        for _ in range(total * 2):
            moved = False
            for src in sorted(members, key=lambda m: -len(assignment[m])):
                for tp in list(reversed(assignment[src])):
                    cands = [m for m in eligible(tp) if len(assignment[m]) + 1 < len(assignment[src])]
                    if cands:
                        dst = min(cands, key=lambda m: (len(assignment[m]), m))
                        assignment[src].remove(tp)
                        assignment[dst].append(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                break
    return {m: sorted(tps) for m, tps in assignment.items()}


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
}

__all__ = ["ASSIGNORS", "Assignor", "range_assign", "roundrobin_assign", "sticky_assign"]
