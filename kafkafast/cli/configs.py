"""`kafkafast configs`: kafka-configs.sh — describe and alter topic and broker configs.

Configs are altered with IncrementalAlterConfigs (SET / DELETE). Topic configs live in the
broker's topic file (in ZooKeeper in cluster mode); broker configs Kafka changes at run time
(the log-level defaults, the connection quotas) are dynamic broker configs, for one broker
(`--entity-name ID`, sent to that broker) or the cluster-wide default (`--entity-default`
or an empty name), kept in the log dir (in ZooKeeper in cluster mode); --describe shows
every config with its source, the others are read-only and --alter of them answers the
broker's INVALID_REQUEST."""
from __future__ import annotations

import argparse
from typing import Any

from kafkafast.cli.common import (CommandError, add_bootstrap, add_output, parse_kv, parser_for, print_json,
                                  print_table, run_admin)

NAME = "configs"
ENTITY_TYPES = {"topics": 2, "brokers": 4}


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "describe and alter topic and broker configs (kafka-configs.sh flags)", [
        "kafkafast configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name events "
        "--alter --add-config retention.ms=3600000,cleanup.policy=[compact,delete]",
        "kafkafast configs --bootstrap-server 127.0.0.1:9092 --entity-type brokers --entity-name 0 --describe --all",
    ])
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), help="topics or brokers")
    p.add_argument("--entity-name", help="topic name or broker id")
    p.add_argument("--topic", help="same as --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="same as --entity-type brokers --entity-name ID")
    p.add_argument("--entity-default", action="store_true",
                   help="brokers: the cluster-wide default (dynamic configs of every broker without its own)")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="--alter: set keys (a list value in brackets: k=[a,b])")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                   help="--alter: return keys to their defaults")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only the overrides")
    add_output(p)


def _entity(args: argparse.Namespace) -> tuple[int, str]:
    if args.topic:
        return ENTITY_TYPES["topics"], args.topic
    if args.broker is not None:
        return ENTITY_TYPES["brokers"], args.broker
    if args.entity_default:
        if args.entity_type != "brokers" or args.entity_name is not None:
            raise CommandError("--entity-default goes with --entity-type brokers and no --entity-name")
        return ENTITY_TYPES["brokers"], ""
    if not args.entity_type:
        raise CommandError("--entity-type (or --topic / --broker) is required")
    if args.entity_name is None and args.entity_type == "topics":
        raise CommandError("--entity-name is required for topics")
    return ENTITY_TYPES[args.entity_type], args.entity_name or ""


def run(args: argparse.Namespace) -> int:
    from kafkafast.client.admin import SOURCE_DEFAULT, SOURCE_NAMES, SOURCE_STATIC_BROKER

    rtype, name = _entity(args)
    kind = "topic" if rtype == 2 else "broker"
    if args.alter:
        sets = parse_kv(args.add_config, "--add-config", comma_list=True)
        deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
        if not sets and not deletes:
            raise CommandError("--alter needs --add-config or --delete-config")

        async def alter(admin: Any) -> None:
            await admin.alter_configs(rtype, name, set_configs=sets, delete_configs=deletes)
        run_admin(args, alter)
        print(f"Completed updating config for {kind} {name or '<default>'}.")
        return 0

    async def describe(admin: Any) -> list[Any]:
        target = name
        if rtype == 4 and not target and not args.entity_default:
            target = str((await admin.describe_cluster()).controller_id)
        return (await admin.describe_config_entries([(rtype, target)]))[(rtype, target)]

    entries = run_admin(args, describe)
    # Overrides: a topic's own configs; for a broker, what its properties file sets.
    shown = [e for e in entries if args.all or e.source not in (SOURCE_DEFAULT,)
             and (rtype == 4 or e.source not in (SOURCE_STATIC_BROKER,))]
    if args.output == "json":
        print_json([{"name": e.name, "value": None if e.sensitive else e.value, "source": SOURCE_NAMES.get(e.source),
                     "read_only": e.read_only, "sensitive": e.sensitive} for e in shown])
        return 0
    label = "Dynamic configs" if not args.all else "All configs"
    print(f"{label} for {kind} {name}{' (overrides)' if not args.all and rtype == 2 else ''} are:")
    print_table(["NAME", "VALUE", "SOURCE"], [(e.name, "(sensitive)" if e.sensitive else e.value,
                                                SOURCE_NAMES.get(e.source, e.source)) for e in shown])
    return 0
