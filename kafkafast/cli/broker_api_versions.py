"""`kafkafast broker-api-versions`: kafka-broker-api-versions.sh — every API each broker
serves, its version range and the highest version a Kafka 3.9 client would use with it
("usable"), in Kafka's text."""
from __future__ import annotations

import argparse
from typing import Any

from kafkafast.cli.common import admin_tool_parser, run_admin
from kafkafast.protocol import _generated as gen

NAME = "broker-api-versions"
# the APIs a client may send (Kafka's ApiKeys.clientApis(): served by a ZooKeeper-mode or KRaft broker)
CLIENT_APIS = sorted(k for k, where in gen.LISTENERS.items() if {"zkBroker", "broker"} & set(where))


def add_parser(sub: Any) -> None:
    admin_tool_parser(sub, NAME, "the API versions every broker serves (kafka-broker-api-versions.sh)", [
        "kafkafast broker-api-versions --bootstrap-server 127.0.0.1:9092",
    ])


def describe(versions: dict[int, tuple[int, int]]) -> list[str]:
    """One line per API as Kafka's NodeApiVersions.toString prints it."""
    lines = {}
    for key, (lo, hi) in versions.items():
        cls = gen.REQUESTS.get(key)
        name = f"{gen.API_NAMES[key]}({key})" if cls is not None else f"UNKNOWN({key})"
        text = f"{name}: {lo}" if lo == hi else f"{name}: {lo} to {hi}"
        if cls is not None:
            if cls.MAX_VERSION < lo:
                text += " [unusable: node too new]"
            elif hi < cls.MIN_VERSION:
                text += " [unusable: node too old]"
            else:
                text += f" [usable: {min(cls.MAX_VERSION, hi)}]"
        lines[key] = text
    for key in CLIENT_APIS:
        lines.setdefault(key, f"{gen.API_NAMES[key]}({key}): UNSUPPORTED")
    return [lines[k] for k in sorted(lines)]


def run(args: argparse.Namespace) -> int:
    async def collect(admin: Any) -> list[tuple[Any, dict[int, tuple[int, int]]]]:
        conns = await admin.broker_connections()
        return [(admin.cluster.brokers[n], conns[n].versions) for n in sorted(conns)]

    for b, versions in run_admin(args, collect):
        print(f"{b.host}:{b.port} (id: {b.node_id} rack: {'null' if b.rack is None else b.rack}) -> (\n\t" + ",\n\t".join(describe(versions)) + "\n)")
    return 0
