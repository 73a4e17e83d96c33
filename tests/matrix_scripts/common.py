"""What every matrix client script does, and the records it writes. The scripts run in the
client's own interpreter (an older release lives in a virtual environment without kafkafast),
so they import nothing but their client and this module.

Argument: a JSON spec {"bootstrap", "topics": {codec: topic}, "n", "t0", "group",
"api_version"}. Each script produces `n` records to each topic with that topic's codec
(record i: key k<i>, a compressible value, timestamp t0+i, partition i % PARTITIONS), then
consumes all topics in group `group`, commits, reads the committed offsets back and lists
the earliest, latest and by-timestamp (t0 + n // 2) offsets of every partition, and prints
one JSON line: see `result`."""
from __future__ import annotations

import importlib.metadata
import json
import sys
import time

PARTITIONS = 2


def spec() -> dict:
    return json.loads(sys.argv[1])


def record(codec: str, i: int, t0: int) -> tuple[bytes, bytes, int, int]:
    """(key, value, timestamp, partition) of record i of the topic with `codec`."""
    return b"k%d" % i, (b"%s-value-%d-" % (codec.encode(), i)) * 6, t0 + i, i % PARTITIONS


def version(dist: str) -> str:
    return importlib.metadata.version(dist)


def by_time_target(s: dict) -> int:
    return s["t0"] + s["n"] // 2


def deadline(seconds: float = 90.0) -> float:
    return time.monotonic() + seconds


def result(client: str, version: str, *, produced: dict, consumed: list, committed: dict, earliest: dict,
           latest: dict, by_time: dict | None, target: int | None) -> None:
    """produced: codec -> [[partition, offset] of record i] (None where the client does not
    say); consumed: [topic, partition, offset, key, value] in arrival order; committed,
    earliest, latest, by_time: topic -> {partition: offset}."""
    def plain(d):
        return None if d is None else {t: {str(p): o for p, o in parts.items()} for t, parts in d.items()}

    def text(b):
        return b if b is None or isinstance(b, str) else bytes(b).decode()

    print(json.dumps({"client": client, "version": version, "produced": produced,
                      "consumed": [[t, p, o, text(k), text(v)] for t, p, o, k, v in consumed],
                      "committed": plain(committed), "earliest": plain(earliest), "latest": plain(latest),
                      "by_time": plain(by_time), "by_time_target": target}))
