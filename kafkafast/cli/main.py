"""`kafkafast` command line.

    kafkafast broker [-c server.properties] [--set key=value ...] [--workers N]

The properties file uses Kafka's names (listeners, log.dirs, num.partitions,
log.segment.bytes, log.retention.ms, ...); `--set` overrides single keys.
"""
from __future__ import annotations

import argparse
import logging
import sys

from kafkafast.config import BrokerConfig


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkafast")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run a broker")
    b.add_argument("-c", "--config", help="properties file with Kafka's property names")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one property")
    b.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: num.workers, else the number of CPUs; "
                        "0: serve in one process)")
    b.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    if args.command == "broker":
        overrides = parse_sets(args.set)
        config = BrokerConfig.load(args.config, overrides)
        workers = args.workers
        if workers is None and config.get("num.workers") is not None:
            workers = int(config.get("num.workers"))
        if workers is None:
            import os

            workers = os.cpu_count() or 1
        try:
            from kafkafast.runtime.supervisor import run_supervisor
        except ImportError:
            run_supervisor = None
        if workers and config.get("zookeeper.connect"):
            logging.getLogger("kafkafast").warning(
                "cluster mode (zookeeper.connect) serves in one process; --workers %d ignored", workers)
            workers = 0
        if workers and run_supervisor is not None:
            return run_supervisor(config, workers)
        from kafkafast.runtime.server import run_server

        return run_server(config)
    return 2


if __name__ == "__main__":
    sys.exit(main())
