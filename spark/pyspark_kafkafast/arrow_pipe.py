"""The Python half of the JVM columnar reader (format `kafkafast_arrow`, `java/KafkafastArrowSource.java`).

Spark's Python data sources hand rows to the JVM, which copies every column of every row into
an UnsafeRow whatever the query reads (no column pruning, no columnar scan in Spark 4.3). The
JVM reader asks for the columns the query needs and gives Spark `ColumnarBatch`es of Arrow
vectors; the records still come from this package's fetch and compiled Arrow decoder, served
by this process:

    python -m pyspark_kafkafast.arrow_pipe <unix socket path>

One such process per JVM (driver or executor), started by the JVM on first use: it imports
everything once, binds the socket, prints READY and forks a child per connection (so a task
pays a fork, not an interpreter start), and exits when its standard input (a pipe from the
JVM) closes. A connection sends one JSON line:

    {"op": "plan", "options": {...}}                    -> one JSON line {"ranges": [[topic, partition, start, until], ...]}
                                                           or {"error": "..."}
    {"op": "read", "options": {...}, "range": [t, p, s, u], "columns": [...]}
        -> an Arrow IPC stream of those columns of the source schema (`schema.py`), then a
           trailer: b"KFOK", or b"KFER" + 4-byte big-endian length + UTF-8 message when the
           read failed (the stream is ended at a batch boundary first). A stream without a
           trailer was cut short: the JVM fails the task rather than take it as complete.
"""
from __future__ import annotations

import json
import os
import socketserver
import struct
import sys
import threading
import traceback

import pyarrow as pa

import pyspark_kafkafast.broker_calls  # noqa: F401 - imported here once, not by every forked child
from pyspark_kafkafast.options import parse_source_options
from pyspark_kafkafast.planning import OffsetRange
from pyspark_kafkafast.readers import KafkaFastBatchReader, read_offset_range
from pyspark_kafkafast.schema import arrow_schema, source_schema

OK, ERROR = b"KFOK", b"KFER"


def plan(options: dict) -> list[list]:
    opts = parse_source_options(options, streaming=False)
    reader = KafkaFastBatchReader(opts, source_schema(False))
    return [[p.offset_range.topic, p.offset_range.partition, p.offset_range.start, p.offset_range.until]
            for p in reader.partitions()]


def read(options: dict, offset_range: list, columns: list[str], out) -> None:
    """Writes the Arrow stream of `columns` of one offset range, then the trailer."""
    schema = arrow_schema(source_schema("headers" in columns))
    pruned = pa.schema([schema.field(c) for c in columns])
    writer = pa.ipc.new_stream(out, pruned)
    try:
        opts = parse_source_options(options, streaming=False)
        for batch in read_offset_range(opts, schema, OffsetRange(*offset_range)):
            writer.write_batch(batch.select(columns))
    except Exception as exc:  # the stream is at a batch boundary: end it, then say why
        writer.close()
        message = f"{type(exc).__name__}: {exc}".encode()
        out.write(ERROR + struct.pack(">I", len(message)) + message)
        return
    writer.close()
    out.write(OK)


class _Handler(socketserver.StreamRequestHandler):
    wbufsize = 1 << 20

    def handle(self) -> None:
        req = json.loads(self.rfile.readline())
        if req.get("op") == "plan":
            try:
                answer = {"ranges": plan(req["options"])}
            except Exception as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            self.wfile.write(json.dumps(answer).encode() + b"\n")
        elif req.get("op") == "read":
            read(req["options"], req["range"], req["columns"], self.wfile)
        else:
            self.wfile.write(json.dumps({"error": f"unknown op {req.get('op')!r}"}).encode() + b"\n")


class _Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    block_on_close = False


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def main(argv: list[str]) -> int:
    path = argv[0]
    if os.path.exists(path):
        os.unlink(path)
    server = _Server(path, _Handler)
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
