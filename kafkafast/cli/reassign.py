"""`kafkafast reassign`: kafka-reassign-partitions.sh (AlterPartitionReassignments and
ListPartitionReassignments at the controller), with Kafka's JSON files:

    --generate --topics-to-move-json-file F --broker-list 1,2,3
        F: {"version": 1, "topics": [{"topic": "t"}]}; prints the current assignment and a
        proposed one over the listed brokers (same partition count and replication factor)
    --execute --reassignment-json-file F [--throttle BYTES_PER_S]
        F: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]};
        prints the current assignment (to roll back with) and starts the moves; with
        --throttle, the replicas that move are throttled to that many bytes/s
        (leader/follower.replication.throttled.replicas on the topics,
        leader/follower.replication.throttled.rate on the brokers)
    --verify --reassignment-json-file F
        per partition: completed, still in progress, or failed; once every move is done,
        removes the throttle (as Kafka's tool does)
    --cancel --reassignment-json-file F
        back to the original replicas (the added ones are removed) and the throttle removed
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from kafkafast.cli.common import CommandError, add_bootstrap, parser_for, run_admin
from kafkafast.client.admin import RESOURCE_BROKER, RESOURCE_TOPIC
from kafkafast.broker.replica_assignment import assign_replicas
from kafkafast.protocol.errors import ErrorCode, KafkaError, for_code

NAME = "reassign"
THROTTLE_TOPIC_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
THROTTLE_BROKER_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "move partition replicas between brokers (kafka-reassign-partitions.sh)", [
        "kafkafast reassign --bootstrap-server 127.0.0.1:9092 --generate --topics-to-move-json-file topics.json "
        "--broker-list 1,2,3",
        "kafkafast reassign --bootstrap-server 127.0.0.1:9092 --execute --reassignment-json-file plan.json "
        "--throttle 50000000",
        "kafkafast reassign --bootstrap-server 127.0.0.1:9092 --verify --reassignment-json-file plan.json",
    ], aliases=["reassign-partitions"])
    add_bootstrap(p)
    mode = p.add_mutually_exclusive_group(required=True)
    for m in ("generate", "execute", "verify", "cancel", "list"):
        mode.add_argument(f"--{m}", action="store_true")
    p.add_argument("--reassignment-json-file", metavar="FILE")
    p.add_argument("--topics-to-move-json-file", metavar="FILE")
    p.add_argument("--broker-list", metavar="1,2,3", help="brokers to spread the topics over (--generate)")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="replication throttle of the moving replicas (--execute)")


def _load(path: str | None, flag: str) -> dict:
    if not path:
        raise CommandError(f"{flag} is required")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read {flag} {path}: {exc}") from exc


def read_plan(path: str | None) -> dict[tuple[str, int], list[int]]:
    doc = _load(path, "--reassignment-json-file")
    try:
        plan = {(str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]] for e in doc["partitions"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise CommandError(f"--reassignment-json-file: not Kafka's format ({exc})") from exc
    if not plan:
        raise CommandError("--reassignment-json-file lists no partitions")
    return plan


def plan_json(plan: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


async def _current(admin: Any, topics: set[str]) -> dict[tuple[str, int], list[int]]:
    out = {}
    for d in await admin.describe_topics(sorted(topics)):
        if d.error_code:
            raise for_code(d.error_code)(f"topic {d.name}")
        for p in d.partitions:
            out[(d.name, p.partition)] = list(p.replicas)
    return out


def run(args: argparse.Namespace) -> int:
    if args.list:
        return run_admin(args, _list)
    if args.generate:
        return run_admin(args, lambda admin: _generate(admin, args))
    plan = read_plan(args.reassignment_json_file)
    if args.execute:
        return run_admin(args, lambda admin: _execute(admin, plan, args.throttle))
    if args.cancel:
        return run_admin(args, lambda admin: _cancel(admin, plan))
    return run_admin(args, lambda admin: _verify(admin, plan))


async def _list(admin: Any) -> int:
    """The reassignments in progress, as kafka-reassign-partitions.sh --list prints them."""
    ongoing = await admin.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), (replicas, adding, removing) in sorted(ongoing.items()):
        print(f"{t}-{p}: replicas: {_ids(replicas)}." + (f" adding: {_ids(adding)}." if adding else "")
              + (f" removing: {_ids(removing)}." if removing else ""))
    return 0


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


async def _generate(admin: Any, args: argparse.Namespace) -> int:
    doc = _load(args.topics_to_move_json_file, "--topics-to-move-json-file")
    if not args.broker_list:
        raise CommandError("--generate needs --broker-list")
    brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    topics = {str(t["topic"]) for t in doc.get("topics", [])}
    current = await _current(admin, topics)
    racks = {b[0]: b[3] for b in (await admin.describe_cluster()).brokers if b[0] in brokers}
    if len(racks) != len(brokers):
        raise CommandError(f"--broker-list names brokers that are not registered: "
                           f"{sorted(set(brokers) - set(racks))}")
    if any(r is None for r in racks.values()):
        racks = {b: None for b in racks}
    proposed = {}
    for t in sorted(topics):
        parts = sorted(p for (tt, p) in current if tt == t)
        rf = len(current[(t, parts[0])])
        for p, r in assign_replicas(racks, len(parts), rf).items():
            proposed[(t, p)] = r
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


async def _execute(admin: Any, plan: dict[tuple[str, int], list[int]], throttle: int) -> int:
    current = await _current(admin, {t for t, _ in plan})
    missing = sorted(tp for tp in plan if tp not in current)
    if missing:
        raise CommandError(f"unknown partitions: {', '.join(f'{t}-{p}' for t, p in missing)}")
    print("Current partition replica assignment\n")
    print(plan_json({tp: current[tp] for tp in plan}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        await _set_throttle(admin, plan, current, throttle)
    codes = await admin.alter_partition_reassignments(dict(plan))
    failed = {tp: c for tp, c in codes.items() if c}
    for (t, p), c in sorted(failed.items()):
        print(f"Error reassigning partition(s): {t}-{p}: {for_code(c).name}")
    if failed:
        brokers = (await admin.describe_cluster()).brokers
        if len(brokers) == 1 and set(failed.values()) == {ErrorCode.INVALID_REPLICA_ASSIGNMENT}:
            print(f"The cluster has a single broker ({brokers[0][0]}): there is no other broker to move "
                  "replicas to (a broker started without zookeeper.connect is a cluster of one)")
        return 1
    print("Successfully started partition reassignments for "
          + ",".join(f"{t}-{p}" for t, p in sorted(plan)))
    return 0


async def _set_throttle(admin: Any, plan: dict[tuple[str, int], list[int]],
                        current: dict[tuple[str, int], list[int]], rate: int) -> None:
    """As Kafka's tool: leaders throttle the moving partitions' current replicas, followers
    the new ones; the rate goes to every broker involved."""
    leader: dict[str, set[str]] = {}
    follower: dict[str, set[str]] = {}
    for (t, p), target in plan.items():
        leader.setdefault(t, set()).update(f"{p}:{b}" for b in current[(t, p)])
        follower.setdefault(t, set()).update(f"{p}:{b}" for b in target if b not in current[(t, p)])
    for t in leader:
        await admin.alter_configs(RESOURCE_TOPIC, t, set_configs={
            THROTTLE_TOPIC_KEYS[0]: ",".join(sorted(leader[t])),
            THROTTLE_TOPIC_KEYS[1]: ",".join(sorted(follower.get(t, ())))})
    try:
        for b in sorted({b for r in list(plan.values()) + [current[tp] for tp in plan] for b in r}):
            await admin.alter_configs(RESOURCE_BROKER, str(b),
                                      set_configs={k: str(rate) for k in THROTTLE_BROKER_KEYS})
        print(f"The inter-broker throttle limit was set to {rate} B/s")
    except KafkaError as exc:  # brokers whose configs are static (kafkafast's): their own rate applies
        print(f"The throttled replicas are set; the brokers refused a dynamic rate ({exc.name}): "
              f"their {THROTTLE_BROKER_KEYS[0]} / {THROTTLE_BROKER_KEYS[1]} apply")


async def _verify(admin: Any, plan: dict[tuple[str, int], list[int]]) -> int:
    ongoing = await admin.list_partition_reassignments(sorted(plan))
    current = await _current(admin, {t for t, _ in plan})
    print("Status of partition reassignment:")
    done = True
    for tp in sorted(plan):
        t, p = tp
        if tp in ongoing:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
            done = False
        elif current.get(tp) == plan[tp]:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                  f"{current.get(tp)} rather than {plan[tp]}.")
            done = False
    if done:
        await _clear_throttle(admin, {t for t, _ in plan})
    return 0 if done else 1


async def _clear_throttle(admin: Any, topics: set[str]) -> None:
    for t in sorted(topics):
        await admin.alter_configs(RESOURCE_TOPIC, t, delete_configs=list(THROTTLE_TOPIC_KEYS))
    for b, *_ in (await admin.describe_cluster()).brokers:
        try:
            await admin.alter_configs(RESOURCE_BROKER, str(b), delete_configs=list(THROTTLE_BROKER_KEYS))
        except KafkaError:
            break  # static broker configs: nothing was set
    print("Throttle was removed.")


async def _cancel(admin: Any, plan: dict[tuple[str, int], list[int]]) -> int:
    codes = await admin.alter_partition_reassignments({tp: None for tp in plan})
    failed = {tp: c for tp, c in codes.items() if c}
    for (t, p), c in sorted(failed.items()):
        print(f"Error cancelling reassignment of {t}-{p}: {for_code(c).name}")
    if not failed:
        print("Successfully cancelled partition reassignments for " + ",".join(f"{t}-{p}" for t, p in sorted(plan)))
        await _clear_throttle(admin, {t for t, _ in plan})
    return 1 if failed else 0
