"""`kafkafast transactions`: kafka-transactions.sh — list, describe, describe-producers,
abort and find-hanging, with Kafka's flags and tables (ListTransactions at every broker,
DescribeTransactions at the coordinator, DescribeProducers at the leader, an abort marker
through WriteTxnMarkers at the leader as Kafka's Admin.abortTransaction writes it)."""
from __future__ import annotations

import argparse
import time
from typing import Any

from kafkafast.cli.common import CommandError, add_bootstrap, parser_for, print_tool_table, run_admin

NAME = "transactions"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "list, describe and abort transactions (kafka-transactions.sh)", [
        "kafkafast transactions --bootstrap-server 127.0.0.1:9092 list",
        "kafkafast transactions --bootstrap-server 127.0.0.1:9092 describe --transactional-id payments-1",
        "kafkafast transactions --bootstrap-server 127.0.0.1:9092 find-hanging --broker-id 0",
        "kafkafast transactions --bootstrap-server 127.0.0.1:9092 abort --topic events --partition 0 "
        "--start-offset 42",
    ])
    add_bootstrap(p)
    subs = p.add_subparsers(dest="transactions_command", required=True)
    ls = subs.add_parser("list", help="list transactions")
    ls.add_argument("--duration-filter", type=int, help="only transactions running longer than this (ms)")
    d = subs.add_parser("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True)
    dp = subs.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    dp.add_argument("--broker-id", type=int, help="describe the producer state on this replica")
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, required=True)
    a = subs.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    a.add_argument("--topic", required=True)
    a.add_argument("--partition", type=int, required=True)
    a.add_argument("--start-offset", type=int, help="the first offset of the transaction to abort")
    a.add_argument("--producer-id", type=int)
    a.add_argument("--producer-epoch", type=int)
    a.add_argument("--coordinator-epoch", type=int)
    fh = subs.add_parser("find-hanging", help="find hanging transactions")
    fh.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    fh.add_argument("--max-transaction-timeout", type=int, default=15,
                    help="maximum transaction timeout in minutes to limit the scope of the search (default 15)")
    fh.add_argument("--topic")
    fh.add_argument("--partition", type=int)


def run(args: argparse.Namespace) -> int:
    return {"list": _list, "describe": _describe, "describe-producers": _describe_producers, "abort": _abort,
            "find-hanging": _find_hanging}[args.transactions_command](args)


def _list(args: argparse.Namespace) -> int:
    duration = -1 if args.duration_filter is None else args.duration_filter
    listing = run_admin(args, lambda admin: admin.list_transactions(duration_ms=duration))
    print_tool_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                     [(tid, node, pid, state) for node, rows in listing.items() for tid, pid, state in rows])
    return 0


def _describe(args: argparse.Namespace) -> int:
    tid = args.transactional_id
    node, s = run_admin(args, lambda admin: admin.describe_transaction(tid))
    started = s.transaction_start_time_ms if s.transaction_start_time_ms >= 0 else None
    print_tool_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                      "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"],
                     [(node, tid, s.producer_id, s.producer_epoch, s.transaction_state, s.transaction_timeout_ms,
                       "None" if started is None else started,
                       "None" if started is None else int(time.time() * 1000) - started,
                       ",".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions))])
    return 0


def _describe_producers(args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    producers = run_admin(args, lambda admin: admin.describe_producers(tp, args.broker_id))
    print_tool_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"],
                     [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
                       "None" if p.current_txn_start_offset < 0 else p.current_txn_start_offset) for p in producers])
    return 0


def _abort(args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise CommandError("The transaction to abort must be identified either with --start-offset (for brokers on "
                           "3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch "
                           "(for older brokers)")

    async def abort(admin: Any) -> None:
        if args.start_offset is None:
            if args.producer_epoch is None:
                raise CommandError("Missing required argument --producer-epoch")
            if args.coordinator_epoch is None:
                raise CommandError("Missing required argument --coordinator-epoch")
            spec = (args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch))
        else:
            found = [p for p in await admin.describe_producers(tp) if p.current_txn_start_offset == args.start_offset]
            if not found:
                raise CommandError(f"Could not find any open transactions starting at offset {args.start_offset} "
                                   f"on partition {tp[0]}-{tp[1]}")
            spec = (found[0].producer_id, found[0].producer_epoch, max(0, found[0].coordinator_epoch))
        await admin.abort_transaction(tp, *spec)

    run_admin(args, abort)
    return 0


def _find_hanging(args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise CommandError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                           "of the search")
    if args.partition is not None and args.topic is None:
        raise CommandError("The --partition argument requires --topic to be provided")
    max_timeout_ms = args.max_transaction_timeout * 60_000

    async def find(admin: Any) -> list[tuple[tuple[str, int], Any]]:
        if args.topic is not None and args.partition is not None:
            tps = [(args.topic, args.partition)]
        else:
            topics = await admin.describe_topics(None if args.topic is None else [args.topic], include_internal=True)
            tps = [(d.name, p.partition) for d in topics for p in d.partitions
                   if args.broker_id is None or args.broker_id in p.replicas]
        now = int(time.time() * 1000)
        candidates = [(tp, p) for tp in tps for p in await admin.describe_producers(tp, args.broker_id)
                      if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms]
        if not candidates:
            return []
        listed = await admin.list_transactions(producer_ids={p.producer_id for _, p in candidates})
        ids = {pid: tid for rows in listed.values() for tid, pid, _ in rows}
        hanging = []
        for tp, p in candidates:
            tid = ids.get(p.producer_id)
            if tid is not None:
                try:
                    _, state = await admin.describe_transaction(tid)
                except Exception:  # noqa: BLE001 - no description: the coordinator will not finish it
                    state = None
                if state is not None and any((t.topic, q) == tp for t in state.topics for q in t.partitions):
                    continue  # the coordinator still has the partition in the transaction: it writes the marker
            hanging.append((tp, p))
        return hanging

    now = int(time.time() * 1000)
    print_tool_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                      "LastTimestamp", "Duration(min)"],
                     [(t, part, p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset,
                       p.last_timestamp, (now - p.last_timestamp) // 60_000) for (t, part), p in run_admin(args, find)])
    return 0
