"""`kafkafast acls`: kafka-acls.sh's flags (CreateAcls / DescribeAcls / DeleteAcls).

    --add | --remove | --list
    --allow-principal P / --deny-principal P (User:name, repeatable), --allow-host H / --deny-host H
      (default * for the principals given), --principal P (a --list filter)
    --operation OP (repeatable: All, Read, Write, Create, Delete, Alter, Describe, ClusterAction,
      DescribeConfigs, AlterConfigs, IdempotentWrite; default All)
    --topic T / --group G / --transactional-id X (repeatable; `*` = every one) / --cluster
    --resource-pattern-type literal (default) | prefixed; for --list/--remove also any (every
      pattern type, the name exactly) | match (every ACL that applies to the name)
    --producer (Write, Describe, Create on the topics; IdempotentWrite on the cluster with
      --idempotent; Write, Describe on --transactional-id) / --consumer (Read, Describe on the
      topics, Read on the --group)
    --force: --remove without asking

Output follows kafka-acls.sh: the ACLs added or removed, then the resource's current ACLs.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from kafkafast.cli.common import CommandError, add_bootstrap, add_output, parser_for, print_json, run_admin
from kafkafast.client.admin import AclBinding
from kafkafast.protocol.errors import for_code
from kafkafast.security import acl as A

OPERATIONS = {"all": A.ALL, "read": A.READ, "write": A.WRITE, "create": A.CREATE, "delete": A.DELETE,
              "alter": A.ALTER, "describe": A.DESCRIBE, "clusteraction": A.CLUSTER_ACTION,
              "describeconfigs": A.DESCRIBE_CONFIGS, "alterconfigs": A.ALTER_CONFIGS,
              "idempotentwrite": A.IDEMPOTENT_WRITE, "createtokens": A.CREATE_TOKENS,
              "describetokens": A.DESCRIBE_TOKENS}
OP_NAMES = {A.ALL: "ALL", A.READ: "READ", A.WRITE: "WRITE", A.CREATE: "CREATE", A.DELETE: "DELETE",
            A.ALTER: "ALTER", A.DESCRIBE: "DESCRIBE", A.CLUSTER_ACTION: "CLUSTER_ACTION",
            A.DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS", A.ALTER_CONFIGS: "ALTER_CONFIGS",
            A.IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE", A.CREATE_TOKENS: "CREATE_TOKENS",
            A.DESCRIBE_TOKENS: "DESCRIBE_TOKENS"}
RESOURCE_NAMES = {A.TOPIC: "TOPIC", A.GROUP: "GROUP", A.CLUSTER: "CLUSTER", A.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
                  A.DELEGATION_TOKEN: "DELEGATION_TOKEN", A.USER: "USER"}
PATTERNS = {"any": A.ANY, "match": A.MATCH, "literal": A.LITERAL, "prefixed": A.PREFIXED}
PATTERN_NAMES = {A.LITERAL: "LITERAL", A.PREFIXED: "PREFIXED"}
PERMISSION_NAMES = {A.ALLOW: "ALLOW", A.DENY: "DENY"}

Resource = tuple[int, str, int]  # (resource type, name, pattern type)


def add_parser(sub: Any) -> None:
    p = parser_for(sub, "acls", "add, list and remove ACLs (kafka-acls.sh flags)", [
        "kafkafast acls --bootstrap-server 127.0.0.1:9092 --command-config admin.properties "
        "--add --allow-principal User:alice --producer --topic orders",
        "kafkafast acls --bootstrap-server 127.0.0.1:9092 --command-config admin.properties "
        "--add --allow-principal User:bob --consumer --topic orders --group billing",
        "kafkafast acls --bootstrap-server 127.0.0.1:9092 --command-config admin.properties --list --topic orders",
        "kafkafast acls --bootstrap-server 127.0.0.1:9092 --command-config admin.properties "
        "--remove --force --allow-principal User:alice --operation Write --topic orders",
    ])
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for flag in ("add", "remove", "list"):
        action.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--allow-principal", action="append", default=[], metavar="P", help="User:name (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="P", help="User:name (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="H", help="default: * (every host)")
    p.add_argument("--deny-host", action="append", default=[], metavar="H", help="default: * (every host)")
    p.add_argument("--principal", action="append", default=[], metavar="P", help="--list: only this principal's ACLs")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite (default All)")
    p.add_argument("--topic", action="append", default=[], metavar="T")
    p.add_argument("--group", action="append", default=[], metavar="G")
    p.add_argument("--transactional-id", action="append", default=[], metavar="X")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", type=str.lower, choices=tuple(PATTERNS), default=None,
                   help="literal (default) or prefixed; --list/--remove also any, match")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
    p.add_argument("--idempotent", action="store_true", help="--producer: IdempotentWrite on the cluster too")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    add_output(p)


def _pattern(args: argparse.Namespace, *, for_add: bool) -> int:
    name = args.resource_pattern_type or "literal"  # Kafka's default, --list included (no resource: every ACL)
    if for_add and name not in ("literal", "prefixed"):
        raise CommandError(f"--resource-pattern-type {name} is only for --list and --remove: "
                           "ACLs are added with literal or prefixed")
    return PATTERNS[name]


def _resources(args: argparse.Namespace, pattern: int) -> list[Resource]:
    out = [(A.TOPIC, t, pattern) for t in args.topic] + [(A.GROUP, g, pattern) for g in args.group]
    out += [(A.TRANSACTIONAL_ID, x, pattern) for x in args.transactional_id]
    if args.cluster:
        out.append((A.CLUSTER, A.CLUSTER_NAME, pattern))
    return out


def _operations(names: list[str]) -> list[int]:
    out = []
    for n in names or ["All"]:
        op = OPERATIONS.get(n.replace("_", "").replace("-", "").lower())
        if op is None:
            raise CommandError(f"unknown --operation {n!r} (one of {', '.join(OP_NAMES[o].title() for o in OPERATIONS.values())})")
        out.append(op)
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(principal, host, permission) for --allow-/--deny-principal with their hosts."""
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, A.ALLOW),
                                    (args.deny_principal, args.deny_host, A.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise CommandError(f"principal {principal!r}: expected Type:name, e.g. User:alice")
            for host in hosts or ["*"]:
                out.append((principal, host, perm))
    return out


def _bindings_for(args: argparse.Namespace, pattern: int) -> dict[Resource, list[tuple[str, str, int, int]]]:
    """resource -> (principal, host, operation, permission) to add or remove, with the
    --producer / --consumer conveniences as kafka-acls.sh expands them."""
    entries = _entries(args)
    wanted: dict[Resource, list[int]] = {}
    if args.producer or args.consumer:
        if args.operation:
            raise CommandError("--operation cannot be combined with --producer or --consumer")
        if not args.topic:
            raise CommandError("--producer/--consumer need --topic")
        for t in args.topic:
            ops = wanted.setdefault((A.TOPIC, t, pattern), [])
            if args.producer:
                ops += [A.WRITE, A.DESCRIBE, A.CREATE]
            if args.consumer:
                ops += [A.READ, A.DESCRIBE]
        if args.producer:
            for x in args.transactional_id:
                wanted[(A.TRANSACTIONAL_ID, x, pattern)] = [A.WRITE, A.DESCRIBE]
            if args.idempotent:
                wanted[(A.CLUSTER, A.CLUSTER_NAME, A.LITERAL)] = [A.IDEMPOTENT_WRITE]
        if args.consumer:
            if not args.group:
                raise CommandError("--consumer needs --group")
            for g in args.group:
                wanted[(A.GROUP, g, pattern)] = [A.READ]
    else:
        ops = _operations(args.operation)
        for res in _resources(args, pattern):
            wanted[res] = list(ops)
    out: dict[Resource, list[tuple[str, str, int, int]]] = {}
    for res, ops in wanted.items():
        seen = dict.fromkeys(ops)
        out[res] = [(p, h, op, perm) for p, h, perm in entries for op in seen]
    return out


def _fmt_resource(rtype: int, name: str | None, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={RESOURCE_NAMES.get(rtype, rtype)}, name={name}, "
            f"patternType={PATTERN_NAMES.get(pattern, pattern)})")


def _fmt_entry(b: AclBinding) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={OP_NAMES.get(b.operation, b.operation)}, "
            f"permissionType={PERMISSION_NAMES.get(b.permission_type, b.permission_type)})")


def _as_json(b: AclBinding) -> dict:
    return {"resource_type": RESOURCE_NAMES.get(b.resource_type, b.resource_type), "name": b.resource_name,
            "pattern_type": PATTERN_NAMES.get(b.pattern_type, b.pattern_type), "principal": b.principal,
            "host": b.host, "operation": OP_NAMES.get(b.operation, b.operation),
            "permission_type": PERMISSION_NAMES.get(b.permission_type, b.permission_type)}


def _grouped(bindings: list[AclBinding]) -> dict[Resource, list[AclBinding]]:
    out: dict[Resource, list[AclBinding]] = {}
    for b in sorted(bindings, key=lambda b: (b.resource_type, b.resource_name or "", b.pattern_type,
                                              b.principal or "", b.host or "", b.operation, b.permission_type)):
        out.setdefault((b.resource_type, b.resource_name or "", b.pattern_type), []).append(b)
    return out


def _print_acls(title: str, groups: dict[Resource, list[AclBinding]]) -> None:
    for (rtype, name, pattern), bs in groups.items():
        print(f"{title} `{_fmt_resource(rtype, name, pattern)}`: ")
        for b in bs:
            print(f" \t{_fmt_entry(b)} ")
        print()


def _filter(res: Resource | None, principal: str | None = None) -> AclBinding:
    if res is None:
        return AclBinding(A.ANY, None, A.ANY, principal, None, A.ANY, A.ANY)
    return AclBinding(res[0], res[1], res[2], principal, None, A.ANY, A.ANY)


async def _list(admin: Any, filters: list[AclBinding]) -> list[AclBinding]:
    out: dict[AclBinding, None] = {}
    for f in filters:
        for b in await admin.describe_acls(f):
            out[b] = None
    return list(out)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _run_list(args)
    pattern = _pattern(args, for_add=args.add)
    if args.add:
        return _run_add(args, pattern)
    return _run_remove(args, pattern)


def _run_list(args: argparse.Namespace) -> int:
    if args.producer or args.consumer or args.allow_principal or args.deny_principal:
        raise CommandError("--list takes resources and --principal only")
    pattern = _pattern(args, for_add=False)
    resources = _resources(args, pattern)
    principals = args.principal or [None]
    filters = [_filter(r, p) for r in (resources or [None]) for p in principals]
    acls = run_admin(args, lambda admin: _list(admin, filters))
    if args.output == "json":
        print_json({"acls": [_as_json(b) for bs in _grouped(acls).values() for b in bs]})
        return 0
    _print_acls("Current ACLs for resource", _grouped(acls))
    return 0


def _run_add(args: argparse.Namespace, pattern: int) -> int:
    if not (args.allow_principal or args.deny_principal):
        raise CommandError("--add needs --allow-principal or --deny-principal")
    wanted = _bindings_for(args, pattern)
    if not wanted:
        raise CommandError("--add needs a resource: --topic, --group, --transactional-id or --cluster")
    bindings = [AclBinding(r[0], r[1], r[2], p, h, op, perm) for r, entries in wanted.items()
                for p, h, op, perm in entries]

    async def go(admin: Any) -> tuple[list, list[AclBinding]]:
        results = await admin.create_acls(bindings)
        if any(code for _, code, _ in results):  # refused (not authorized, say): no listing either
            return results, []
        return results, await _list(admin, [_filter(r) for r in wanted])

    results, current = run_admin(args, go)
    failed = [(b, code, msg) for b, code, msg in results if code]
    if args.output == "json":
        print_json({"added": [_as_json(b) for b, code, _ in results if not code],
                    "failed": [{**_as_json(b), "error": for_code(code).name, "message": msg} for b, code, msg in failed],
                    "current": [_as_json(b) for b in current]})
    else:
        _print_acls("Adding ACLs for resource", _grouped([b for b, code, _ in results if not code]))
        for b, code, msg in failed:
            print(f"Error while adding ACL {_fmt_entry(b)} on {_fmt_resource(b.resource_type, b.resource_name, b.pattern_type)}: "
                  f"{for_code(code).name}: {msg or ''}", file=sys.stderr)
        _print_acls("Current ACLs for resource", _grouped(current))
    return 1 if failed else 0


def _run_remove(args: argparse.Namespace, pattern: int) -> int:
    resources = _resources(args, pattern)
    if not resources:
        raise CommandError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
    if args.allow_principal or args.deny_principal:
        wanted = _bindings_for(args, pattern)
        filters = [AclBinding(r[0], r[1], r[2], p, h, op, perm) for r, entries in wanted.items()
                   for p, h, op, perm in entries]
    else:  # every ACL of the resources (with --operation: of those operations)
        ops = _operations(args.operation) if args.operation else [A.ANY]
        filters = [AclBinding(r[0], r[1], r[2], None, None, op, A.ANY) for r in resources for op in ops]
    if not args.force and sys.stdin.isatty():
        names = ", ".join(_fmt_resource(*r) for r in resources)
        answer = input(f"Are you sure you want to remove ACLs from {names}? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            return 1

    async def go(admin: Any) -> tuple[list, list[AclBinding]]:
        results = await admin.delete_acls(filters)
        return results, await _list(admin, [_filter(r) for r in resources])

    results, current = run_admin(args, go)
    removed = [b for _, _, bs in results for b in bs]
    failed = [(code, msg) for code, msg, _ in results if code]
    if args.output == "json":
        print_json({"removed": [_as_json(b) for b in removed],
                    "failed": [{"error": for_code(c).name, "message": m} for c, m in failed],
                    "current": [_as_json(b) for b in current]})
    else:
        _print_acls("Removing ACLs for resource", _grouped(removed))
        for code, msg in failed:
            print(f"Error while removing ACLs: {for_code(code).name}: {msg or ''}", file=sys.stderr)
        _print_acls("Current ACLs for resource", _grouped(current))
    return 1 if failed else 0
