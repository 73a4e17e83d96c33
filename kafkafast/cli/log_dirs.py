"""`kafkafast log-dirs`: kafka-log-dirs.sh — the log dirs of each broker with the size,
offset lag and future flag of every partition in them (DescribeLogDirs), printed as
Kafka's JSON document."""
from __future__ import annotations

import argparse
import json
from typing import Any

from kafkafast.cli.common import CommandError, admin_tool_parser, java_exception, run_admin

NAME = "log-dirs"


def add_parser(sub: Any) -> None:
    p = admin_tool_parser(sub, NAME, "describe the log dirs of brokers and the partitions in them (kafka-log-dirs.sh)", [
        "kafkafast log-dirs --bootstrap-server 127.0.0.1:9092 --describe --topic-list events,orders",
    ], describe="describe the log dirs")
    p.add_argument("--topic-list", default="", metavar="T1,T2", help="only these topics' partitions (default: all)")
    p.add_argument("--broker-list", default="", metavar="0,1,2", help="only these brokers (default: all)")


def _ids(text: str) -> list[int]:
    try:
        return [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise CommandError(f"--broker-list expects broker ids, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    topics = [t for t in args.topic_list.split(",") if t]
    asked = _ids(args.broker_list)

    async def describe(admin: Any) -> tuple[list[int], dict[int, list[Any]]]:
        registered = [b[0] for b in (await admin.describe_cluster()).brokers]
        unknown = [b for b in asked if b not in registered]
        if unknown:
            raise CommandError(f"ERROR: The given brokers do not exist from --broker-list: "
                               f"{','.join(map(str, unknown))}. Current existent brokers: "
                               f"{','.join(map(str, registered))}")
        brokers = asked or registered
        return brokers, {b: await admin.describe_log_dirs(b) for b in brokers}

    brokers, dirs = run_admin(args, describe)
    print("Querying brokers for log directories information")
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    doc = {"brokers": [{"broker": b, "logDirs": [{
        "partitions": [{"partition": f"{t}-{p}", "size": size, "offsetLag": lag, "isFuture": future}
                       for t, p, size, lag, future in d.partitions if not topics or t in topics],
        "error": java_exception(d.error_code) if d.error_code else None,
        "logDir": d.log_dir} for d in dirs[b]]} for b in brokers], "version": 1}
    print(json.dumps(doc, separators=(",", ":")))
    return 0

