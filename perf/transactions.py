"""Transactional produce throughput against idempotent produce, side by side in one run.

    python -m perf.transactions [--records 100000] [--repeats 3] [--workers 0] [--out perf/results/transactions.json]

Starts kafkafast (one process by default), and with confluent-kafka (librdkafka) sends
`--records` records of 1 KiB to one partition (linger.ms=5, batch.size=1 MiB, acks=all):
idempotently, then in transactions of 100 records and of 10,000 records (each committed;
the producer waits for every commit, as a consume-transform-produce loop does). The rows
alternate per repeat so that drift on the shared machine hits all of them alike; each
reports the median and range of records/s and MB/s, and the transactional rows their
ratio to the idempotent row of the same repeat. Broker CPU-seconds per GB from /proc.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from perf.brokers import Kafkafast

VALUE = b"x" * 1024


def _producer(bootstrap: str, txn_id: str | None):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all",
            "enable.idempotence": True, "queue.buffering.max.kbytes": 1 << 20}
    if txn_id:
        conf["transactional.id"] = txn_id
    return Producer(conf)


def run_once(bootstrap: str, topic: str, records: int, txn_size: int | None, tag: str) -> float:
    """Seconds to have `records` acknowledged (and committed, in transactions of `txn_size`)."""
    p = _producer(bootstrap, f"bench-{tag}" if txn_size else None)
    if txn_size:
        p.init_transactions(30)
    sent = 0
    t0 = time.perf_counter()
    while sent < records:
        n = min(txn_size or records, records - sent)
        if txn_size:
            p.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, VALUE, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        sent += n
        if txn_size:
            p.commit_transaction(60)  # flushes, then EndTxn
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def measure(records: int, repeats: int, workers: int) -> dict:
    rows = {"idempotent": [], "txn-100": [], "txn-10000": []}
    cpu = {k: 0.0 for k in rows}
    sizes = {"idempotent": None, "txn-100": 100, "txn-10000": 10_000}
    with tempfile.TemporaryDirectory(prefix="kafkafast-txn-bench-") as tmp:
        b = Kafkafast(Path(tmp), workers, {"num.partitions": "1", "transaction.state.log.num.partitions": "4"})
        b.start()
        try:
            bootstrap = f"127.0.0.1:{b.port}"
            from confluent_kafka.admin import AdminClient, NewTopic

            topics = [f"{name}-{r}" for r in range(repeats) for name in sizes] + ["warmup"]
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
                fut.result(30)  # topic creation stays out of the timed window
            run_once(bootstrap, "warmup", min(records, 20_000), 1000, "warm")
            for r in range(repeats):
                for name, size in sizes.items():
                    before = cpu_seconds(b.proc.pid)
                    secs = run_once(bootstrap, f"{name}-{r}", records, size, f"{name}-{r}")
                    cpu[name] += cpu_seconds(b.proc.pid) - before
                    rows[name].append(secs)
        finally:
            b.stop()
    out = {"records": records, "record_bytes": len(VALUE), "repeats": repeats, "workers": workers, "rows": []}
    for name, secs in rows.items():
        rates = [records / s for s in secs]
        ratios = [rows["idempotent"][i] / s for i, s in enumerate(secs)]
        gb = records * len(VALUE) * repeats / 1e9
        out["rows"].append({
            "mode": name, "records_per_s_median": statistics.median(rates), "records_per_s_min": min(rates),
            "records_per_s_max": max(rates), "mb_per_s_median": statistics.median(rates) * len(VALUE) / 1e6,
            "ratio_to_idempotent_median": statistics.median(ratios),
            "broker_cpu_s_per_gb": cpu[name] / gb})
    return out


def markdown(res: dict, command: str) -> str:
    lines = [f"# Transactional vs idempotent produce ({res['workers'] or 'one'} worker process"
             f"{'es' if res['workers'] else ''})", "",
             f"Command: `{command}`. confluent-kafka producer, {res['records']} records of "
             f"{res['record_bytes']} B to one partition per row, linger.ms=5, batch.size=1 MiB, acks=all; "
             f"{res['repeats']} repeats, rows interleaved per repeat; transactional rows commit every 100 or "
             f"10,000 records and wait for each commit. Shared 2-core machine: compare the ratios, not the "
             f"absolute numbers.", "",
             "| mode | records/s median | range | MB/s | vs idempotent (same repeat) | broker CPU s/GB |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        lines.append(f"| {r['mode']} | {r['records_per_s_median']:.0f} | {r['records_per_s_min']:.0f}-"
                     f"{r['records_per_s_max']:.0f} | {r['mb_per_s_median']:.1f} | "
                     f"{r['ratio_to_idempotent_median']:.2f} | {r['broker_cpu_s_per_gb']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = measure(args.records, args.repeats, args.workers)
    command = (f"python -m perf.transactions --records {args.records} --repeats {args.repeats} "
               f"--workers {args.workers}" + (f" --out {args.out}" if args.out else ""))
    md = markdown(res, command)
    print(md)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        Path(args.out).with_suffix(".md").write_text(md)


if __name__ == "__main__":
    main()
