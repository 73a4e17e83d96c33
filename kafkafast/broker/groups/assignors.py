"""Server-side partition assignors of the consumer group protocol (KIP-848), by the names
Kafka 4.0 gives them in `group.consumer.assignors` and ConsumerGroupHeartbeat's
ServerAssignor: "uniform" and "range" (Kafka's class names are accepted in the setting).

Both take the members' subscriptions and the subscribed topics' (id, partition count) and
return each member's target assignment, topic id -> partitions.

- uniform: spreads all partitions as evenly as the subscriptions allow and is sticky: a
  member keeps what its previous target gave it as long as it stays within its share
  (partitions / members, the first `partitions % members` members may hold one more), so a
  rebalance moves only the partitions that must move.
- range: per topic, the members subscribed to it in member id order get consecutive
  ranges, the first `partitions % members` one partition more (co-partitioned topics
  land on the same member).
"""
from __future__ import annotations

from kafkafast.broker.groups.consumer_group import Assignment

UNIFORM = "uniform"
RANGE = "range"
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


def assignor_names(setting: str) -> list[str]:
    """The assignor names of a `group.consumer.assignors` value; ValueError for unknown ones."""
    out = []
    for raw in setting.split(","):
        name = CLASS_NAMES.get(raw.strip(), raw.strip())
        if not name:
            continue
        if name not in (UNIFORM, RANGE):
            raise ValueError(f"group.consumer.assignors: unknown assignor {raw.strip()!r}")
        out.append(name)
    if not out:
        raise ValueError("group.consumer.assignors is empty")
    return out


def assign(name: str, subscriptions: dict[str, list[str]], topics: dict[str, tuple[bytes, int]],
           previous: dict[str, Assignment]) -> dict[str, Assignment]:
    """Target assignment of every member (member id -> topic id -> partitions)."""
    if name == RANGE:
        return _range(subscriptions, topics)
    return _uniform(subscriptions, topics, previous)


def _range(subscriptions: dict[str, list[str]], topics: dict[str, tuple[bytes, int]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {m: {} for m in subscriptions}
    for topic, (tid, count) in sorted(topics.items()):
        members = sorted(m for m, subs in subscriptions.items() if topic in subs)
        if not members or count <= 0:
            continue
        base, extra = divmod(count, len(members))
        start = 0
        for i, m in enumerate(members):
            n = base + (1 if i < extra else 0)
            if n:
                out[m][tid] = set(range(start, start + n))
            start += n
    return out


def _uniform(subscriptions: dict[str, list[str]], topics: dict[str, tuple[bytes, int]],
             previous: dict[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    out: dict[str, Assignment] = {m: {} for m in members}
    if not members:
        return out
    eligible: dict[tuple[bytes, int], list[str]] = {}
    for topic, (tid, count) in sorted(topics.items()):
        subscribers = [m for m in members if topic in subscriptions[m]]
        if subscribers:
            for p in range(count):
                eligible[(tid, p)] = subscribers
    total = len(eligible)
    base, extra = divmod(total, len(members))
    counts = dict.fromkeys(members, 0)
    taken: set[tuple[bytes, int]] = set()
    # Sticky pass: each member keeps up to `base` of its previous partitions, then (while
    # the extra slots last) one more.
    for limit_extra in (False, True):
        for m in members:
            for tid, parts in sorted(previous.get(m, {}).items()):
                for p in sorted(parts):
                    tp = (tid, p)
                    if tp in taken or m not in eligible.get(tp, ()):
                        continue
                    cap = base + (1 if limit_extra and extra > 0 else 0)
                    if counts[m] >= cap:
                        break
                    if limit_extra and counts[m] == base:
                        extra -= 1
                    taken.add(tp)
                    counts[m] += 1
                    out[m].setdefault(tid, set()).add(p)
    # The rest goes to the eligible member holding the fewest.
    for tp, subscribers in eligible.items():
        if tp in taken:
            continue
        m = min(subscribers, key=lambda x: (counts[x], x))
        counts[m] += 1
        out[m].setdefault(tp[0], set()).add(tp[1])
    return out
