"""`kafkafast topics`: kafka-topics.sh's flags — create, list, describe, alter, delete."""
from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from kafkafast.cli.common import (CommandError, add_bootstrap, add_output, parse_kv, parser_for, print_json,
                                  run_admin)
from kafkafast.client.admin import RESOURCE_TOPIC, SOURCE_DYNAMIC_TOPIC

NAME = "topics"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "create, list, describe, alter and delete topics (kafka-topics.sh flags)", [
        "kafkafast topics --bootstrap-server 127.0.0.1:9092 --create --topic events --partitions 6 "
        "--replication-factor 1 --config retention.ms=86400000",
        "kafkafast topics --bootstrap-server 127.0.0.1:9092 --describe --topic events",
    ])
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for flag in ("create", "list", "describe", "alter", "delete"):
        action.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--topic", help="topic name (describe/list: a name filter; --delete accepts a comma list)")
    p.add_argument("--partitions", type=int, help="--create: partition count (default: the broker's num.partitions); "
                                                  "--alter: the new, larger count")
    p.add_argument("--replication-factor", type=int, default=-1, help="--create: replicas per partition")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="--create: topic config")
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error when the topic exists")
    p.add_argument("--if-exists", action="store_true", help="--alter/--delete: no error when it does not")
    p.add_argument("--exclude-internal", action="store_true", help="--list/--describe: leave out internal topics")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is smaller than their replica set")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is smaller than min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is exactly min.insync.replicas")
    p.add_argument("--unavailable-partitions", action="store_true", help="--describe: only partitions without a leader")
    add_output(p)


def run(args: argparse.Namespace) -> int:
    if (args.create or args.alter) and not args.topic:
        raise CommandError("--topic is required")
    if args.create:
        configs = parse_kv(args.config, "--config")

        async def create(admin: Any) -> bool:
            if args.if_not_exists and args.topic in await _existing(admin):
                return False  # Kafka's tool: nothing to do, nothing printed
            await admin.create_topics([(args.topic, args.partitions or -1, configs)],
                                      replication_factor=args.replication_factor, exist_ok=args.if_not_exists)
            return True
        if run_admin(args, create):
            print(f"Created topic {args.topic}.")
        return 0
    if args.delete:
        if not args.topic:
            raise CommandError("--topic is required")

        async def delete(admin: Any) -> list[str]:
            names = [n for n in await _existing(admin) if _matches(n, args.topic)]
            if not names and not args.if_exists:
                raise CommandError(f"Topic '{args.topic}' does not exist as expected")
            if names:
                await admin.delete_topics(names, missing_ok=args.if_exists)
            return names
        for n in run_admin(args, delete):
            print(f"Deleted topic {n}.")
        return 0
    if args.alter:
        if args.partitions is None:
            raise CommandError("--alter needs --partitions")

        async def alter(admin: Any) -> None:
            await admin.create_partitions(args.topic, args.partitions)
        run_admin(args, alter)
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
        return 0
    if args.list:
        async def listing(admin: Any) -> list[str]:
            return [d.name for d in await admin.describe_topics(include_internal=not args.exclude_internal)]
        names = [n for n in run_admin(args, listing) if _matches(n, args.topic)]
        if args.output == "json":
            print_json(names)
        else:
            for n in names:
                print(n)
        return 0
    return _describe(args)


async def _existing(admin: Any) -> list[str]:
    return [d.name for d in await admin.describe_topics(include_internal=True)]


def _matches(name: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    return any(name == p or re.fullmatch(p, name) is not None for p in pattern.split(","))


def _describe(args: argparse.Namespace) -> int:
    async def describe(admin: Any) -> tuple[list[Any], dict]:
        topics = [d for d in await admin.describe_topics(include_internal=not args.exclude_internal)
                  if _matches(d.name, args.topic)]
        if args.topic and not topics and not args.if_exists:
            raise CommandError(f"Topic '{args.topic}' does not exist")
        configs = await admin.describe_config_entries([(RESOURCE_TOPIC, d.name) for d in topics]) if topics else {}
        return topics, configs

    topics, configs = run_admin(args, describe)
    filtered = _partition_filter(args)
    doc = []
    for d in topics:
        entries = configs.get((RESOURCE_TOPIC, d.name), [])
        overrides = {e.name: e.value for e in entries if e.source == SOURCE_DYNAMIC_TOPIC}
        min_isr = next((int(e.value) for e in entries if e.name == "min.insync.replicas" and e.value), None)
        parts = [p for p in d.partitions if filtered is None or filtered(p, min_isr)]
        if filtered is not None and not parts:
            continue
        doc.append({
            "topic": d.name, "topic_id": d.topic_id, "partition_count": len(d.partitions),
            "replication_factor": len(d.partitions[0].replicas) if d.partitions else 0,
            "configs": dict(sorted(overrides.items())),
            "partitions": [{"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                            "isr": list(p.isr), "offline": list(p.offline_replicas)} for p in parts],
        })
    if args.output == "json":
        print_json(doc)
        return 0
    for t in doc:
        cfg = ",".join(f"{k}={v}" for k, v in t["configs"].items())
        if filtered is None:  # a partition report (Kafka's --under-replicated-partitions & co.) has no header
            print(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partition_count']}\t"
                  f"ReplicationFactor: {t['replication_factor']}\tConfigs: {cfg}")
        for p in t["partitions"]:
            line = (f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: "
                    f"{p['leader'] if p['leader'] >= 0 else 'none'}\tReplicas: {_ids(p['replicas'])}\t"
                    f"Isr: {_ids(p['isr'])}")
            if p["offline"]:
                line += f"\tOffline: {_ids(p['offline'])}"
            print(line)
    return 0


def _partition_filter(args: argparse.Namespace) -> Callable[[Any, int | None], bool] | None:
    """The partitions a report flag asks for (several flags: any of them), as Kafka's
    TopicCommand decides them; None without a report flag (every partition, with the header)."""
    tests = []
    if args.under_replicated_partitions:
        tests.append(lambda p, m: p.leader >= 0 and len(p.isr) < len(p.replicas))
    if args.under_min_isr_partitions:
        tests.append(lambda p, m: m is not None and (p.leader < 0 or len(p.isr) < m))
    if args.at_min_isr_partitions:
        tests.append(lambda p, m: m is not None and len(p.isr) == m)
    if args.unavailable_partitions:
        tests.append(lambda p, m: p.leader < 0 or p.leader in p.offline_replicas)
    if not tests:
        return None
    return lambda p, m: any(t(p, m) for t in tests)


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)
