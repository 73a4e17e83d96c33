"""`kafkafast configs`: kafka-configs.sh — describe and alter topic, broker and group configs.

Configs are altered with IncrementalAlterConfigs (SET / DELETE). Topic configs live in the
broker's topic file (in ZooKeeper in cluster mode); broker configs Kafka changes at run time
(the log-level defaults, the connection quotas) are dynamic broker configs, for one broker
(`--entity-name ID`, sent to that broker) or the cluster-wide default (`--entity-default`
or an empty name), kept in the log dir (in ZooKeeper in cluster mode); --describe shows
every config with its source, the others are read-only and --alter of them answers the
broker's INVALID_REQUEST. Group configs (`--entity-type groups`, resource type GROUP: the share
group ones, share.auto.offset.reset and the like) are described as Kafka 4's kafka-configs.sh
prints them: "Dynamic configs for group G are:" (with --all "All configs ...") and a line
"  name=value sensitive=false synonyms={SOURCE:name=value}" per config, the group's own
ones only without --all; every group in ListGroups without --entity-name."""
from __future__ import annotations

import argparse
import re
from typing import Any

from kafkafast.cli.common import (CommandError, add_bootstrap, add_output, parse_kv, parser_for, print_json,
                                  print_table, run_admin)
from kafkafast.client.admin import SCRAM_MECHANISMS, SOURCE_DEFAULT, SOURCE_GROUP, SOURCE_NAMES, SOURCE_STATIC_BROKER

NAME = "configs"
ENTITY_TYPES = {"topics": 2, "brokers": 4, "groups": 32}
RESOURCE_GROUP = ENTITY_TYPES["groups"]
# client quota entities (DescribeClientQuotas / AlterClientQuotas; users also have SCRAM credentials)
QUOTA_ENTITIES = {"users": "user", "clients": "client-id"}
QUOTA_KEYS = {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
DEFAULT_SCRAM_ITERATIONS = 4096


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "describe and alter topic and broker configs (kafka-configs.sh flags)", [
        "kafkafast configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name events "
        "--alter --add-config retention.ms=3600000,cleanup.policy=[compact,delete]",
        "kafkafast configs --bootstrap-server 127.0.0.1:9092 --entity-type brokers --entity-name 0 --describe --all",
        "kafkafast configs --bootstrap-server 127.0.0.1:9092 --entity-type groups --entity-name workers "
        "--alter --add-config share.auto.offset.reset=earliest",
    ])
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--entity-type", choices=sorted([*ENTITY_TYPES, *QUOTA_ENTITIES]),
                   help="topics, brokers, groups, users (quotas and SCRAM credentials) or clients (quotas)")
    p.add_argument("--entity-name", help="topic name, broker id, group id, user principal or client id")
    p.add_argument("--topic", help="same as --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="same as --entity-type brokers --entity-name ID")
    p.add_argument("--group", help="same as --entity-type groups --entity-name GROUP")
    p.add_argument("--entity-default", action="store_true",
                   help="brokers: the cluster-wide default (dynamic configs of every broker without its own); "
                        "users/clients: the default quota")
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
    if args.group is not None:
        return RESOURCE_GROUP, args.group
    if args.entity_default:
        if args.entity_type != "brokers" or args.entity_name is not None:
            raise CommandError("--entity-default goes with --entity-type brokers and no --entity-name")
        return ENTITY_TYPES["brokers"], ""
    if not args.entity_type:
        raise CommandError("--entity-type (or --topic / --broker) is required")
    if args.entity_name is None and args.entity_type == "topics":
        raise CommandError("--entity-name is required for topics")
    if args.entity_name is None and args.entity_type == "groups" and args.alter:
        raise CommandError("--entity-name (or --group) is required to alter group configs")
    return ENTITY_TYPES[args.entity_type], args.entity_name or ""


def run(args: argparse.Namespace) -> int:
    if args.entity_type in QUOTA_ENTITIES:
        return _quota_entity(args)
    rtype, name = _entity(args)
    kind = {2: "topic", 4: "broker", RESOURCE_GROUP: "group"}[rtype]
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
    if rtype == RESOURCE_GROUP:
        return _describe_groups(args, name)

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


def _describe_groups(args: argparse.Namespace, name: str) -> int:
    """kafka-configs.sh --describe --entity-type groups: each group's configs (its own, or with
    --all every one) with their synonyms, in Kafka's text."""
    async def describe(admin: Any) -> dict[str, list[Any]]:
        groups = [name] if name else [g.group_id for g in await admin.list_groups()]
        found = await admin.describe_config_entries([(RESOURCE_GROUP, g) for g in groups], synonyms=True)
        return {g: [e for e in found[(RESOURCE_GROUP, g)] if args.all or e.source == SOURCE_GROUP] for g in groups}

    described = run_admin(args, describe)
    if args.output == "json":
        print_json({g: [{"name": e.name, "value": e.value, "source": SOURCE_NAMES.get(e.source),
                         "read_only": e.read_only, "sensitive": e.sensitive} for e in entries]
                    for g, entries in described.items()})
        return 0
    for group, entries in described.items():
        print(f"{'All' if args.all else 'Dynamic'} configs for group {group} are:")
        for e in entries:
            synonyms = ", ".join(f"{SOURCE_NAMES.get(src, 'UNKNOWN')}:{n}={_java(v)}" for src, n, v in e.synonyms)
            print(f"  {e.name}={_java(e.value)} sensitive={str(e.sensitive).lower()} synonyms={{{synonyms}}}")
    return 0


def _java(value: str | None) -> str:
    """A value as Java's string concatenation writes it (null for none)."""
    return "null" if value is None else value


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (1024.0, 1.0E7), as kafka-configs prints quotas."""
    if value != 0 and not 1e-3 <= abs(value) < 1e7:
        mantissa, exp = f"{value:.16E}".split("E")
        mantissa = mantissa.rstrip("0")
        return f"{mantissa}0E{int(exp)}" if mantissa.endswith(".") else f"{mantissa}E{int(exp)}"
    return repr(float(value))


def _scram_upserts(sets: dict[str, str]) -> dict[int, tuple[int, bytes]]:
    out = {}
    for mech, text in sets.items():
        m = re.fullmatch(r"(?:iterations=(-?[0-9]*),)?password=(.*)", text, re.S)
        if m is None:
            raise CommandError(f"Invalid credential property {mech}={text}")
        iterations = int(m.group(1)) if m.group(1) not in (None, "", "-1") else DEFAULT_SCRAM_ITERATIONS
        if iterations < DEFAULT_SCRAM_ITERATIONS:
            raise CommandError(f"Iterations {iterations} is less than the minimum {DEFAULT_SCRAM_ITERATIONS} "
                               f"required for {mech}")
        out[SCRAM_MECHANISMS[mech]] = (iterations, m.group(2).encode())
    return out


def _quota_entity(args: argparse.Namespace) -> int:
    """kafka-configs.sh --entity-type users|clients: client quotas, and users' SCRAM credentials."""
    kind = QUOTA_ENTITIES[args.entity_type]
    name = None if args.entity_default else args.entity_name
    entity = {kind: name}
    if args.alter:
        if name is None and not args.entity_default:
            raise CommandError("--alter needs --entity-name or --entity-default")
        sets = parse_kv(args.add_config, "--add-config", comma_list=True)
        deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
        scram_sets = {k: v for k, v in sets.items() if k in SCRAM_MECHANISMS}
        scram_deletes = [k for k in deletes if k in SCRAM_MECHANISMS]
        allowed = QUOTA_KEYS | (set(SCRAM_MECHANISMS) if kind == "user" else set())
        unknown = [k for k in [*sets, *deletes] if k not in allowed]
        if unknown:
            what = "quota and SCRAM credential configs" if kind == "user" else "quota configs"
            raise CommandError(f"Only {what} can be altered for '{args.entity_type}'. Unexpected config names: "
                               f"{','.join(unknown)}")
        scram = bool(scram_sets or scram_deletes)
        if scram and name is None:
            raise CommandError("The use of --entity-default is not allowed with User SCRAM Credentials.")
        if scram and (len(scram_sets) + len(scram_deletes) != len(sets) + len(deletes)):
            raise CommandError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users'.")
        quotas = {}
        for k, v in sets.items():
            if k not in SCRAM_MECHANISMS:
                try:
                    quotas[k] = float(v)
                except ValueError:
                    raise CommandError(f"Cannot parse quota configuration value for {k}: {v}") from None

        async def alter(admin: Any) -> None:
            if scram:
                await admin.alter_user_scram_credentials(name, _scram_upserts(scram_sets),
                                                         [SCRAM_MECHANISMS[k] for k in scram_deletes])
            else:
                await admin.alter_client_quotas(entity, quotas, deletes)
        run_admin(args, alter)
        label = args.entity_type[:-1]
        print(f"Completed updating config for {label} {name}." if name is not None
              else f"Completed updating default config for {args.entity_type} in the cluster.")
        return 0

    async def describe(admin: Any) -> tuple[list[Any], dict[str, list[tuple[int, int]]]]:
        if name is None and not args.entity_default:
            quotas = await admin.describe_client_quotas({}, any_of=[kind])
        else:
            quotas = await admin.describe_client_quotas(entity)
        creds = {}
        if kind == "user" and not args.entity_default:
            creds = await admin.describe_user_scram_credentials(None if name is None else [name])
        return quotas, creds

    quotas, creds = run_admin(args, describe)
    names = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
    for ent, values in quotas:
        who = ", ".join(f"{ {'user': 'user-principal', 'client-id': 'client-id', 'ip': 'ip'}.get(t, t)} '{n}'"
                        if n is not None else f"the default { {'user': 'user-principal'}.get(t, t)}"
                        for t, n in ent.items())
        print(f"Quota configs for {who} are " + ", ".join(f"{k}={java_double(v)}" for k, v in values.items()))
    for user, infos in creds.items():
        print(f"SCRAM credential configs for user-principal '{user}' are "
              + ", ".join(f"{names.get(m, m)}=iterations={i}" for m, i in infos))
    return 0
