"""`kafkafast get-offsets`: kafka-get-offsets.sh — an offset of every matching partition
(ListOffsets): `--time -1` (latest), `-2` (earliest), `-3` (the record with the highest
timestamp) or a timestamp in ms (the first offset at or after it; partitions without one
are left out, as Kafka does). Prints `topic:partition:offset`."""
from __future__ import annotations

import argparse
import re
from typing import Any

from kafkafast.cli.common import CommandError, admin_tool_parser, run_admin
from kafkafast.client.lowlevel import list_offsets_with

NAME = "get-offsets"
NAMED_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def add_parser(sub: Any) -> None:
    p = admin_tool_parser(sub, NAME, "offsets of topic partitions by time (kafka-get-offsets.sh)", [
        "kafkafast get-offsets --bootstrap-server 127.0.0.1:9092 --topic events --time -1",
        "kafkafast get-offsets --bootstrap-server 127.0.0.1:9092 --topic-partitions 'events:0-2,orders' --time -2",
    ])
    p.add_argument("--topic", help="topic name or regular expression (default: every topic)")
    p.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    p.add_argument("--topic-partitions", metavar="PATTERN",
                   help="comma-separated topic:partitions patterns (t:0, t:0-2, t:1-, t:-3, t)")
    p.add_argument("--time", default="-1", help="-1/latest, -2/earliest, -3/max-timestamp or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")


def _time(text: str) -> int:
    if text in NAMED_TIMES:
        return NAMED_TIMES[text]
    try:
        value = int(text)
    except ValueError:
        value = -9
    if value < -3:
        raise CommandError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
                           "-3 or max-timestamp, or a specified long format timestamp")
    return value


def _filters(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(topic regex, partition test) pairs."""
    if args.topic_partitions:
        if args.topic or args.partitions:
            raise CommandError("--topic-partitions cannot be used with --topic or --partitions")
        out = []
        for item in args.topic_partitions.split(","):
            m = re.fullmatch(r"([^:]*)(?::(\d*)(?:(-)(\d*))?)?", item.strip())
            if m is None or not (m.group(1) or m.group(2)):
                raise CommandError(f"Invalid topic-partition pattern: {item}")
            topic, lo, dash, hi = m.group(1) or ".*", m.group(2), m.group(3), m.group(4)
            if lo is None or lo == "" and not dash:
                test = lambda p: True  # noqa: E731
            elif not dash:
                test = lambda p, n=int(lo): p == n  # noqa: E731
            else:
                test = lambda p, a=int(lo or 0), b=int(hi) if hi else None: p >= a and (b is None or p < b)  # noqa: E731
            out.append((topic, test))
        return out
    wanted = None
    if args.partitions:
        try:
            wanted = {int(p) for p in args.partitions.split(",")}
        except ValueError:
            raise CommandError(f"--partitions expects partition ids, got {args.partitions!r}") from None
    return [(args.topic or ".*", lambda p: wanted is None or p in wanted)]


def run(args: argparse.Namespace) -> int:
    ts = _time(args.time)
    filters = _filters(args)

    async def offsets(admin: Any) -> dict[tuple[str, int], int]:
        topics = await admin.describe_topics(include_internal=not args.exclude_internal_topics)
        tps = [(d.name, p.partition) for d in topics for p in d.partitions
               if any(re.fullmatch(t, d.name) and test(p.partition) for t, test in filters)]
        if not tps:
            raise CommandError("Could not match any topic-partitions with the specified filters")
        admin.cluster.add_topics({t for t, _ in tps})
        return {tp: off for tp, (off, _) in (await list_offsets_with(admin.cluster, tps, ts)).items()}

    for (topic, partition), offset in sorted(run_admin(args, offsets).items(), key=lambda kv: f"{kv[0][0]}-{kv[0][1]}"):
        if offset >= 0:
            print(f"{topic}:{partition}:{offset}")
    return 0
