"""`kafkafast` command line: one entry point, one module per command in kafkafast/cli/.

    kafkafast broker [-c server.properties] [--set key=value ...] [--workers N] [--as-kafka X.Y] [--help-configs]
    kafkafast topics|groups|share-groups|configs|produce|consume|dump-log|cluster|reassign-partitions|acls|bench|health|
              log-dirs|broker-api-versions|get-offsets|delete-records|transactions|features ...
    kafkafast --version

The broker's properties file uses Kafka's names (listeners, log.dirs, num.partitions,
log.segment.bytes, log.retention.ms, ...); `--set` overrides single keys. The other
commands take the flags of Kafka's shell tools (`kafkafast <command> --help`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import os
import sys

from kafkafast.broker.kafka_releases import release_versions
from kafkafast.config import BrokerConfig, ConfigError
from kafkafast.config_def import help_text

# command name -> module in kafkafast.cli with add_parser(subparsers) and run(args) -> exit code
COMMANDS = {
    "topics": "topics", "groups": "groups", "configs": "configs", "produce": "produce", "consume": "consume",
    "dump-log": "dump_log", "cluster": "cluster", "bench": "bench", "health": "health",
    "reassign": "reassign", "acls": "acls", "log-dirs": "log_dirs", "broker-api-versions": "broker_api_versions",
    "get-offsets": "get_offsets", "delete-records": "delete_records", "features": "features",
    "transactions": "transactions", "share-groups": "share_groups",
}
# other names of a command (Kafka's tool name without kafka- and .sh)
ALIASES = {"reassign-partitions": "reassign"}


def package_version() -> str:
    try:
        return importlib.metadata.version("kafkafast")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


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
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run a broker")
    b.add_argument("-c", "--config", help="properties file with Kafka's property names")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one property")
    b.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: num.workers, else the number of CPUs; "
                        "0: serve in one process)")
    b.add_argument("--log-level", default="INFO")
    b.add_argument("--as-kafka", metavar="X.Y", help="serve only the API versions Kafka X.Y served "
                                                     "(property kafkafast.as.kafka)")
    b.add_argument("--help-configs", action="store_true",
                   help="print every broker config: documentation, type and default, and exit")
    modules = {name: importlib.import_module(f"kafkafast.cli.{mod}") for name, mod in COMMANDS.items()}
    for m in modules.values():
        m.add_parser(sub)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's usage, not the top-level one's
        innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    command = ALIASES.get(args.command, args.command)
    if command in modules:
        return run_command(modules[command], args)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    if args.command == "broker":
        if args.help_configs:
            try:
                print(help_text())
            except BrokenPipeError:  # `--help-configs | head`
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        try:
            return run_broker(args)
        except ConfigError as exc:
            print(f"kafkafast: cannot start: {exc}", file=sys.stderr)
            return 1
    return 2


def run_broker(args: argparse.Namespace) -> int:
    """The broker until it stops; ConfigError when it cannot start (a bad value, an unusable
    log dir, the metrics port taken, ZooKeeper unreachable)."""
    overrides = parse_sets(args.set)
    if args.as_kafka:
        try:
            release_versions(args.as_kafka)
        except ValueError as exc:
            raise SystemExit(f"--as-kafka: {exc}") from None
        overrides["kafkafast.as.kafka"] = args.as_kafka
    try:
        config = BrokerConfig.load(args.config, overrides)
    except OSError as exc:
        raise ConfigError(f"{args.config}: {exc.strerror}") from None
    config.check_log_dirs()
    workers, num_workers = args.workers, config.get("num.workers")
    if workers is None and num_workers is not None:
        workers = int(num_workers)
    if workers is None:
        workers = os.cpu_count() or 1
    from kafkafast.metrics.server import start_for_broker  # deferred: the broker's modules load only for `broker`
    from kafkafast.runtime.server import ListenerError, run_server  # deferred: as above

    try:
        metrics = start_for_broker(config, workers)  # before the fork: workers inherit recording
    except OSError as exc:
        host = config.get("metrics.host")
        raise ConfigError(f"Invalid value {config.get('metrics.port')} for configuration metrics.port: "
                          f"cannot listen on {host}:{config.get('metrics.port')}: {exc.strerror}") from None
    try:
        try:
            from kafkafast.runtime.supervisor import run_supervisor  # deferred: as above
        except ImportError:
            run_supervisor = None
        if workers and run_supervisor is not None:
            return run_supervisor(config, workers, control_class(config), worker_placement_class(config))
        return run_server(config, control_class(config), placement_class(config))
    except ListenerError as exc:
        raise ConfigError(exc.strerror) from None
    finally:
        if metrics is not None:
            metrics.close()


def control_class(config: BrokerConfig) -> type:
    """The broker's control plane: ZooKeeper's (`zookeeper.connect`, kafkafast/cluster) or the
    local one; the one `Broker` class runs with it in one process (`placement_class`) or over a
    worker's placement (`worker_placement_class`). The runtime that runs it (kafkafast/runtime)
    imports nothing of kafkafast/cluster."""
    if config.get("zookeeper.connect"):
        from kafkafast.cluster.zk_control import ZkControl  # deferred: cluster mode only (kazoo)

        return ZkControl
    from kafkafast.broker.control import LocalControl  # deferred: the broker's modules load only for `broker`

    return LocalControl


def placement_class(config: BrokerConfig) -> type:
    """The placement of a broker in one process (every replica here), whatever its control plane."""
    from kafkafast.broker.placement import LocalPlacement  # deferred: the broker's modules load only for `broker`

    return LocalPlacement


def worker_placement_class(config: BrokerConfig) -> type:
    """Each worker's placement (the replica state in the slots), whatever the control plane."""
    from kafkafast.runtime.placement import WorkerPlacement  # deferred: the broker's modules load only for `broker`

    return WorkerPlacement


def innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` were parsed for (`kafkafast cluster leader-election`)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


def run_command(module: object, args: argparse.Namespace) -> int:
    """Runs a client command: its errors become one line on stderr and exit code 1."""
    from kafkafast.cli.common import CommandError, normalize_bootstrap, unreachable  # deferred: light start
    from kafkafast.protocol.errors import KafkaError, NetworkError  # deferred: light start

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if getattr(args, "bootstrap_server", None):
            args.bootstrap_server = normalize_bootstrap(args.bootstrap_server)
        return int(module.run(args))  # type: ignore[attr-defined]
    except BrokenPipeError:  # `kafkafast consume ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except NetworkError as exc:
        where = getattr(args, "bootstrap_server", None)
        print(f"Error: {(where and unreachable(where)) or exc}", file=sys.stderr)
        return 1
    except (CommandError, KafkaError, ValueError, OSError) as exc:
        name = type(exc).__name__
        print(f"Error: {exc}" if isinstance(exc, CommandError) else f"Error: {name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
