"""`kafkafast delete-records`: kafka-delete-records.sh — moves partitions' log start offsets
(DeleteRecords at each leader) from Kafka's JSON file
`{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}` (offset -1:
the high watermark)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from kafkafast.cli.common import CommandError, admin_tool_parser, java_exception, report_each, run_admin

NAME = "delete-records"


def add_parser(sub: Any) -> None:
    p = admin_tool_parser(sub, NAME, "delete records below an offset (kafka-delete-records.sh)", [
        "kafkafast delete-records --bootstrap-server 127.0.0.1:9092 --offset-json-file delete.json",
    ])
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}')


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read --offset-json-file {path}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version", 1) != 1:
        raise CommandError(f"Not supported version field value {doc.get('version') if isinstance(doc, dict) else doc}")
    seen: dict[tuple[str, int], int] = {}
    duplicates = []
    try:
        for e in doc["partitions"]:
            tp = (str(e["topic"]), int(e["partition"]))
            if tp in seen:
                duplicates.append(f"{tp[0]}-{tp[1]}")
            seen[tp] = int(e["offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CommandError(f"--offset-json-file: not Kafka's format ({exc})") from exc
    if duplicates:
        raise CommandError(f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}")
    return seen


def run(args: argparse.Namespace) -> int:
    offsets = read_offsets(args.offset_json_file)
    print("Executing records delete operation")
    results = run_admin(args, lambda admin: admin.delete_records(offsets))
    print("Records delete operation completed:")
    rows = []
    for t, p in offsets:
        low, code = results.get((t, p), (-1, 3))
        rows.append((code, f"partition: {t}-{p}\tlow_watermark: {low}",
                     f"partition: {t}-{p}\terror: {java_exception(code)}" if code else ""))
    return report_each(rows)
