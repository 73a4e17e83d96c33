"""`kafkafast health`: a load balancer's check. Exit 0 when the broker answers
ApiVersions and Metadata (and lists itself) within the timeout, 1 otherwise; one line on
stdout either way."""
from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from kafkafast.cli.common import add_bootstrap, admin_settings, load_client_properties, parser_for
from kafkafast.client.admin import AdminClient

NAME = "health"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "check that a broker serves requests (exit code 0 = healthy)", [
        "kafkafast health --bootstrap-server 10.0.0.5:9092 --timeout 2 || echo unhealthy",
        "kafkafast health --bootstrap-server 127.0.0.1:9092 --wait 120   # systemd ExecStartPost",
    ])
    add_bootstrap(p)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="retry until healthy or this many seconds passed (start-up checks)")
    p.add_argument("--require-controller", action="store_true", help="also fail when the cluster has no controller")


def run(args: argparse.Namespace) -> int:
    props = load_client_properties(args.command_config)
    settings = admin_settings(props)
    settings["request_timeout_ms"] = int(args.timeout * 1000)
    started = time.monotonic()

    async def check() -> str | None:
        async with AdminClient(args.bootstrap_server, **settings) as admin:
            c = await admin.describe_cluster()
            if not c.brokers:
                return "no brokers in the metadata"
            if args.require_controller and c.controller_id < 0:
                return "no active controller"
            return None

    deadline = started + args.wait
    while True:
        try:
            problem = asyncio.run(asyncio.wait_for(check(), args.timeout))
        except asyncio.TimeoutError:
            problem = f"no answer within {args.timeout:g}s"
        except Exception as exc:  # noqa: BLE001 - every failure means "unhealthy"
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None or time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    ms = (time.monotonic() - started) * 1000
    if problem:
        print(f"UNHEALTHY {args.bootstrap_server}: {problem}")
        return 1
    print(f"OK {args.bootstrap_server} ({ms:.0f} ms)")
    return 0
