"""`kafkafast cluster leader-election`: kafka-leader-election.sh (ElectLeaders at the controller).

    --election-type PREFERRED|UNCLEAN (or --preferred / --unclean)
    --topic T --partition P | --all-topic-partitions | --path-to-json-file F
      ({"partitions": [{"topic": "t", "partition": 0}, ...]}, Kafka's format)

Prints, as Kafka's tool does, the partitions elected, those whose valid replica already
leads (ELECTION_NOT_NEEDED, not an error) and the failures; exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from kafkafast.cli.common import CommandError, add_bootstrap, add_output, parser_for, print_json, run_admin
from kafkafast.protocol.errors import for_code

ELECTION_NOT_NEEDED = 84


def add_parser(sub: Any) -> None:
    p = parser_for(sub, "leader-election", "elect preferred (or, unclean, any live) replicas as leaders", [
        "kafkafast cluster leader-election --bootstrap-server 127.0.0.1:9092 --election-type PREFERRED "
        "--all-topic-partitions",
        "kafkafast cluster leader-election --bootstrap-server 127.0.0.1:9092 --unclean --topic orders --partition 3",
    ])
    add_bootstrap(p)
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--election-type", type=str.upper, choices=("PREFERRED", "UNCLEAN"))
    kind.add_argument("--preferred", dest="election_type", action="store_const", const="PREFERRED")
    kind.add_argument("--unclean", dest="election_type", action="store_const", const="UNCLEAN")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic (with --partition)")
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    which.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": "t", "partition": 0}]}')
    p.add_argument("--partition", type=int, help="the partition (with --topic)")
    p.add_argument("--admin.config", dest="admin_config", metavar="FILE", help="same as --command-config")
    add_output(p)


def _partitions(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        if args.partition is None:
            raise CommandError("--topic needs --partition")
        return [(args.topic, args.partition)]
    try:
        with open(args.path_to_json_file, encoding="utf-8") as fh:
            doc = json.load(fh)
        return [(str(e["topic"]), int(e["partition"])) for e in doc["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"cannot read --path-to-json-file {args.path_to_json_file}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    if args.admin_config and not args.command_config:
        args.command_config = args.admin_config
    unclean = args.election_type == "UNCLEAN"
    codes = run_admin(args, lambda admin: admin.elect_leaders(_partitions(args), unclean=unclean))
    done = sorted(tp for tp, c in codes.items() if c == 0)
    not_needed = sorted(tp for tp, c in codes.items() if c == ELECTION_NOT_NEEDED)
    failed = sorted((tp, c) for tp, c in codes.items() if c not in (0, ELECTION_NOT_NEEDED))
    if args.output == "json":
        print_json({"election_type": args.election_type, "elected": [f"{t}-{p}" for t, p in done],
                    "not_needed": [f"{t}-{p}" for t, p in not_needed],
                    "failed": {f"{t}-{p}": for_code(c).name for (t, p), c in failed}})
        return 1 if failed else 0
    names = lambda tps: ", ".join(f"{t}-{p}" for t, p in tps)  # noqa: E731
    if done:
        print(f"Successfully completed leader election ({args.election_type}) for partitions {names(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {names(not_needed)}")
    for (t, p), c in failed:
        print(f"Error completing leader election ({args.election_type}) for partition: {t}-{p}: "
              f"{for_code(c).name}")
    return 1 if failed else 0
