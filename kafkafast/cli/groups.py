"""`kafkafast groups`: kafka-consumer-groups.sh — list, describe (members, assignment,
committed offset, log end, lag), reset offsets (dry run unless --execute), delete."""
from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from typing import Any

from kafkafast.cli.common import (CommandError, add_bootstrap, add_output, java_exception, parser_for, print_json,
                                  print_table, report_each, run_admin)
from kafkafast.client.cluster import TopicPartition
from kafkafast.protocol.errors import KafkaError, for_code

NAME = "groups"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "list, describe, reset offsets of and delete consumer groups "
                              "(kafka-consumer-groups.sh flags)", [
        "kafkafast groups --bootstrap-server 127.0.0.1:9092 --describe --group billing",
        "kafkafast groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group billing --topic events "
        "--to-earliest --execute",
    ])
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for flag in ("list", "describe", "reset-offsets", "delete", "delete-offsets"):
        action.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--group", action="append", default=[], help="group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group")
    p.add_argument("--members", action="store_true", help="--describe: members and their assignments")
    p.add_argument("--state", action="store_true", help="--describe: the group's state")
    p.add_argument("--topic", action="append", default=[],
                   help="--reset-offsets/--delete-offsets: topic, or topic:0,2 for some partitions (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group committed")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-current", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--shift-by", type=int)
    target.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="local time unless it has an offset")
    target.add_argument("--by-duration", metavar="PnDTnHnMnS", help="this long ago (ISO-8601 duration)")
    p.add_argument("--dry-run", action="store_true", help="--reset-offsets: show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="--reset-offsets: commit the new offsets")
    add_output(p)


def run(args: argparse.Namespace) -> int:
    if args.list:
        groups = run_admin(args, lambda admin: admin.list_groups())
        if args.output == "json":
            print_json([{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state} for g in groups])
        elif args.state:
            print_table(["GROUP", "STATE"], [(g.group_id, g.state) for g in groups])
        else:
            for g in groups:
                print(g.group_id)
        return 0
    if not args.group and not args.all_groups:
        raise CommandError("--group or --all-groups is required")
    if args.describe:
        return _describe(args)
    if args.delete:
        return _delete(args)
    if args.delete_offsets:
        return _delete_offsets(args)
    return _reset(args)


async def _group_ids(admin: Any, args: argparse.Namespace) -> list[str]:
    return [g.group_id for g in await admin.list_groups()] if args.all_groups else list(args.group)


def _describe(args: argparse.Namespace) -> int:
    async def describe(admin: Any) -> list[tuple[Any, Any]]:
        return [(await admin.describe_group(g), await admin.group_offsets(g)) for g in await _group_ids(admin, args)]

    results = run_admin(args, describe)
    doc = []
    missing = 0
    for desc, offsets in results:
        if desc.state == "Dead" and not desc.members and not offsets.rows:
            print(f"Error: Consumer group '{desc.group_id}' does not exist.", file=sys.stderr)
            missing += 1
            continue
        owner = {tp: m for m in desc.members for tp in m.assignment}
        tps = sorted(set(offsets.rows) | set(owner))
        rows = []
        for tp in tps:
            committed, end = offsets.rows.get(tp, (None, None))
            m = owner.get(tp)
            lag = None if committed is None or end is None else max(0, end - committed)
            rows.append({"topic": tp.topic, "partition": tp.partition, "current_offset": committed,
                         "log_end_offset": end, "lag": lag, "consumer_id": m.member_id if m else None,
                         "host": m.client_host if m else None, "client_id": m.client_id if m else None})
        doc.append({"group": desc.group_id, "state": desc.state, "protocol": desc.protocol,
                    "coordinator": desc.coordinator,
                    "members": [{"consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
                                 "host": m.client_host, "client_id": m.client_id,
                                 "assignment": [f"{tp.topic}-{tp.partition}" for tp in m.assignment]}
                                for m in desc.members],
                    "partitions": rows, "total_lag": sum(r["lag"] or 0 for r in rows)})
    if args.output == "json":
        print_json(doc)
        return 1 if missing else 0
    for g in doc:
        if args.state:
            print(f"GROUP {g['group']}  COORDINATOR (ID) {g['coordinator']}  ASSIGNMENT-STRATEGY "
                  f"{g['protocol'] or '-'}  STATE {g['state']}  #MEMBERS {len(g['members'])}")
        elif args.members:
            print_table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                        [(g["group"], m["consumer_id"], m["host"], m["client_id"], len(m["assignment"]),
                          ",".join(m["assignment"]) or "-") for m in g["members"]])
        else:
            if not g["members"]:
                print(f"Consumer group '{g['group']}' has no active members.")
            print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                         "HOST", "CLIENT-ID"],
                        [(g["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                          r["consumer_id"], r["host"], r["client_id"]) for r in g["partitions"]])
        print()
    return 1 if missing else 0


def _delete(args: argparse.Namespace) -> int:
    return delete_groups(args, _group_ids, "consumer")


def delete_groups(args: argparse.Namespace, group_ids: Any, kind: str) -> int:
    """DeleteGroups for the groups `group_ids(admin, args)` names, reported as Kafka's tools do
    (`kind`: "consumer" or "share")."""
    async def delete(admin: Any) -> dict[str, int]:
        return await admin.delete_groups(await group_ids(admin, args))

    return report_each((code, f"Deletion of requested {kind} groups ('{gid}') was successful.",
                        f"Error: deletion of group '{gid}' failed: {for_code(code).__name__}" if code else "")
                       for gid, code in run_admin(args, delete).items())


# kafka-consumer-groups.sh --delete-offsets: the group-level error's line
DELETE_OFFSETS_ERRORS = {
    "INVALID_GROUP_ID": "'{g}' is not valid.", "GROUP_ID_NOT_FOUND": "'{g}' does not exist.",
    "GROUP_AUTHORIZATION_FAILED": "Access to '{g}' is not authorized.",
    "NON_EMPTY_GROUP": "Deleting offsets of a consumer group '{g}' is forbidden if the group is not empty.",
    "GROUP_SUBSCRIBED_TO_TOPIC": "Encounter some partition level error, see the follow-up details:",
    "TOPIC_AUTHORIZATION_FAILED": "Encounter some partition level error, see the follow-up details:",
    "UNKNOWN_TOPIC_OR_PARTITION": "Encounter some partition level error, see the follow-up details:",
}


def _delete_offsets(args: argparse.Namespace) -> int:
    """OffsetDelete (kafka-consumer-groups.sh --delete-offsets): the group's committed offsets
    of the partitions named (all of a topic given without partitions)."""
    if len(args.group) != 1 or not args.topic:
        raise CommandError("--delete-offsets needs one --group and at least one --topic")
    group = args.group[0]

    async def delete(admin: Any) -> tuple[int, dict[tuple[str, int], int]]:
        tps: list[tuple[str, int]] = []
        missing: dict[tuple[str, int], int] = {}
        for topic, parts in _parse_topics(args.topic):
            if parts is not None:
                tps += [(topic, p) for p in parts]
                continue
            try:
                [d] = await admin.describe_topics([topic])
            except KafkaError as exc:
                missing[(topic, -1)] = exc.code
                continue
            tps += [(topic, p.partition) for p in d.partitions]
        top, codes = await admin.delete_group_offsets(group, tps) if tps else (0, {})
        return top, {**codes, **missing}

    top, codes = run_admin(args, delete)
    if top:
        name = for_code(top).name
        print("Error: " + DELETE_OFFSETS_ERRORS.get(name, f"Encounter some unknown error: {name}").format(g=group),
              file=sys.stderr)
    else:
        print(f"Request succeed for deleting offsets with topic {', '.join(args.topic)} group {group}")
    row = "\n{:<30} {:<15} {:<15}"
    sys.stdout.write(row.format("TOPIC", "PARTITION", "STATUS"))
    for (t, p), code in sorted(codes.items(), key=lambda kv: kv[0][0] + str(kv[0][1])):
        sys.stdout.write(row.format(t, p if p >= 0 else "Not Provided",
                                    f"Error: :{java_exception(code)}" if code else "Successful"))
    print()
    return 1 if top or any(codes.values()) else 0


def _parse_topics(items: list[str]) -> list[tuple[str, list[int] | None]]:
    out = []
    for item in items:
        topic, _, parts = item.partition(":")
        out.append((topic, [int(x) for x in parts.split(",") if x.strip()] if parts else None))
    return out


def parse_datetime(text: str) -> int:
    """ms since the epoch for Kafka's `--to-datetime` format (YYYY-MM-DDTHH:mm:SS.sss, an
    optional offset such as +02:00 or Z; without one, local time)."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise CommandError(f"--to-datetime: cannot parse {text!r} (expected YYYY-MM-DDTHH:mm:SS.sss)") from exc
    return int(when.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO-8601 duration PnDTnHnMnS (Kafka's --by-duration)."""
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise CommandError(f"--by-duration: cannot parse {text!r} (expected PnDTnHnMnS)")
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


def _reset(args: argparse.Namespace) -> int:
    if not (args.topic or args.all_topics):
        raise CommandError("--reset-offsets needs --topic or --all-topics")
    if not any(x is not None and x is not False for x in (args.to_earliest, args.to_latest, args.to_current,
                                                           args.to_offset, args.shift_by, args.to_datetime,
                                                           args.by_duration)):
        raise CommandError("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, "
                           "--shift-by, --to-datetime, --by-duration")
    if args.execute and args.dry_run:
        raise CommandError("--execute and --dry-run exclude each other")

    async def reset(admin: Any) -> list[tuple[str, dict]]:
        out = []
        for gid in await _group_ids(admin, args):
            desc = await admin.describe_group(gid)
            if args.execute and desc.members:
                raise CommandError(f"Assignments can only be reset if the group '{gid}' is inactive, "
                                   f"but the current state is {desc.state}.")
            current = await admin.group_offsets(gid)
            tps: list[TopicPartition] = []
            if args.all_topics:
                tps = sorted(current.rows)
            for topic, parts in _parse_topics(args.topic):
                if parts is None:
                    parts = [p.partition for d in await admin.describe_topics([topic]) for p in d.partitions]
                tps += [TopicPartition(topic, p) for p in parts]
            earliest = await admin.list_offsets(tps, -2)
            latest = await admin.list_offsets(tps, -1)
            if args.to_datetime or args.by_duration:
                ts = (parse_datetime(args.to_datetime) if args.to_datetime
                      else int(time.time() * 1000) - parse_duration(args.by_duration))
                target = await admin.list_offsets(tps, ts)
            new: dict[TopicPartition, int] = {}
            for tp in tps:
                committed = current.rows.get(tp, (None, 0))[0]
                if args.to_earliest:
                    off = earliest[tp]
                elif args.to_latest:
                    off = latest[tp]
                elif args.to_current:
                    off = committed if committed is not None else latest[tp]
                elif args.to_offset is not None:
                    off = args.to_offset
                elif args.shift_by is not None:
                    off = (committed if committed is not None else latest[tp]) + args.shift_by
                else:
                    off = target[tp]
                new[tp] = min(max(off, earliest[tp]), latest[tp])  # Kafka clamps into the log's range
            if args.execute:
                await admin.commit_group_offsets(gid, new)
            out.append((gid, new))
        return out

    results = run_admin(args, reset)
    if args.output == "json":
        print_json([{"group": g, "executed": bool(args.execute),
                     "offsets": [{"topic": tp.topic, "partition": tp.partition, "new_offset": off}
                                 for tp, off in sorted(new.items())]} for g, new in results])
        return 0
    for gid, new in results:
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [(gid, tp.topic, tp.partition, off) for tp, off in sorted(new.items())])
    if not args.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)")
    return 0
