"""`kafkafast cluster`: brokers, controller and cluster id (DescribeCluster, else Metadata);
`kafkafast cluster leader-election ...`: kafka-leader-election.sh (cli/leader_election.py);
`kafkafast cluster reassign ...` (= `kafkafast reassign`): kafka-reassign-partitions.sh (cli/reassign.py)."""
from __future__ import annotations

import argparse
from typing import Any

from kafkafast.cli import leader_election, reassign
from kafkafast.cli.common import CommandError, add_bootstrap, add_output, parser_for, print_json, print_table, run_admin

NAME = "cluster"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "show the cluster id, the controller and the brokers", [
        "kafkafast cluster --bootstrap-server 127.0.0.1:9092",
        "kafkafast cluster --bootstrap-server 127.0.0.1:9092 --output json | jq .controller",
        "kafkafast cluster leader-election --bootstrap-server 127.0.0.1:9092 --preferred --all-topic-partitions",
    ])
    add_bootstrap(p, required=False)
    add_output(p)
    subs = p.add_subparsers(dest="cluster_command", metavar="{leader-election,reassign}")
    leader_election.add_parser(subs)
    reassign.add_parser(subs)  # also `kafkafast reassign`


def run(args: argparse.Namespace) -> int:
    if getattr(args, "cluster_command", None) == "leader-election":
        return leader_election.run(args)
    if getattr(args, "cluster_command", None) in ("reassign", "reassign-partitions"):
        return reassign.run(args)
    if not args.bootstrap_server:
        raise CommandError("--bootstrap-server is required")
    c = run_admin(args, lambda admin: admin.describe_cluster())
    if args.output == "json":
        print_json({"cluster_id": c.cluster_id, "controller": c.controller_id,
                    "brokers": [{"id": i, "host": h, "port": p, "rack": r} for i, h, p, r in c.brokers]})
        return 0
    print(f"Cluster ID: {c.cluster_id}")
    print(f"Controller: {c.controller_id}")
    print_table(["ID", "HOST", "PORT", "RACK", "CONTROLLER"],
                [(i, h, p, r, "*" if i == c.controller_id else "") for i, h, p, r in c.brokers])
    return 0
