"""`kafkafast share-groups`: kafka-share-groups.sh (Kafka 4.2) — list share groups, describe
their start offsets and lag (default), members (--members) or state (--state), reset their
start offsets (--reset-offsets: a dry run unless --execute; the group must be empty), delete
the offsets of topics (--delete-offsets) and delete groups (--delete).

Requests: ListGroups (type "share") on every broker, ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups at the group's coordinator;
the lag is the log end (high watermark) minus the share-partition start offset."""
from __future__ import annotations

import argparse
import time
from typing import Any

from kafkafast.cli.common import CommandError, add_bootstrap, parser_for, print_table, run_admin
from kafkafast.cli.groups import delete_groups, parse_datetime, parse_duration
from kafkafast.client.cluster import TopicPartition
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_share_group_offsets import AlterShareGroupOffsetsRequest
from kafkafast.protocol._generated.delete_share_group_offsets import DeleteShareGroupOffsetsRequest
from kafkafast.protocol._generated.describe_share_group_offsets import DescribeShareGroupOffsetsRequest
from kafkafast.protocol._generated.list_groups import ListGroupsRequest
from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest

NAME = "share-groups"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "list, describe, reset offsets of and delete share groups (kafka-share-groups.sh flags)", [
        "kafkafast share-groups --bootstrap-server 127.0.0.1:9092 --describe --group workers --members",
        "kafkafast share-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group workers --topic jobs "
        "--to-earliest --execute",
    ])
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for flag in ("list", "describe", "reset-offsets", "delete-offsets", "delete"):
        action.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--group", action="append", default=[], help="group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every share group")
    p.add_argument("--members", action="store_true", help="--describe: members and their assignments")
    p.add_argument("--state", action="store_true", help="--describe / --list: the group's state")
    p.add_argument("--offsets", action="store_true", help="--describe: start offsets and lag (the default)")
    p.add_argument("--topic", action="append", default=[], help="--reset-offsets / --delete-offsets: topic (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group has offsets for")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="local time unless it has an offset")
    target.add_argument("--by-duration", metavar="PnDTnHnMnS", help="this long ago (ISO-8601 duration)")
    p.add_argument("--dry-run", action="store_true", help="--reset-offsets: show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="--reset-offsets: set the new offsets")


async def _list(admin: Any) -> list[Any]:
    await admin.cluster.refresh_metadata()
    out = {}
    for node in sorted(admin.cluster.brokers):
        conn = await admin.cluster.connection(node)
        resp = await conn.send(ListGroupsRequest(states_filter=[], types_filter=["share"]), version=5)
        if resp.error_code:
            raise E.for_code(resp.error_code)(f"list groups on broker {node}")
        out.update((g.group_id, g) for g in resp.groups)
    return [out[k] for k in sorted(out)]


async def _group_ids(admin: Any, args: argparse.Namespace) -> list[str]:
    return [g.group_id for g in await _list(admin)] if args.all_groups else list(args.group)


async def _at_coordinator(admin: Any, group: str, request: Any, version: int) -> tuple[int, Any]:
    node = await admin.cluster.find_coordinator(group)
    conn = await admin.cluster.connection(node)
    return node, await conn.send(request, version=version)


async def _offsets(admin: Any, group: str, topics: list[str] | None = None) -> dict[TopicPartition, int]:
    Q = DescribeShareGroupOffsetsRequest
    req = Q(groups=[Q.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None if topics is None else [
        Q.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=[p.partition for d in
                                                                         await admin.describe_topics([t])
                                                                         for p in d.partitions]) for t in topics])])
    _, resp = await _at_coordinator(admin, group, req, 0)
    g = resp.groups[0]
    if g.error_code:
        raise E.for_code(g.error_code)(f"describe offsets of share group {group!r}")
    return {TopicPartition(t.topic_name, p.partition_index): p.start_offset
            for t in g.topics for p in t.partitions if not p.error_code}


def run(args: argparse.Namespace) -> int:
    if args.list:
        groups = run_admin(args, _list)
        if args.state:
            print_table(["GROUP", "STATE"], [(g.group_id, g.group_state) for g in groups])
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


def _describe(args: argparse.Namespace) -> int:
    async def describe(admin: Any) -> list[tuple[int, Any, dict, dict]]:
        out = []
        for gid in await _group_ids(admin, args):
            node, resp = await _at_coordinator(admin, gid, ShareGroupDescribeRequest(group_ids=[gid]), 1)
            g = resp.groups[0]
            if g.error_code:
                raise CommandError(f"Share group '{gid}' does not exist." if g.error_code == E.ErrorCode.GROUP_ID_NOT_FOUND
                                   else f"describe share group {gid!r}: {E.for_code(g.error_code).__name__}")
            starts = await _offsets(admin, gid) if not (args.members or args.state) else {}
            ends = await admin.list_offsets(list(starts), -1) if starts else {}
            out.append((node, g, starts, ends))
        return out

    for node, g, starts, ends in run_admin(args, describe):
        if args.state:
            print_table(["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                        [(g.group_id, f"({node})", g.group_state, len(g.members))])
        elif args.members:
            if not g.members:
                print(f"Share group '{g.group_id}' has no active members.")
            print_table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                        [(g.group_id, m.member_id, m.client_host, m.client_id,
                          sum(len(t.partitions) for t in m.assignment.topic_partitions),
                          ",".join(f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}"
                                   for t in m.assignment.topic_partitions) or "-") for m in g.members])
        else:
            if not g.members:
                print(f"Share group '{g.group_id}' has no active members.")
            print_table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                        [(g.group_id, tp.topic, tp.partition, start if start >= 0 else "-",
                          max(0, ends[tp] - start) if start >= 0 and tp in ends else "-")
                         for tp, start in sorted(starts.items())])
        print()
    return 0


def _delete(args: argparse.Namespace) -> int:
    return delete_groups(args, _group_ids, "share")


def _delete_offsets(args: argparse.Namespace) -> int:
    if not args.topic:
        raise CommandError("--delete-offsets needs --topic")

    async def delete(admin: Any) -> list[tuple[str, Any]]:
        out = []
        for gid in await _group_ids(admin, args):
            D = DeleteShareGroupOffsetsRequest
            _, resp = await _at_coordinator(admin, gid, D(group_id=gid, topics=[
                D.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in args.topic]), 0)
            out.append((gid, resp))
        return out

    failed = 0
    for gid, resp in run_admin(args, delete):
        if resp.error_code:
            failed += 1
            print(f"Error: Deletion of offsets of share group '{gid}' failed: {E.for_code(resp.error_code).__name__}")
            continue
        rows = []
        for t in resp.responses:
            for p in t.partitions:
                failed += bool(p.error_code)
                rows.append((t.topic_name, p.partition_index, "Error: " + E.for_code(p.error_code).__name__
                             if p.error_code else "Successful"))
        print_table(["TOPIC", "PARTITION", "STATUS"], rows)
    return 1 if failed else 0


def _reset(args: argparse.Namespace) -> int:
    if not (args.topic or args.all_topics):
        raise CommandError("--reset-offsets needs --topic or --all-topics")
    if not (args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime or args.by_duration):
        raise CommandError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                           "--by-duration")
    if args.execute and args.dry_run:
        raise CommandError("--execute and --dry-run exclude each other")

    async def reset(admin: Any) -> list[tuple[str, dict[TopicPartition, int]]]:
        out = []
        for gid in await _group_ids(admin, args):
            starts = await _offsets(admin, gid, None if args.all_topics else args.topic)
            tps = sorted(starts)
            earliest = await admin.list_offsets(tps, -2)
            latest = await admin.list_offsets(tps, -1)
            if args.to_datetime or args.by_duration:
                ts = (parse_datetime(args.to_datetime) if args.to_datetime
                      else int(time.time() * 1000) - parse_duration(args.by_duration))
                at = await admin.list_offsets(tps, ts)
            new = {}
            for tp in tps:
                off = (earliest[tp] if args.to_earliest else latest[tp] if args.to_latest
                       else args.to_offset if args.to_offset is not None else at[tp])
                new[tp] = min(max(off, earliest[tp]), latest[tp])
            if args.execute:
                A = AlterShareGroupOffsetsRequest
                by_topic: dict[str, list] = {}
                for tp, off in new.items():
                    by_topic.setdefault(tp.topic, []).append(A.AlterShareGroupOffsetsRequestPartition(
                        partition_index=tp.partition, start_offset=off))
                _, resp = await _at_coordinator(admin, gid, A(group_id=gid, topics=[
                    A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()]), 0)
                errors = {p.error_code for t in resp.responses for p in t.partitions if p.error_code}
                if E.ErrorCode.NON_EMPTY_GROUP in errors:
                    raise CommandError(f"Share group '{gid}' is not empty.")
                if errors:
                    raise CommandError(f"reset offsets of share group {gid!r}: "
                                       + ", ".join(E.for_code(c).__name__ for c in sorted(errors)))
            out.append((gid, new))
        return out

    for gid, new in run_admin(args, reset):
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [(gid, tp.topic, tp.partition, off) for tp, off in sorted(new.items())])
    if not args.execute:
        print("(dry run: nothing was changed; add --execute to set these start offsets)")
    return 0
