"""`kafkafast consume`: the console consumer — records to stdout, one per line.

Without --group the partitions are assigned directly (no group, nothing committed); with
--group the consumer joins it and commits as it goes. `--property print.key=true` etc.
shape the line as kafka-console-consumer.sh does; `--format` takes a template instead:
%t topic, %p partition, %o offset, %T timestamp (ms), %k key, %v value, %h headers
(k:v,...), %K / %V lengths, \\t and \\n. Stops after --max-messages records or when no
record arrives for --timeout-ms (default: run until interrupted)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kafkafast.cli.common import (CommandError, add_bootstrap, merged_client_properties, parse_kv, parser_for,
                                  settings_for)
from kafkafast.cli.groups import parse_datetime
from kafkafast.client.cluster import TopicPartition
from kafkafast.client.consumer import AIOConsumer
from kafkafast.client.sync import KafkaConsumer

NAME = "consume"


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "print records of a topic to stdout (kafka-console-consumer.sh flags)", [
        "kafkafast consume --bootstrap-server 127.0.0.1:9092 --topic events --from-beginning --max-messages 10 "
        "--property print.key=true --property print.timestamp=true",
        "kafkafast consume --bootstrap-server 127.0.0.1:9092 --topic events --partition 0 --offset 42 "
        "--format '%p:%o %k=%v\\n'",
    ])
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", help="consumer group to join (commits offsets)")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset without a committed one")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", default=None,
                   help="with --partition: earliest, latest or an offset (default latest)")
    p.add_argument("--from-datetime", metavar="YYYY-MM-DDTHH:mm:SS", help="start at the first record at or after it")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int, help="stop when no record arrives for this long")
    p.add_argument("--property", action="append", default=[], metavar="K=V",
                   help="print.key, print.value, print.timestamp, print.offset, print.partition, print.headers, "
                        "key.separator, line.separator, headers.separator, null.literal")
    p.add_argument("--consumer-property", action="append", default=[], metavar="K=V", help="consumer setting")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE", help="consumer properties file")
    p.add_argument("--format", help="output template (see above) instead of the print.* properties")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")


def _text(b: bytes | None, null: str) -> str:
    return null if b is None else b.decode("utf-8", "replace")


class Formatter:
    """The console consumer's DefaultMessageFormatter, or a --format template."""

    def __init__(self, props: dict[str, str], template: str | None) -> None:
        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, str(default)).lower() == "true"

        self.template = template.encode().decode("unicode_escape") if template else None
        self.print_key, self.print_value = flag("print.key"), flag("print.value", True)
        self.print_ts, self.print_offset = flag("print.timestamp"), flag("print.offset")
        self.print_partition, self.print_headers = flag("print.partition"), flag("print.headers")
        unesc = lambda s: s.encode().decode("unicode_escape")  # noqa: E731
        self.key_sep = unesc(props.get("key.separator", "\t"))
        self.line_sep = unesc(props.get("line.separator", "\n"))
        self.headers_sep = unesc(props.get("headers.separator", ","))
        self.header_kv_sep = unesc(props.get("headers.key.separator", ":"))
        self.null = props.get("null.literal", "null")

    def headers(self, rec: Any) -> str:
        if not rec.headers:
            return "NO_HEADERS"
        return self.headers_sep.join(f"{k}{self.header_kv_sep}{_text(v, self.null)}" for k, v in rec.headers)

    def format(self, rec: Any) -> str:
        if self.template is not None:
            return self._template(rec)
        parts = []
        if self.print_ts:
            parts.append(f"{'LogAppendTime' if rec.timestamp_type == 1 else 'CreateTime'}:{rec.timestamp}")
        if self.print_partition:
            parts.append(f"Partition:{rec.partition}")
        if self.print_offset:
            parts.append(f"Offset:{rec.offset}")
        if self.print_headers:
            parts.append(self.headers(rec))
        if self.print_key:
            parts.append(_text(rec.key, self.null))
        if self.print_value:
            parts.append(_text(rec.value, self.null))
        return self.key_sep.join(parts) + self.line_sep

    def _template(self, rec: Any) -> str:
        out, t, i = [], self.template or "", 0
        while i < len(t):
            ch = t[i]
            if ch == "%" and i + 1 < len(t):
                code = t[i + 1]
                i += 2
                out.append({
                    "t": lambda: rec.topic, "p": lambda: str(rec.partition), "o": lambda: str(rec.offset),
                    "T": lambda: str(rec.timestamp), "k": lambda: _text(rec.key, self.null),
                    "v": lambda: _text(rec.value, self.null), "h": lambda: self.headers(rec),
                    "K": lambda: str(-1 if rec.key is None else len(rec.key)),
                    "V": lambda: str(-1 if rec.value is None else len(rec.value)), "%": lambda: "%",
                }.get(code, lambda: "%" + code)())
                continue
            out.append(ch)
            i += 1
        return "".join(out)


def run(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise CommandError("--offset needs --partition")
    if args.group and args.partition is not None:
        raise CommandError("--group and --partition exclude each other (assign or join, not both)")
    fmt = Formatter(parse_kv(args.property, "--property"), args.format)
    client_props = merged_client_properties(args.command_config, args.consumer_config, args.consumer_property)
    settings = settings_for(AIOConsumer, client_props)
    settings.setdefault("client_id", "console-consumer")
    settings["auto_offset_reset"] = "earliest" if args.from_beginning else "latest"
    settings["isolation_level"] = args.isolation_level
    if args.group:
        consumer = KafkaConsumer(args.topic, bootstrap_servers=args.bootstrap_server, group_id=args.group, **settings)
    else:
        consumer = KafkaConsumer(bootstrap_servers=args.bootstrap_server, **settings)
    try:
        if not args.group:
            parts = [args.partition] if args.partition is not None else consumer._lt.run(
                _partitions(consumer, args.topic, args.timeout_ms))
            tps = [TopicPartition(args.topic, p) for p in parts]
            consumer.assign(tps)
            for tp in tps:  # let the initial position reset finish first, so it cannot undo a seek
                consumer.position(tp)
            if args.from_datetime:
                ts = parse_datetime(args.from_datetime)
                found = consumer.offsets_for_times({tp: ts for tp in tps})
                ends = consumer.end_offsets(tps)
                for tp in tps:
                    consumer.seek(tp, found[tp][0] if found.get(tp) else ends[tp])
            elif args.offset not in (None, "latest", "earliest"):
                try:
                    consumer.seek(tps[0], int(args.offset))
                except ValueError:
                    raise CommandError(f"--offset: earliest, latest or a number, not {args.offset!r}") from None
            elif args.offset == "earliest" or (args.offset is None and args.from_beginning):
                consumer.seek_to_beginning(*tps)
            else:
                consumer.seek_to_end(*tps)
        return _loop(consumer, fmt, args)
    finally:
        consumer.close()


async def _partitions(consumer: Any, topic: str, timeout_ms: int | None) -> list[int]:
    """The topic's partitions, waiting for its metadata no longer than --timeout-ms."""
    cluster = consumer._c.cluster
    cluster.add_topics([topic])
    return sorted(await cluster.wait_for_topic(topic, None if timeout_ms is None else timeout_ms / 1000))


def _loop(consumer: Any, fmt: Formatter, args: argparse.Namespace) -> int:
    out = sys.stdout
    count = 0
    last = time.monotonic()
    done: dict[Any, int] = {}  # partition -> next offset after the last record printed
    while args.max_messages is None or count < args.max_messages:
        batches = consumer.poll(200, max_records=None if args.max_messages is None else args.max_messages - count)
        got = False
        for records in batches.values():
            for rec in records:
                out.write(fmt.format(rec))
                done[(rec.topic, rec.partition)] = rec.offset + 1
                count += 1
                got = True
                if args.max_messages is not None and count >= args.max_messages:
                    break
            if args.max_messages is not None and count >= args.max_messages:
                break
        if got:
            out.flush()
            last = time.monotonic()
        elif args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= args.timeout_ms:
            break
    out.flush()
    if args.group and done:
        consumer.commit({TopicPartition(*tp): off for tp, off in done.items()})
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
