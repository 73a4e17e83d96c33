"""`kafkafast produce`: the console producer — one record per line of stdin.

With `--property parse.key=true` a line is `key<key.separator>value` (separator: a tab by
default); with `parse.headers=true` the line starts with headers
`k1:v1,k2:v2<headers.delimiter>` (delimiter: a tab). Nothing is printed on success; a
record that fails is reported on stderr and the exit code is 1."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from kafkafast.cli.common import (CommandError, add_bootstrap, merged_client_properties, parse_kv, parser_for,
                                  settings_for)
from kafkafast.client.producer import AIOProducer
from kafkafast.client.sync import KafkaProducer
from kafkafast.protocol.errors import KafkaError

NAME = "produce"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "write lines from stdin as records (kafka-console-producer.sh flags)", [
        "printf 'k1\\tv1\\nk2\\tv2\\n' | kafkafast produce --bootstrap-server 127.0.0.1:9092 --topic events "
        "--property parse.key=true --compression-codec lz4",
    ])
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="write every record to this partition")
    p.add_argument("--property", action="append", default=[], metavar="K=V",
                   help="parse.key, key.separator, parse.headers, headers.delimiter, headers.separator, "
                        "headers.key.separator, null.marker, ignore.error")
    p.add_argument("--producer-property", action="append", default=[], metavar="K=V", help="producer setting")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="producer properties file")
    p.add_argument("--compression-codec", "--compression", dest="compression", nargs="?", const="gzip",
                   choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--request-required-acks", "--acks", dest="acks", choices=("0", "1", "-1", "all"))
    p.add_argument("--line-reader-encoding", default="utf-8", help=argparse.SUPPRESS)


def _unescape(s: str) -> str:
    return s.encode("utf-8").decode("unicode_escape")


def parse_line(line: str, props: dict[str, str]) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """(key, value, headers) of one input line under the console producer's properties."""
    null = props.get("null.marker")
    headers: list[tuple[str, bytes | None]] = []
    if props.get("parse.headers", "false").lower() == "true":
        delim = _unescape(props.get("headers.delimiter", "\t"))
        head, sep, line = line.partition(delim)
        if not sep:
            raise CommandError(f"no headers delimiter {delim!r} in line {line[:60]!r}")
        kv_sep = props.get("headers.key.separator", ":")
        for item in head.split(props.get("headers.separator", ",")):
            if not item:
                continue
            hk, has, hv = item.partition(kv_sep)
            headers.append((hk, None if not has or hv == null else hv.encode()))
    key: bytes | None = None
    if props.get("parse.key", "false").lower() == "true":
        ksep = _unescape(props.get("key.separator", "\t"))
        k, sep, line = line.partition(ksep)
        if not sep:
            raise CommandError(f"no key separator {ksep!r} in line {k[:60]!r}")
        key = None if k == null else k.encode()
    value = None if line == null else line.encode()
    return key, value, headers


def run(args: argparse.Namespace) -> int:
    props = parse_kv(args.property, "--property")
    client_props = merged_client_properties(args.command_config, args.producer_config, args.producer_property)
    if args.compression:
        client_props["compression.type"] = args.compression
    if args.acks:
        client_props["acks"] = args.acks
    settings = settings_for(AIOProducer, client_props)
    settings.setdefault("client_id", "console-producer")
    ignore_error = props.get("ignore.error", "false").lower() == "true"
    producer = KafkaProducer(args.bootstrap_server, **settings)
    failed = 0
    pending: list[Any] = []

    def settle(block: bool) -> None:
        nonlocal failed
        keep = []
        for f in pending:
            if not block and not f.done():
                keep.append(f)
                continue
            try:
                f.get(60)
            except (KafkaError, TimeoutError) as exc:
                failed += 1
                print(f"Error when sending record: {type(exc).__name__}: {exc}", file=sys.stderr)
        pending[:] = keep

    try:
        for n, raw in enumerate(sys.stdin.buffer, 1):
            line = raw.decode(args.line_reader_encoding).rstrip("\r\n")
            try:
                key, value, headers = parse_line(line, props)
            except CommandError as exc:
                if not ignore_error:
                    raise CommandError(f"line {n}: {exc}") from exc
                print(f"skipping line {n}: {exc}", file=sys.stderr)
                continue
            pending.append(producer.send(args.topic, value, key, headers=headers or None, partition=args.partition))
            if len(pending) >= 10000:
                settle(False)
        producer.flush()
        settle(True)
    finally:
        producer.close()
    return 1 if failed else 0
