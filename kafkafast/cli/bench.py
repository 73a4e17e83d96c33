"""`kafkafast bench produce|consume|e2e`: Kafka's perf-test tools against any
Kafka-compatible broker.

`produce` is kafka-producer-perf-test.sh (--num-records, --record-size, --throughput,
--producer-props), `consume` kafka-consumer-perf-test.sh (--messages), `e2e` Kafka's
EndToEndLatency (one record at a time, produced and read back). The load comes from
confluent-kafka (librdkafka) when it is installed, else from kafkafast's own client
(`--client` picks). On a terminal a progress line (records/s, MB/s, latency percentiles)
is redrawn every second on stderr; at the end a summary table goes to stdout, or one
JSON document with --json."""
from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import time
import uuid
from typing import Any, Callable

from kafkafast.cli.common import (CommandError, add_bootstrap, merged_client_properties, normalize_bootstrap,
                                  parser_for, print_json, print_table, run_admin, settings_for)
from kafkafast.client.cluster import TopicPartition
from kafkafast.client.consumer import AIOConsumer
from kafkafast.client.producer import AIOProducer
from kafkafast.client.sync import KafkaConsumer, KafkaProducer
from kafkafast.protocol.errors import KafkaError

NAME = "bench"
MAX_SAMPLES = 500_000
MB = 1024 * 1024  # Kafka's perf tools count MB as 2^20 bytes
CONSUMER_HEADER = ("data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, "
                   "fetch.MB.sec, fetch.nMsg.sec")


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "producer, consumer and end-to-end latency benchmarks (Kafka's perf-test flags)", [
        "kafkafast bench produce --bootstrap-server 127.0.0.1:9092 --topic perf --num-records 1000000 "
        "--record-size 100 --throughput -1 --producer-props acks=1 linger.ms=5",
        "kafkafast bench consume --bootstrap-server 127.0.0.1:9092 --topic perf --messages 1000000 --json",
    ])
    p.add_argument("mode", choices=("produce", "consume", "e2e"))
    add_bootstrap(p, required=False)
    p.add_argument("--broker-list", dest="broker_list", help=argparse.SUPPRESS)
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, help="produce/e2e: records to send")
    p.add_argument("--messages", type=int, help="consume: records to read")
    p.add_argument("--record-size", type=int, default=100, help="bytes per record value (default 100)")
    p.add_argument("--payload-file", help="produce: values are the lines of this file (random order)")
    p.add_argument("--payload-delimiter", default="\\n",
                   help="produce: what separates the payloads of --payload-file (default \\n)")
    p.add_argument("--payload-monotonic", action="store_true",
                   help="produce: the values are the record numbers 1, 2, 3 ... (as text)")
    p.add_argument("--throughput", type=float, default=-1, help="records/s cap, -1 for none")
    p.add_argument("--producer-props", nargs="+", default=[], metavar="K=V", help="producer properties")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE")
    p.add_argument("--consumer-props", nargs="+", default=[], metavar="K=V", help="consumer properties")
    p.add_argument("--group", help="consume: group id (default: a new one, reading from the beginning)")
    p.add_argument("--timeout", type=float, default=60.0, help="consume/e2e: seconds to wait for records")
    p.add_argument("--client", choices=("auto", "confluent", "kafkafast"), default="auto",
                   help="load generator (auto: confluent-kafka if installed)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the table")
    p.add_argument("--print-metrics", action="store_true",
                   help="after the summary, every measurement as kafka-*-perf-test's 'Metric Name  Value' block")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="consume: a stats line per --reporting-interval instead of the final one")
    p.add_argument("--hide-header", action="store_true", help="consume: no header line above the stats")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS",
                   help="consume: the time format of the stats (Java's yyyy MM dd HH mm ss SSS letters)")
    p.add_argument("--from-latest", action="store_true",
                   help="consume: start at the log end when the group has no committed offset")
    p.add_argument("--reporting-interval", type=float, default=1.0, help="seconds between progress lines")


def _use_confluent(choice: str) -> bool:
    if choice == "kafkafast":
        return False
    try:
        import confluent_kafka  # noqa: F401  (deferred: optional, heavy)
        return True
    except ImportError:
        if choice == "confluent":
            raise CommandError("--client confluent: confluent-kafka is not installed") from None
        return False


def _confluent_errors() -> tuple[type[BaseException], ...]:
    try:
        from confluent_kafka import KafkaException  # deferred: optional, heavy (librdkafka)
    except ImportError:
        return ()
    return (KafkaException,)


def percentiles(samples: list[float], ps: tuple[float, ...] = (50, 95, 99, 99.9)) -> dict[str, float]:
    if not samples:
        return {f"p{p:g}": 0.0 for p in ps}
    s = sorted(samples)
    return {f"p{p:g}": s[min(len(s) - 1, int(len(s) * p / 100))] for p in ps}


class Progress:
    """Counts records and bytes, keeps a bounded sample of latencies, redraws a line."""

    def __init__(self, total: int, interval: float, live: bool) -> None:
        self.total = total
        self.interval = interval
        self.live = live
        self.count = 0
        self.bytes = 0
        self.errors = 0
        self.samples: list[float] = []
        self.every = max(1, total // MAX_SAMPLES)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.max_latency = 0.0
        self.last_draw = self.started
        self.window: list[float] = []

    def record(self, nbytes: int, latency_ms: float | None = None) -> None:
        self.count += 1
        self.bytes += nbytes
        if latency_ms is not None:
            self.max_latency = max(self.max_latency, latency_ms)
            if self.count % self.every == 0:
                self.samples.append(latency_ms)
            self.window.append(latency_ms)

    def tick(self) -> None:
        now = time.monotonic()
        if not self.live or now - self.last_draw < self.interval:
            return
        self.last_draw = now
        el = max(now - self.started, 1e-9)
        lat = percentiles(self.window[-20000:]) if self.window else None
        self.window = []
        line = (f"\r{self.count}/{self.total} records  {self.count / el:,.0f} rec/s  "
                f"{self.bytes / el / MB:,.2f} MB/s")
        if lat:
            line += f"  latency p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} ms"
        sys.stderr.write(line.ljust(100)[:120])
        sys.stderr.flush()

    def done(self) -> None:
        self.ended = self.ended or time.monotonic()
        if self.live:
            sys.stderr.write("\n")

    def elapsed(self) -> float:
        return max((self.ended or time.monotonic()) - self.started, 1e-9)

    def producer_line(self) -> str:
        """kafka-producer-perf-test's final line (MB = 2^20 bytes; percentiles in whole ms)."""
        el, n = self.elapsed(), max(self.count, 1)
        lat = sorted(self.samples) or [0.0]
        ps = [int(lat[min(len(lat) - 1, int(len(lat) * p))]) for p in (0.5, 0.95, 0.99, 0.999)]
        return (f"{self.count} records sent, {self.count / el:.1f} records/sec ({self.bytes / el / MB:.2f} MB/sec), "
                f"{sum(lat) / len(lat) if self.samples else 0.0:.2f} ms avg latency, {self.max_latency:.2f} ms max "
                f"latency, {ps[0]} ms 50th, {ps[1]} ms 95th, {ps[2]} ms 99th, {ps[3]} ms 99.9th.")

    def summary(self, **extra: Any) -> dict[str, Any]:
        el = self.elapsed()
        doc: dict[str, Any] = {"records": self.count, "bytes": self.bytes, "seconds": round(el, 3),
                               "records_per_sec": round(self.count / el, 1), "mb_per_sec": round(self.bytes / el / MB, 3),
                               "errors": self.errors}
        if self.samples:
            doc["latency_ms"] = {"avg": round(sum(self.samples) / len(self.samples), 3),
                                 "max": round(max(self.samples), 3),
                                 **{k: round(v, 3) for k, v in percentiles(self.samples).items()}}
        doc.update(extra)
        return doc


def java_date(fmt: str, epoch_ms: int) -> str:
    """`epoch_ms` in local time with the letters of Java's SimpleDateFormat that the perf tool
    uses (yyyy MM dd HH mm ss SSS); other characters are kept."""
    when = datetime.datetime.fromtimestamp(epoch_ms / 1000)
    out = fmt
    for token, value in (("yyyy", f"{when.year:04d}"), ("SSS", f"{epoch_ms % 1000:03d}"), ("MM", f"{when.month:02d}"),
                         ("dd", f"{when.day:02d}"), ("HH", f"{when.hour:02d}"), ("mm", f"{when.minute:02d}"),
                         ("ss", f"{when.second:02d}")):
        out = out.replace(token, value)
    return out


class ConsumerStats:
    """kafka-consumer-perf-test's lines: the header, then one line at the end (or one per
    --reporting-interval with --show-detailed-stats). Its rebalance time here is the time
    until the first record arrived; MB are 2^20 bytes."""

    def __init__(self, args: argparse.Namespace, prog: Progress) -> None:
        self.args, self.prog = args, prog
        self.start_ms = int(time.time() * 1000)
        self.first: float | None = None
        self.lines: list[str] = []
        if not args.hide_header:
            first_cols = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
            self.lines.append(f"{first_cols}, {CONSUMER_HEADER}")
        self.last = (time.monotonic(), self.start_ms, 0, 0)  # monotonic, wall ms, bytes, records
        self.join_reported = False

    def _rates(self, mb: float, msgs: int, ms: float, join_ms: int) -> str:
        fetch_ms = ms - join_ms
        return (f"{join_ms}, {int(fetch_ms)}, {mb / (fetch_ms / 1000) if fetch_ms > 0 else 0.0:.4f}, "
                f"{msgs / (fetch_ms / 1000) if fetch_ms > 0 else 0.0:.4f}")

    def tick(self) -> None:
        if not self.args.show_detailed_stats or time.monotonic() - self.last[0] < self.args.reporting_interval:
            return
        now, now_ms = time.monotonic(), int(time.time() * 1000)
        _, last_ms, last_bytes, last_count = self.last
        interval_ms = max(now_ms - last_ms, 1)
        mb, msgs = (self.prog.bytes - last_bytes) / MB, self.prog.count - last_count
        join_ms = 0
        if self.first is not None and not self.join_reported:
            join_ms, self.join_reported = int((self.first - self.prog.started) * 1000), True
        self.lines.append(f"{java_date(self.args.date_format, now_ms)}, 0, {self.prog.bytes / MB:.4f}, "
                          f"{1000 * mb / interval_ms:.4f}, {self.prog.count}, {1000 * msgs / interval_ms:.4f}, "
                          + self._rates(mb, msgs, interval_ms, join_ms))
        self.last = (now, now_ms, self.prog.bytes, self.prog.count)

    def finish(self) -> None:
        if self.args.show_detailed_stats:
            return
        el_ms = self.prog.elapsed() * 1000
        mb = self.prog.bytes / MB
        join_ms = int((self.first - self.prog.started) * 1000) if self.first is not None else 0
        self.lines.append(f"{java_date(self.args.date_format, self.start_ms)}, "
                          f"{java_date(self.args.date_format, self.start_ms + int(el_ms))}, {mb:.4f}, "
                          f"{mb / (el_ms / 1000):.4f}, {self.prog.count}, {self.prog.count / (el_ms / 1000):.4f}, "
                          + self._rates(mb, self.prog.count, el_ms, join_ms))


def _pace(throughput: float, sent: int, started: float) -> None:
    if throughput > 0:
        ahead = sent / throughput - (time.monotonic() - started)
        if ahead > 0.001:
            time.sleep(ahead)


def _payloads(args: argparse.Namespace) -> Callable[[int], bytes]:
    if args.payload_monotonic:
        return lambda i: str(i + 1).encode()
    if args.payload_file:
        delimiter = args.payload_delimiter.encode().decode("unicode_escape").encode()
        with open(args.payload_file, "rb") as fh:
            lines = [ln for ln in fh.read().split(delimiter) if ln.strip()]
        if not lines:
            raise CommandError(f"{args.payload_file} has no lines")
        return lambda i: random.choice(lines)
    value = bytes(random.getrandbits(8) % 26 + 65 for _ in range(args.record_size))
    return lambda i: value


def _props(args: argparse.Namespace, which: str) -> dict[str, str]:
    if which == "producer":
        props = merged_client_properties(args.command_config, args.producer_config, args.producer_props)
    else:
        props = merged_client_properties(args.command_config, args.consumer_config, args.consumer_props)
    props.pop("bootstrap.servers", None)
    return props


def bench_produce(args: argparse.Namespace, bootstrap: str, live: bool) -> dict[str, Any]:
    n = args.num_records
    if not n or n <= 0:
        raise CommandError("produce needs --num-records")
    payload = _payloads(args)
    props = _props(args, "producer")
    prog = Progress(n, args.reporting_interval, live)
    if _use_confluent(args.client):
        from confluent_kafka import Producer  # deferred: optional, heavy (librdkafka)

        p = Producer({"bootstrap.servers": bootstrap, **props})
        prog.started = time.monotonic()

        def make_cb(t0: float, size: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, _msg: Any) -> None:
                if err is not None:
                    prog.errors += 1
                else:
                    prog.record(size, (time.monotonic() - t0) * 1000)
            return cb

        for i in range(n):
            value = payload(i)
            while True:
                try:
                    p.produce(args.topic, value, callback=make_cb(time.monotonic(), len(value)))
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
            _pace(args.throughput, i + 1, prog.started)
            if i % 1000 == 0:
                prog.tick()
        while p.flush(0.2):
            prog.tick()
        client = "confluent-kafka"
    else:
        kp = KafkaProducer(bootstrap, **settings_for(AIOProducer, props))
        prog.started = time.monotonic()  # connected: measure sending, not start-up
        try:
            for i in range(n):
                value = payload(i)
                t0 = time.monotonic()
                fut = kp.send(args.topic, value)

                def done(f: Any, t0: float = t0, size: int = len(value)) -> None:
                    try:
                        f.result()
                        prog.record(size, (time.monotonic() - t0) * 1000)
                    except KafkaError:
                        prog.errors += 1
                fut.add_done_callback(done)
                _pace(args.throughput, i + 1, prog.started)
                if i % 1000 == 0:
                    prog.tick()
            kp.flush()
        finally:
            kp.close()
        client = "kafkafast"
    prog.done()
    doc = prog.summary(mode="produce", client=client, topic=args.topic, record_size=args.record_size)
    doc["kafka_lines"] = [prog.producer_line()]
    return doc


def bench_consume(args: argparse.Namespace, bootstrap: str, live: bool) -> dict[str, Any]:
    n = args.messages or args.num_records
    if not n or n <= 0:
        raise CommandError("consume needs --messages")
    props = _props(args, "consumer")
    prog = Progress(n, args.reporting_interval, live)
    deadline = time.monotonic() + args.timeout
    first: float | None = None
    stats = ConsumerStats(args, prog)
    reset = "latest" if args.from_latest else "earliest"
    if _use_confluent(args.client):
        from confluent_kafka import Consumer  # deferred: optional, heavy (librdkafka)

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": args.group or f"perf-consumer-{uuid.uuid4().hex[:8]}",
                      "auto.offset.reset": reset, "enable.auto.commit": False, **props})
        c.subscribe([args.topic])
        try:
            while prog.count < n and time.monotonic() < deadline:
                msgs = c.consume(min(10000, n - prog.count), 0.5)
                for m in msgs:
                    if m.error() is None:
                        prog.record(len(m.value() or b"") + len(m.key() or b""))
                if msgs and first is None:
                    first = stats.first = time.monotonic()
                prog.tick()
                stats.tick()
            prog.ended = time.monotonic()  # closing the consumer is not consuming
        finally:
            c.close()
        client = "confluent-kafka"
    else:
        settings = settings_for(AIOConsumer, props)
        settings["auto_offset_reset"] = reset
        settings["enable_auto_commit"] = False
        kc = KafkaConsumer(args.topic, bootstrap_servers=bootstrap,
                           group_id=args.group or f"perf-consumer-{uuid.uuid4().hex[:8]}", **settings)
        try:
            while prog.count < n and time.monotonic() < deadline:
                for recs in kc.poll(500, max_records=n - prog.count).values():
                    if first is None:
                        first = stats.first = time.monotonic()
                    for r in recs:
                        prog.record(len(r.value or b"") + len(r.key or b""))
                prog.tick()
                stats.tick()
            prog.ended = time.monotonic()
        finally:
            kc.close()
        client = "kafkafast"
    prog.done()
    if prog.count < n:
        prog.errors += n - prog.count
        stats.lines.append(f"WARNING: Exiting before consuming the expected number of messages: timeout "
                           f"({int(args.timeout * 1000)} ms) exceeded. You can use the --timeout option to increase "
                           "the timeout.")
    stats.finish()
    fetch_s = (prog.ended or time.monotonic()) - first if first else 0.0
    doc = prog.summary(mode="consume", client=client, topic=args.topic,
                       fetch_seconds=round(fetch_s, 3),
                       fetch_records_per_sec=round(prog.count / fetch_s, 1) if fetch_s else 0.0,
                       timed_out=prog.count < n)
    doc["kafka_lines"] = stats.lines
    return doc


def bench_e2e(args: argparse.Namespace, bootstrap: str, live: bool) -> dict[str, Any]:
    """One record at a time to partition 0: produce (acks=all), then poll until it is read back."""
    n = args.num_records or 1000
    payload = _payloads(args)
    _create_if_missing(args)
    prog = Progress(n, args.reporting_interval, live)
    pprops = {"acks": "all", "linger.ms": "0", **_props(args, "producer")}
    cprops = _props(args, "consumer")
    if _use_confluent(args.client):
        from confluent_kafka import Consumer, Producer  # deferred: optional, heavy (librdkafka)
        from confluent_kafka import TopicPartition as CTP  # deferred: optional, heavy (librdkafka)

        p = Producer({"bootstrap.servers": bootstrap, **pprops})
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100, **cprops})
        _, end = c.get_watermark_offsets(CTP(args.topic, 0), timeout=args.timeout)
        c.assign([CTP(args.topic, 0, end)])  # an explicit offset: no reset racing the first record

        def send(value: bytes) -> None:
            p.produce(args.topic, value, partition=0)
            if p.flush(args.timeout):
                raise CommandError(f"record not acknowledged within {args.timeout}s")

        def received(wait: float) -> bool:
            m = c.poll(min(wait, 0.1))
            return m is not None and m.error() is None

        try:
            _round_trips(args, n, payload, prog, send, received)
        finally:
            c.close()
        client = "confluent-kafka"
    else:
        kp = KafkaProducer(bootstrap, **settings_for(AIOProducer, pprops))
        kc = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100, **settings_for(AIOConsumer, cprops))
        try:
            tp = TopicPartition(args.topic, 0)
            kc.assign([tp])
            kc.seek_to_end(tp)
            kc.position(tp)
            _round_trips(args, n, payload, prog, lambda value: kp.send(args.topic, value, partition=0).get(args.timeout),
                         lambda wait: any(kc.poll(int(min(wait, 0.1) * 1000)).values()))
        finally:
            kc.close()
            kp.close()
        client = "kafkafast"
    prog.done()
    return prog.summary(mode="e2e", client=client, topic=args.topic, record_size=args.record_size)


def _create_if_missing(args: argparse.Namespace) -> None:
    """As Kafka's EndToEndLatency: a missing topic is created with 1 partition, replication factor 1."""
    async def ensure(admin: Any) -> None:
        if args.topic not in await admin.list_topics():
            print(f'Topic "{args.topic}" does not exist. Will create topic with 1 partition(s) and '
                  "replication factor = 1", file=sys.stderr)
            await admin.create_topics([(args.topic, 1)], replication_factor=1, exist_ok=True)
    run_admin(args, ensure)


def _round_trips(args: argparse.Namespace, n: int, payload: Callable[[int], bytes], prog: Progress,
                 send: Callable[[bytes], Any], received: Callable[[float], bool]) -> None:
    """n times: send a record (blocking until acknowledged), wait until it is read back,
    and record the round trip's time."""
    for i in range(n):
        value = payload(i)
        t0 = time.monotonic()
        send(value)
        while not received(max(0.0, t0 + args.timeout - time.monotonic())):
            if time.monotonic() > t0 + args.timeout:
                raise CommandError(f"record {i} not read back within {args.timeout}s")
        prog.record(len(value), (time.monotonic() - t0) * 1000)
        prog.tick()


def _rows(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    rows = [(k, v) for k, v in doc.items() if not isinstance(v, (dict, list))]
    for k, v in doc.get("latency_ms", {}).items():
        rows.append((f"latency {k} (ms)", v))
    return rows


def _metrics_block(doc: dict[str, Any]) -> None:
    """--print-metrics: the measurements as Kafka's ToolsUtils.printMetrics lays out a client's metrics."""
    rows = [(f"kafkafast-bench:{k.replace(' ', '-')}:{{mode={doc['mode']}}}", v) for k, v in _rows(doc)
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
    width = max(len(k) for k, _ in rows)
    print(f"\n{'Metric Name':<{width}}   Value")
    for k, v in rows:
        print(f"{k:<{width}} : {v:.3f}")


def run(args: argparse.Namespace) -> int:
    if not args.bootstrap_server and not args.broker_list:
        raise CommandError("--bootstrap-server is required")
    bootstrap = args.bootstrap_server = args.bootstrap_server or normalize_bootstrap(args.broker_list)
    live = sys.stderr.isatty() and not os.environ.get("KAFKAFAST_NO_PROGRESS")
    fn = {"produce": bench_produce, "consume": bench_consume, "e2e": bench_e2e}[args.mode]
    try:
        doc = fn(args, bootstrap, live)
    except _confluent_errors() as exc:  # confluent-kafka's KafkaException: its KafkaError's text
        raise CommandError(f"bench {args.mode}: {getattr(exc.args[0], 'str', lambda: exc)()}") from exc
    kafka_lines = doc.pop("kafka_lines", [])
    if args.json:
        print_json(doc)
    else:
        print_table(["METRIC", "VALUE"], _rows(doc))
        for line in kafka_lines:  # the Kafka tool's own summary, last (scripts read the last line)
            print(line)
        if args.print_metrics:
            _metrics_block(doc)
    return 1 if doc.get("errors") else 0
