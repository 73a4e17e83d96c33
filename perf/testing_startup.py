"""Start-up time of a kafkafast.testing broker: from `start()` to its first Metadata answer.

    python -m perf.testing_startup [--starts 15] [--out perf/results/testing_startup.json]

Side by side in one run, alternating start by start: "exec" (a new interpreter running
`python -m kafkafast.cli.main broker`, as a plain child process) and "fork-server" (a
fork of the fork server that imported the broker once). Each start is a fresh broker
(single process, new data directory, free port), stopped gracefully before the next.
The fork server's own start (its one-time import, paid by the first broker of a test
session) is reported on its own. Also: a 2-worker broker through the fork server.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from kafkafast.testing.broker_process import ForkServer, KafkaTestBroker


def one_start(root: str, spawn: str, workers: int = 0) -> float:
    broker = KafkaTestBroker(root, spawn=spawn, workers=workers)
    try:
        broker.start()
        return broker.startup_seconds  # type: ignore[return-value]
    finally:
        broker.stop()


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values) * 1000, 1), "min_ms": round(min(values) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=15)
    parser.add_argument("--out", default="perf/results/testing_startup.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    ForkServer.get()
    fork_server_start = time.monotonic() - t0
    samples: dict[str, list[float]] = {"exec": [], "fork-server": [], "fork-server, 2 workers": []}
    with tempfile.TemporaryDirectory(prefix="kafkafast-startup-") as tmp:
        for i in range(args.starts):
            samples["exec"].append(one_start(os.path.join(tmp, f"e{i}"), "exec"))
            samples["fork-server"].append(one_start(os.path.join(tmp, f"f{i}"), "fork-server"))
            samples["fork-server, 2 workers"].append(one_start(os.path.join(tmp, f"w{i}"), "fork-server", 2))
    results = {
        "command": f"python -m perf.testing_startup --starts {args.starts}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
                   f"{platform.python_version()}, shared with other jobs (1-minute load average "
                   f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after)",
        "fork_server_start_ms": round(fork_server_start * 1000, 1),
        "startup": {mode: summary(v) for mode, v in samples.items()},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# kafkafast.testing: broker start-up to the first Metadata answer", "",
        f"Command: `{results['command']}`. Machine: {results['machine']}. Each start is a fresh broker "
        "(new data directory, free 127.0.0.1 port) stopped before the next; the modes alternate start by start.", "",
        "| how the broker process is made | median ms | min ms | max ms | starts |", "|---|---:|---:|---:|---:|",
    ]
    for mode, s in results["startup"].items():
        lines.append(f"| {mode} | {s['median_ms']} | {s['min_ms']} | {s['max_ms']} | {s['n']} |")
    lines += ["", f"The fork server itself (once per test session, overlapped with collection by the pytest "
              f"plugin) started in {results['fork_server_start_ms']} ms.", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
