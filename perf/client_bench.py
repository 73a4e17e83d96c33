"""Client throughput, side by side in one run: kafkafast's client vs aiokafka, kafka-python
and confluent-kafka, against the same broker (kafkafast by default, `--broker tansu` for
the peer).

Produce: 1,000,000 records of 100 B and 300,000 of 1 KiB to a fresh 1-partition topic, linger.ms=5,
batch.size=1 MiB, acks=1, no compression; timed from the first send to the last
acknowledgement. Consume: the same N records read from offset 0 with assign() (no group)
until the last one is in hand. Each cell is the median of `--repeats` runs (range shown),
the repeats going round all clients in turn.
The broker and the client share the 2-core machine, so these are client-plus-broker
numbers: ratios between clients are what matter. The "raw (broker ceiling)" row is what
the broker does for a client with no per-record work (prebuilt 1 MiB batches, 5 Produce
requests in flight; a Fetch loop that discards the bytes): a client near it is
broker-bound. Loopback TCP bandwidth is measured in the same run.

    python -m perf.client_bench            # full run (about 5 minutes), writes perf/results/client_bench.{md,json,png}
    python -m perf.client_bench --tiny     # seconds; CI uses it (no speed asserted)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "perf" / "results"
BATCH = 1024 * 1024
LINGER = 5


# -- producers: each returns seconds for n records ------------------------------------

def produce_kafkafast_async(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from kafkafast.client import AIOProducer

    async def run() -> float:
        async with AIOProducer(bootstrap, acks=1, linger_ms=LINGER, batch_size=BATCH,
                               max_request_size=4 * BATCH) as p:
            await p.partitions_for(topic)
            t0 = time.perf_counter()
            send = p.send
            f = None
            for _ in range(n):
                f = await send(topic, value, partition=0)
            await p.flush()
            await f
            return time.perf_counter() - t0
    return asyncio.run(run())


def produce_kafkafast_sync(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from kafkafast.client import KafkaProducer

    p = KafkaProducer(bootstrap, acks=1, linger_ms=LINGER, batch_size=BATCH, max_request_size=4 * BATCH)
    p.partitions_for(topic)
    t0 = time.perf_counter()
    send = p.send
    f = None
    for _ in range(n):
        f = send(topic, value, partition=0)
    p.flush()
    f.get(60)  # type: ignore[union-attr]
    dt = time.perf_counter() - t0
    p.close()
    return dt


def produce_aiokafka(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER, max_batch_size=BATCH,
                             max_request_size=4 * BATCH)
        await p.start()
        try:
            await p.partitions_for(topic)
            t0 = time.perf_counter()
            f = None
            for _ in range(n):
                f = await p.send(topic, value, partition=0)
            await p.flush()
            await f
            return time.perf_counter() - t0
        finally:
            await p.stop()
    return asyncio.run(run())


def produce_kafka_python(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER, batch_size=BATCH,
                      max_request_size=4 * BATCH)
    p.partitions_for(topic)
    t0 = time.perf_counter()
    f = None
    for _ in range(n):
        f = p.send(topic, value, partition=0)
    p.flush()
    f.get(60)  # type: ignore[union-attr]
    dt = time.perf_counter() - t0
    p.close()
    return dt


def produce_confluent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER, "batch.size": BATCH,
                  "queue.buffering.max.messages": 2_000_000, "enable.idempotence": False})
    p.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    produce = p.produce
    for _ in range(n):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.001)
    p.flush(60)
    return time.perf_counter() - t0


# -- consumers: each returns seconds to read n records from offset 0 ------------------

def consume_kafkafast_async(bootstrap: str, topic: str, n: int) -> float:
    from kafkafast.client import AIOConsumer, TopicPartition

    async def run() -> float:
        async with AIOConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                               max_partition_fetch_bytes=4 * BATCH, max_poll_records=100000) as c:
            t0 = time.perf_counter()
            c.assign([TopicPartition(topic, 0)])
            got = 0
            while got < n:
                for recs in (await c.getmany(timeout_ms=1000)).values():
                    got += len(recs)
            return time.perf_counter() - t0
    return asyncio.run(run())


def consume_kafkafast_sync(bootstrap: str, topic: str, n: int) -> float:
    from kafkafast.client import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      max_partition_fetch_bytes=4 * BATCH, max_poll_records=100000)
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0)])
    got = 0
    while got < n:
        for recs in c.poll(1000).values():
            got += len(recs)
    dt = time.perf_counter() - t0
    c.close()
    return dt


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> float:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             max_partition_fetch_bytes=4 * BATCH)
        await c.start()
        try:
            t0 = time.perf_counter()
            c.assign([TopicPartition(topic, 0)])
            got = 0
            while got < n:
                for recs in (await c.getmany(timeout_ms=1000, max_records=100000)).values():
                    got += len(recs)
            return time.perf_counter() - t0
        finally:
            await c.stop()
    return asyncio.run(run())


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      max_partition_fetch_bytes=4 * BATCH)
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0)])
    got = 0
    while got < n:
        for recs in c.poll(1000, max_records=100000).values():
            got += len(recs)
    dt = time.perf_counter() - t0
    c.close()
    return dt


def consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    while got < n:
        msgs = c.consume(10000, 1.0)
        got += sum(1 for m in msgs if m.error() is None)
    dt = time.perf_counter() - t0
    c.close()
    return dt


# -- the broker's ceiling: clients that cost almost nothing ------------------------------

def produce_raw(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    """Prebuilt 1 MiB batches of the same records, 5 Produce requests in flight: what the
    broker ingests when the client does no per-record work."""
    from kafkafast.client.cluster import Cluster
    from kafkafast.protocol import _generated as gen
    from kafkafast.records import BatchBuilder

    builder = BatchBuilder(max_size=BATCH)
    while builder.append(int(time.time() * 1000), None, value):
        pass
    payload, per = builder.build(), builder.record_count
    TD = gen.ProduceRequest.TopicProduceData
    req = gen.ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        TD(name=topic, partition_data=[TD.PartitionProduceData(index=0, records=payload)])])

    async def run() -> float:
        cluster = Cluster(bootstrap)
        cluster.add_topics([topic])
        await cluster.start()
        try:
            await cluster.wait_for_topic(topic)
            conn = await cluster.leader_connection((topic, 0))
            slots = asyncio.Semaphore(5)

            async def one() -> None:
                async with slots:
                    resp = await conn.send(req)
                    assert resp.responses[0].partition_responses[0].error_code == 0

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(-(-n // per))))
            return time.perf_counter() - t0
        finally:
            await cluster.close()
    return asyncio.run(run()) * n / (-(-n // per) * per)


def consume_raw(bootstrap: str, topic: str, n: int) -> float:
    """perf.load's minimal Fetch client: record bytes received and discarded."""
    from perf.load import rawfetch

    return rawfetch({"bootstrap": bootstrap, "topic": topic, "partitions": [0]})["seconds"]


CLIENTS: dict[str, tuple[Callable, Callable]] = {
    "kafkafast (async)": (produce_kafkafast_async, consume_kafkafast_async),
    "kafkafast (sync)": (produce_kafkafast_sync, consume_kafkafast_sync),
    "aiokafka": (produce_aiokafka, consume_aiokafka),
    "kafka-python": (produce_kafka_python, consume_kafka_python),
    "confluent-kafka": (produce_confluent, consume_confluent),
    "raw (broker ceiling)": (produce_raw, consume_raw),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="a few thousand records, one repeat (CI)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--broker", choices=["kafkafast", "tansu"], default="kafkafast")
    ap.add_argument("--bootstrap", help="use an already running broker")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--out", default=str(RESULTS / "client_bench"))
    ap.add_argument("--ops", default="produce,consume", help="produce, consume or both (comma-separated)")
    ap.add_argument("--sizes", default="100,1024", help="record sizes in bytes (comma-separated) of 100, 1024")
    args = ap.parse_args(argv)
    sizes = {100: 2000, 1024: 1000} if args.tiny else {100: 1_000_000, 1024: 300_000}
    sizes = {s: n for s, n in sizes.items() if str(s) in args.sizes.split(",")}
    ops = [o for o in args.ops.split(",") if o]
    repeats = 1 if args.tiny else args.repeats
    clients = [c for c in args.clients.split(",") if c]

    sys.path.insert(0, str(REPO))
    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        from perf.brokers import Kafkafast, Tansu

        workdir = Path(tempfile.mkdtemp(prefix="client-bench-"))
        broker = Kafkafast(workdir, workers=0) if args.broker == "kafkafast" else Tansu(workdir)
        broker.start()
        bootstrap = broker.bootstrap
    from kafkafast.client import admin
    from perf.ceilings import loopback_tcp

    loopback = loopback_tcp((64 if args.tiny else 512) << 20)
    print(f"loopback TCP {loopback / 1e6:,.0f} MB/s", flush=True)
    results: list[dict] = []
    try:
        for size, n in sizes.items():
            value = b"x" * size
            p_times: dict[str, list[float]] = {name: [] for name in clients}
            c_times: dict[str, list[float]] = {name: [] for name in clients}
            # Repeats go round the clients (A B C, A B C, ...) so that drifts of the shared
            # machine (page cache, other tenants) fall on every client alike.
            for rep in range(repeats):
                for name in clients:
                    produce, consume = CLIENTS[name]
                    topic = f"cb-{size}-{name.split()[0]}-{rep}-{time.monotonic_ns()}"
                    admin.create_topics_sync(bootstrap, [(topic, 1)])
                    p_times[name].append(produce(bootstrap, topic, n, value))  # consume reads what it wrote
                    if "consume" in ops:
                        c_times[name].append(consume(bootstrap, topic, n))
                    try:
                        admin.delete_topics_sync(bootstrap, [topic])
                    except Exception:  # freeing space is best effort
                        pass
            for name in clients:
                for kind, times in (("produce", p_times[name]), ("consume", c_times[name])):
                    if kind not in ops:
                        continue
                    rates = sorted(n / t for t in times)
                    row = {"client": name, "op": kind, "record_bytes": size, "records": n, "repeats": repeats,
                           "median_rec_s": statistics.median(rates), "min_rec_s": rates[0], "max_rec_s": rates[-1],
                           "median_mb_s": statistics.median(rates) * size / 1e6}
                    results.append(row)
                    print(f"{kind:8s} {size:5d} B  {name:18s} {row['median_rec_s']:>12,.0f} rec/s "
                          f"({row['median_mb_s']:.1f} MB/s)", flush=True)
    finally:
        if broker is not None:
            broker.stop()

    meta = {"machine": f"{platform.node()} {platform.machine()} {platform.processor()} cores={__import__('os').cpu_count()}",
            "python": sys.version.split()[0], "broker": args.broker if not args.bootstrap else args.bootstrap,
            "tiny": args.tiny, "loopback_tcp_MB_s": round(loopback / 1e6), "command": " ".join(["python -m perf.client_bench"] + (argv or sys.argv[1:])),
            "settings": {"linger_ms": LINGER, "batch_size": BATCH, "acks": 1, "partitions": 1, "compression": "none"}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = ["# Client throughput", "", f"Machine: {meta['machine']}, Python {meta['python']}, broker: {meta['broker']}",
             f"Command: `{meta['command']}`", "",
             "linger.ms=5, batch.size=1 MiB, acks=1, 1 partition, no compression; median of "
             f"{repeats} run(s) [min-max]. Client and broker share the machine. "
             f"Loopback TCP: {loopback / 1e6:,.0f} MB/s. The raw row is the broker's ceiling (no client work); its "
             "range shows how much the broker's own speed moved during the run (writes into fresh page-cache "
             "pages), which produce ratios inherit. Repeats go round all clients in turn.", "",
             "| op | record | client | rec/s (median) | range | MB/s | vs kafka-python | vs aiokafka | vs confluent |",
             "|---|---|---|---:|---|---:|---:|---:|---:|"]
    for r in results:
        peers = {p["client"]: p["median_rec_s"] for p in results
                 if p["op"] == r["op"] and p["record_bytes"] == r["record_bytes"]}

        def ratio(peer: str) -> str:
            return f"{r['median_rec_s'] / peers[peer]:.2f}x" if peer in peers else "-"
        lines.append(f"| {r['op']} | {r['record_bytes']} B | {r['client']} | {r['median_rec_s']:,.0f} | "
                     f"{r['min_rec_s']:,.0f}-{r['max_rec_s']:,.0f} | {r['median_mb_s']:.1f} | {ratio('kafka-python')} | "
                     f"{ratio('aiokafka')} | {ratio('confluent-kafka')} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    if not args.tiny:
        chart(results, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.md')}, .json" + ("" if args.tiny else " and .png"))
    return 0


def chart(results: list[dict], path: Path) -> None:
    """Bars of records/s per client, one panel per (operation, record size), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for r in results:
        if (r["op"], r["record_bytes"]) not in panels:
            panels.append((r["op"], r["record_bytes"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), squeeze=False)
    for ax, (op, size) in zip(axes[0], panels):
        rows = [r for r in results if r["op"] == op and r["record_bytes"] == size]
        names = [r["client"] for r in rows]
        med = [r["median_rec_s"] for r in rows]
        err = [[m - r["min_rec_s"] for m, r in zip(med, rows)], [r["max_rec_s"] - m for m, r in zip(med, rows)]]
        colors = ["#1f77b4" if n.startswith("kafkafast") else "#999999" if n.startswith("raw") else "#ff7f0e"
                  for n in names]
        ax.bar(range(len(rows)), med, yerr=err, color=colors, capsize=3)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("records/s (median, min-max)")
        ax.set_title(f"{op} {size} B")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
