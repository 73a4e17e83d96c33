"""Where a `--workers 2` RF3 cluster does more work per GB than a `--workers 0` one, counted:
requests by API, syscalls by type, context switches, user and system CPU, and (`--profile`)
the Python CPU time and calls of every broker process grouped by area.

    python -m perf.cluster_workers_where [--rounds 2] [--count 300000] [--before TREE] [--syscalls] [--profile]

Three ZooKeeper-mode brokers per setup (topic of 6 partitions, RF 3, min.insync.replicas=2, every
broker serving /metrics), all setups up for the whole run: this tree with `--workers 0` and with
`--workers 2`, and with `--before` the `--workers 2` cluster of another code tree (its twins
built). Each round sends `--count` 1 KiB records (librdkafka's `rdkafka_performance`, acks=all)
to every setup, the order rotated round by round. Per load, per GB produced: the requests the
brokers answered by API (their /metrics), the voluntary and involuntary context switches and
the user and system CPU-s of all broker processes (/proc; clock ticks, so approximate), and with
`--syscalls` the syscalls of all broker processes by type (`perf stat` tracepoints).
`--profile`: every broker process runs under cProfile with CPU time (KAFKAFAST_PROFILE_CPU; the
brokers run slower, compare the setups' counts, not their speed), switched on for each of its
setup's loads only (KAFKAFAST_PROFILE_GATE: SIGUSR1 before, SIGUSR2 after the followers' last
fetches; not start-up, not the idle time during the other setups' loads); after the run, per
setup and GB, the Python CPU-s and calls summed by area (`AREAS`) and the functions outside
them with the most calls. Prints one JSON line per load, then one per setup.
"""
from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from perf import rdkafka_tools
from perf.brokers import free_port
from perf.cluster import SIZE, create_topic, three_brokers
from perf.cluster_workers import per_process_cpu
from perf.leader_fetch import requests_answered

TOPIC = "w2"
SYSCALLS = ("read", "write", "epoll_pwait", "pwrite64", "pread64", "sendfile64", "getpid", "futex", "openat",
            "close", "newfstatat", "mmap", "munmap", "fcntl", "brk")
# (file path suffix, function name or None for every function of the file) -> area; the first match wins
AREAS = (("workers: placement and wake-ups", ("runtime/placement.py", None)),
         ("workers: placement and wake-ups", ("broker/placement.py", None)),
         ("workers: shared memory (slots, append lock)", ("runtime/shm.py", None)),
         ("workers: shared memory (slots, append lock)", ("runtime/append_lock.py", None)),
         ("workers: shared memory (slots, append lock)", ("storage/shared_append.py", None)),
         ("workers: shared-mode log", ("storage/log.py", "_enter")),
         ("workers: shared-mode log", ("storage/log.py", "_leave")),
         ("workers: shared-mode log", ("storage/log.py", "_publish_shared")),
         ("workers: shared-mode log", ("storage/log.py", "_sync_shared")),
         ("workers: shared-mode log", ("storage/log.py", "_exclusive")),
         ("workers: forwarding", ("runtime/forwarding.py", None)),
         ("follower fetcher", ("cluster/fetcher.py", None)),
         ("fetch handling at the leader", ("handlers/fetch.py", None)),
         ("fetch handling at the leader", ("broker/replica_manager.py", None)),
         ("fetch handling at the leader", ("broker/follower_state.py", None)),
         ("fetch handling at the leader", ("protocol/fetch_scan.py", None)),
         ("connections", ("runtime/connection.py", None)),
         ("connections", ("client/connection.py", None)))


def _proc_stat(pids: list[int]) -> dict[str, float]:
    """User and system CPU-s (clock ticks) and context switches of the processes."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(("user_s", "sys_s", "voluntary", "involuntary"), 0.0)
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out["user_s"] += int(fields[11]) / tick
            out["sys_s"] += int(fields[12]) / tick
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    out["voluntary"] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    out["involuntary"] += int(line.split()[1])
        except OSError:
            pass
    return out


def _perf_stat(pids: list[int]) -> subprocess.Popen:
    events = ",".join(f"syscalls:sys_enter_{s}" for s in SYSCALLS)
    return subprocess.Popen(["perf", "stat", "-x", ";", "-e", "raw_syscalls:sys_enter," + events,
                             "-p", ",".join(map(str, pids))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _perf_counts(proc: subprocess.Popen) -> dict[str, int]:
    proc.send_signal(2)
    err = proc.communicate(timeout=60)[1]
    out = {}
    for line in err.splitlines():
        f = line.split(";")
        if len(f) > 2 and f[0].strip().isdigit():
            out[f[2].replace("syscalls:sys_enter_", "").replace("raw_syscalls:sys_enter", "all")] = int(f[0])
    return out


def area_of(path: str, name: str) -> str:
    for area, (suffix, fn) in AREAS:
        if path.endswith(suffix) and (fn is None or fn == name):
            return area
    return "everything else"


def profile_by_area(profile_dir: Path) -> tuple[dict[str, list[float]], dict[str, int], dict[str, list[float]]]:
    """[CPU-s, calls] by area over every profile in the directory, the calls of each
    function outside the areas, and [CPU-s, calls] of each function in the workers' areas."""
    out: dict[str, list[float]] = {}
    rest: dict[str, int] = {}
    workers: dict[str, list[float]] = {}
    for f in profile_dir.glob("*.prof"):
        for (path, _, name), row in pstats.Stats(str(f)).stats.items():  # type: ignore[attr-defined]
            area = area_of(path, name)
            acc = out.setdefault(area, [0.0, 0])
            acc[0] += row[2]  # (primitive calls, total calls, tottime, cumtime, callers)
            acc[1] += row[1]
            key = f"{'/'.join(Path(path).parts[-2:])}:{name}"
            if area == "everything else":
                rest[key] = rest.get(key, 0) + row[1]
            elif area.startswith("workers:"):
                acc = workers.setdefault(key, [0.0, 0])
                acc[0] += row[2]
                acc[1] += row[1]
    return out, rest, workers


def _gate(profile_dir: Path, sig: int) -> None:
    """Profiling on (SIGUSR1) or off (SIGUSR2) in every process that registered in the directory."""
    for f in profile_dir.glob("gate-*"):
        try:
            os.kill(int(f.name.split("-")[1]), sig)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster_workers_where")
    ap.add_argument("--before", type=Path, default=None, help="another code tree, run with --workers 2 as well")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--count", type=int, default=300_000, help="records per load")
    ap.add_argument("--syscalls", action="store_true", help="count syscalls by type (perf stat)")
    ap.add_argument("--profile", action="store_true", help="cProfile (CPU time) every broker process")
    args = ap.parse_args(argv)
    if args.syscalls and shutil.which("perf") is None:
        ap.error("--syscalls needs perf")
    binary = rdkafka_tools.setup(None)
    setups: dict[str, tuple[int, Path | None]] = {"w0": (0, None), "w2": (2, None)}
    if args.before:
        setups["w2-before"] = (2, args.before)
    runs: dict[str, list[dict]] = {k: [] for k in setups}
    gb_total = dict.fromkeys(setups, 0.0)
    with tempfile.TemporaryDirectory(prefix="cww-") as tmp:
        dirs = {name: Path(tmp) / f"prof-{name}" for name in setups}
        with ExitStack() as stack:
            clusters, ports = {}, {}
            for name, (workers, tree) in setups.items():
                if args.profile:
                    dirs[name].mkdir()
                    os.environ["KAFKAFAST_PROFILE"] = str(dirs[name])  # (the brokers inherit it)
                    os.environ["KAFKAFAST_PROFILE_CPU"] = "1"
                    os.environ["KAFKAFAST_PROFILE_GATE"] = "1"
                ports[name] = [free_port() for _ in range(3)]
                clusters[name] = stack.enter_context(three_brokers(Path(tmp) / name, workers, tree=tree,
                                                                   metrics_ports=ports[name]))
                create_topic(",".join(b.bootstrap for b in clusters[name]), TOPIC, 3)
            os.environ.pop("KAFKAFAST_PROFILE", None)
            os.environ.pop("KAFKAFAST_PROFILE_CPU", None)
            os.environ.pop("KAFKAFAST_PROFILE_GATE", None)
            names = list(setups)
            for rnd in range(args.rounds):
                for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                    brokers = clusters[name]
                    pids = [p for b in brokers for p in b.pids()]
                    if args.profile:
                        _gate(dirs[name], signal.SIGUSR1)
                        time.sleep(0.3)  # (an idle process runs the handler on its next timer)
                    requests0 = [requests_answered(p) for p in ports[name]]
                    cpu0, stat0 = per_process_cpu(brokers), _proc_stat(pids)
                    perf = _perf_stat(pids) if args.syscalls else None
                    r = rdkafka_tools.produce(binary, ",".join(b.bootstrap for b in brokers), TOPIC, size=SIZE,
                                              acks="all", count=args.count)
                    time.sleep(0.5)  # the followers' last fetches
                    if args.profile:
                        _gate(dirs[name], signal.SIGUSR2)
                    syscalls = _perf_counts(perf) if perf is not None else {}
                    cpu1, stat1 = per_process_cpu(brokers), _proc_stat(pids)
                    requests1 = [requests_answered(p) for p in ports[name]]
                    gb = r["delivered"] * SIZE / 1e9
                    gb_total[name] += gb
                    requests: dict[str, float] = {}
                    for a, b in zip(requests0, requests1):
                        for api, n in b.items():
                            requests[api] = requests.get(api, 0.0) + n - a.get(api, 0.0)
                    row = {"round": rnd, "setup": name, "msgs_per_s": r["msgs_per_s"], "errors": r["errors"],
                           "cpu_s_per_gb": round(sum(cpu1[k] - cpu0.get(k, 0.0) for k in cpu1) / gb, 3),
                           **{f"{k}_per_gb": round((stat1[k] - stat0[k]) / gb, 3 if k.endswith("_s") else None)
                              for k in stat0},
                           "requests_per_gb": {k: round(v / gb) for k, v in sorted(requests.items()) if v},
                           "syscalls_per_gb": {k: round(v / gb) for k, v in syscalls.items()}}
                    runs[name].append(row)
                    print(json.dumps(row), flush=True)
        for name in names:  # (stopped: every process wrote its profile)
            rows = runs[name]
            summary = {"setup": name, "gb": round(gb_total[name], 3),
                       "msgs_per_s": statistics.median(r["msgs_per_s"] for r in rows)}
            for key in ("cpu_s_per_gb", "user_s_per_gb", "sys_s_per_gb", "voluntary_per_gb", "involuntary_per_gb"):
                summary[key] = round(statistics.median(r[key] for r in rows), 3)
            for key in ("requests_per_gb", "syscalls_per_gb"):
                summary[key] = {k: round(statistics.median(r[key].get(k, 0) for r in rows)) for k in rows[0][key]}
            if args.profile:
                areas, rest, workers = profile_by_area(dirs[name])
                summary["python_by_area_per_gb"] = {area: [round(s / gb_total[name], 3), round(c / gb_total[name])]
                                                    for area, (s, c) in sorted(areas.items())}
                summary["most_called_elsewhere_per_gb"] = {
                    k: round(c / gb_total[name]) for k, c in sorted(rest.items(), key=lambda kc: -kc[1])[:12]}
                summary["workers_functions_per_gb"] = {  # the 15 costliest (cProfile time) of the workers' areas
                    k: [round(t / gb_total[name], 4), round(c / gb_total[name])]
                    for k, (t, c) in sorted(workers.items(), key=lambda kv: -kv[1][0])[:15]}
            print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
