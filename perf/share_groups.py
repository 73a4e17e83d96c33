"""Share-group consume throughput (KIP-932, issue 27) beside a classic consumer group, in one run.

    python -m perf.share_groups [--records 500000] [--sizes 100,1024] [--repeats 3] [--workers 0]
                                [--work-us 200] [--out perf/results/share_groups.json]
    python -m perf.share_groups --smoke       # a few thousand records, seconds; the tests run it
    python -m perf.share_groups --profile-broker /tmp/broker.prof --sizes 1024 --repeats 1
                                              # the broker (one process) under cProfile

Starts kafkafast (one process by default; this checkout, with its Cython twins if built) and
preloads one topic of 4 partitions per record size with `--records` records (spread evenly,
confluent-kafka producer). Then every configuration reads the whole topic with a fresh group:

* `share N` (N = 1, 4, 16): N confluent-kafka `ShareConsumer`s (librdkafka's share consumer) in
  one share group, `share.auto.offset.reset=earliest`, implicit acknowledgement: the records of
  each poll are accepted with the next poll (piggy-backed on ShareFetch), so every record is
  acknowledged (the last poll's records by commit_sync() before close(), after the timed
  window: librdkafka 2.16's close() leaves them unacknowledged, its share session closes
  holding them, and the members still in their last poll received them again: the 0.2-3.4%
  `duplicates` with 16 consumers in earlier runs);
* `classic N` (N = 1, 4): N confluent-kafka `Consumer`s subscribed in one consumer group
  (auto.offset.reset=earliest, librdkafka's defaults otherwise, auto commit on);
* with `--work-us T` (200 by default, 0: none), classic 4, share 4 and share 16 again, each
  consumer spending T microseconds per record: after each poll, one sleep of the poll's record
  count x T (the CPU stays free, as for an application that waits on a database or a remote
  call for each record), the records counted once processed. These read a topic of their own,
  produced with batch.size 16384 (the Java producer's default; the other topics have librdkafka's
  1 MB), so that a share-partition's record locks hold several batches. This is the use share
  groups are for: processing slower than the broker. A classic group's rate stops at
  partitions / T (4 partitions at 200 us: 20,000 records/s), a share group's at consumers / T
  (16: 80,000/s), as long as the share-partitions' record locks (2000 each) cover what the
  consumers hold at once (16 x librdkafka's 500 per ShareFetch = 8000 over 4 partitions).

Every consumer runs in its own process (a pool of 16 spawned once): a process per consumer
keeps each client's Python work (the Message objects of every poll) off the others' GIL, as
one application instance per consumer would. Classic members join before the clock starts:
they pause their partitions in the assignment callback and the clock starts once all 4
partitions are assigned. Share consumers subscribe when the clock starts, so their join
(one heartbeat; there is no rebalance barrier) is inside the window: librdkafka starts
fetching, i.e. acquiring records, as soon as it is subscribed, before any poll. Each process
adds the distinct records of every poll to a shared counter; the window ends when the
counter reaches the topic's record count. Two rates per run:

* `end to end`: records / (start signal -> last record received);
* `steady`: the records received between 10% and 90% of the total, over that time (no
  start-up, no tail: what a long-running group sustains).

The configurations alternate within each repeat (the order rotating per repeat), so the
shared machine's drift hits all alike; each cell is the median (and range) of the repeats,
and share(4)/classic(4) is also taken within each repeat. Broker CPU (user+sys of the broker
process over the window) per GB read; client CPU (all consumer processes) as cores busy.
Records are counted once each by (partition, offset), in every process and over the group:
`redelivered` counts records a share consumer received with a delivery count above 1
(acquired before, by it or another member, and released), `duplicates` records the
application saw more than once, `incomplete` runs that did not get every record within
`--timeout`; with the spread of records over the members, a run that lost or repeated
records shows.

The broker runs with its Prometheus endpoint (`metrics.port`), read before and after each
window: `fetches/1000` is the ShareFetch (share) or Fetch (classic) requests answered per 1000
records read, `acquired/ShareFetch` the records acquired per ShareFetch, `broker us/record` the
broker's CPU per distinct record read.

Why `share 16` need not read faster than `share 4` without work: a share-partition holds at most
`group.share.partition.max.record.locks` (2000, Kafka's default) records in flight, records are
acquired in whole producer batches (the preload's are librdkafka's 1 MB ones: about 1,000
records of 1 KiB, a few hundred to 10,000 of 100 B), and the batch that reaches the limit is finished
(as Kafka's); so at 1 KiB at most two members of a partition hold records at a time, at 100 B
mostly one, and the other members of the partition (4 per partition with 16) wait until an
acceptance frees locks (which wakes their parked ShareFetch). More members per partition pay
off when the application spends time per record (the locks are what the queue shares), or
with more record locks per partition; on this 2-core machine the 12 extra consumer processes
also share the cores with the holders. Share consumers join inside the window and learn a new
assignment only at their next heartbeat (every 5 s): the `simple` assignor keeps what members
had (sticky, as Kafka's), so the early members' wider assignments overlap the later ones and
every partition keeps readers (`members` min-max in the log lines: how evenly they read).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from multiprocessing import get_context
from pathlib import Path

from perf.brokers import Kafkafast, free_port
from perf.run import machine, run_load
from perf.worker_scaling import describe_tree

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 4
CONFIGS = (("classic", 1), ("share", 1), ("classic", 4), ("share", 4), ("share", 16))
WORK_CONFIGS = (("classic", 4), ("share", 4), ("share", 16))  # the rows with --work-us per record
WORK_BATCH_BYTES = 16384  # the work rows' topic is produced with the Java producer's default batch.size
GOAL = 0.7  # issue 27: share(4) >= 0.7 x classic(4) records/s
POLL_S = 0.2
QUIET = {"log_level": 0}


# -- one consumer process -----------------------------------------------------------------------

def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process, librdkafka's too
    return r.ru_utime + r.ru_stime


def _member(conn, counter, crossed) -> None:
    """A consumer process of the pool: runs one group membership per command until told to stop.
    SIGUSR1 prints its threads' stacks to stderr (the parent sends it to one that does not answer)."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    while (cmd := conn.recv()) is not None:
        _consume(conn, counter, crossed, **cmd)


def _consume(conn, counter, crossed, kind: str, bootstrap: str, topic: str, group: str, expect: int,
             timeout_s: float, work_us: int = 0) -> None:
    """Joins `group`, reports ("ready", partitions assigned), waits for "go", then reads until the
    shared counter reaches `expect`; sends ("done", result) before closing, then ("closed",).
    `work_us`: the application's time per record, spent after each poll as one sleep of the
    poll's record count x work_us (the CPU stays free, as with a consumer waiting on a database
    or a remote call); a record counts once it is processed."""
    from confluent_kafka import Consumer, Message, ShareConsumer

    share = kind == "share"
    assigned: list = []
    if share:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
        conn.send(("ready", 0))  # share: the assignment comes with the first heartbeat, after subscribe()

        def fetch():
            return c.poll(POLL_S)
    else:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **QUIET})

        def on_assign(cons, parts) -> None:
            cons.assign(parts)
            cons.pause(parts)  # nothing is fetched before the clock starts
            assigned[:] = parts
            conn.send(("ready", len(parts)))

        def on_revoke(cons, parts) -> None:
            assigned.clear()
            conn.send(("ready", 0))

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while not conn.poll(0):  # the join runs in the client's poll
            c.poll(0.05)

        def fetch():
            return c.consume(num_messages=10_000, timeout=POLL_S)
    assert conn.recv() == "go"
    cpu0 = _cpu()
    if share:
        c.subscribe([topic])  # librdkafka starts fetching (acquiring) once subscribed: not before the clock
    else:
        c.resume(assigned)
    n = nbytes = errors = redelivered = 0
    seen: set[tuple[int, int]] = set()  # (partition, offset): a record delivered twice counts once
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        batch = fetch()
        if batch and work_us:
            time.sleep(len(batch) * work_us / 1e6)
        now = time.monotonic()
        total = counter.value
        if batch:
            # C-level passes over the batch: the client's own per-record cost stays small
            bad = len(list(filter(None, map(Message.error, batch))))
            if bad:
                errors += bad
                batch = [m for m in batch if m.error() is None]
            before = len(seen)
            seen.update(zip(map(Message.partition, batch), map(Message.offset, batch)))
            new = len(seen) - before
            n += len(batch)
            nbytes += sum(map(len, batch))
            if share:  # acquired (and released) before: by this member or another
                redelivered += len(batch) - list(map(Message.delivery_count, batch)).count(1)
            samples.append((now, new))
            with counter.get_lock():
                counter.value += new
                total = counter.value
                if total >= expect and not crossed.value:
                    crossed.value = now
        if total >= expect or now > deadline:
            break
    cpu = _cpu() - cpu0
    conn.send(("done", {"records": n, "bytes": nbytes, "errors": errors, "redelivered": redelivered,
                        "client_cpu_s": cpu, "samples": samples}))
    if share:  # the last poll's records: librdkafka 2.16's close() does not accept them (implicit mode),
        c.commit_sync()  # its share session closes holding them and they go to a member still polling
    c.close()
    conn.send(("closed", seen))


class Pool:
    """Consumer processes, spawned once (spawn: no librdkafka thread is inherited)."""

    def __init__(self, size: int) -> None:
        ctx = get_context("spawn")
        self.counter = ctx.Value("q", 0)
        self.crossed = ctx.Value("d", 0.0)
        self.conns = []
        self.procs = []
        for _ in range(size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_member, args=(child, self.counter, self.crossed), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


# -- one measurement ------------------------------------------------------------------------------

def _dump_stacks(proc) -> None:
    """Has a stuck member print its threads' Python stacks to stderr (a failure's evidence)."""
    import signal

    try:
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
    except OSError:
        pass


def _recv(conn, kind: str, timeout: float) -> tuple:
    if not conn.poll(timeout):
        raise RuntimeError(f"a consumer process did not answer ({kind}) within {timeout:.0f} s")
    return conn.recv()


def set_share_offset_reset(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


COUNTED = {"ShareFetch": "share_fetches", "ShareAcknowledge": "share_acknowledges", "Fetch": "fetches"}


def broker_counts(metrics_port: int | None) -> dict[str, float]:
    """The broker's request counts (ShareFetch, ShareAcknowledge, Fetch) and share records
    acquired so far, from its Prometheus endpoint (empty without one)."""
    if not metrics_port:
        return {}
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = dict.fromkeys(list(COUNTED.values()) + ["acquired"], 0.0)
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_requests_total{"):
            api = line.split('request="', 1)[1].split('"', 1)[0]
            if api in COUNTED:
                out[COUNTED[api]] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("kafka_server_share_records_acquired_total"):
            out["acquired"] += float(line.rsplit(" ", 1)[1])
    return out


def run_once(pool: Pool, b: Kafkafast, kind: str, members: int, topic: str, expect: int, size: int,
             timeout_s: float, work_us: int = 0, metrics_port: int | None = None) -> dict:
    """One read of the whole topic by a fresh group of `members` consumers of `kind`, each
    spending `work_us` per record."""
    group = f"{kind}-{members}-{uuid.uuid4().hex[:8]}"
    if kind == "share":
        set_share_offset_reset(b.bootstrap, group)
    pool.counter.value = 0
    pool.crossed.value = 0.0
    conns = pool.conns[:members]
    for conn in conns:
        conn.send({"kind": kind, "bootstrap": b.bootstrap, "topic": topic, "group": group, "expect": expect,
                   "timeout_s": timeout_s, "work_us": work_us})
    have: dict[int, int] = {}
    deadline = time.monotonic() + 60
    # classic: every member assigned (4 partitions in all, none idle while partitions remain)
    while not (len(have) == members and sum(have.values()) == PARTITIONS
               and all(have.values()) or kind == "share" and len(have) == members):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind} {members}: the group did not form ({have})")
        for i, conn in enumerate(conns):
            while conn.poll(0.01):
                have[i] = conn.recv()[1]
    counts0 = broker_counts(metrics_port)
    cpu0 = b.cpu_seconds()
    t_go = time.monotonic()
    for conn in conns:
        conn.send("go")
    while not pool.crossed.value and time.monotonic() < t_go + timeout_s:
        time.sleep(0.005)
    broker_cpu = b.cpu_seconds() - cpu0  # over the window: to the poll that brought the last record
    cpu_window = time.monotonic() - t_go
    counts1 = broker_counts(metrics_port)
    results = []
    for conn in conns:
        while (msg := _recv(conn, "done", timeout_s + 30))[0] != "done":
            pass  # a late ("ready", n) of a classic member
        results.append(msg[1])
    seen: set[tuple[int, int]] = set()
    for i, conn in enumerate(conns):
        try:
            while (msg := _recv(conn, "close", 60))[0] != "closed":
                pass
        except RuntimeError:
            _dump_stacks(pool.procs[i])
            raise RuntimeError(f"{kind} {members}: member {i} did not close within 60 s (its stacks: stderr)") from None
        seen |= msg[1]
    received = len(seen)  # distinct records
    delivered = sum(r["records"] for r in results)
    t_end = pool.crossed.value or time.monotonic()
    seconds = t_end - t_go
    samples = sorted(s for r in results for s in r["samples"])
    steady = _steady_rate(samples, received)
    client_cpu = sum(r["client_cpu_s"] for r in results)
    per_member = sorted(r["records"] for r in results)
    requests = {k: counts1[k] - counts0[k] for k in counts1}
    fetches = requests.get("share_fetches" if kind == "share" else "fetches", 0.0)
    return {"kind": kind, "members": members, "work_us": work_us, "record_bytes": size, "expect": expect,
            "received": received,
            "complete": received >= expect, "errors": sum(r["errors"] for r in results),
            "duplicates": delivered - received, "redelivered": sum(r["redelivered"] for r in results),
            "seconds": seconds, "records_per_s": received / seconds, "MB_per_s": received * size / seconds / 1e6,
            "steady_records_per_s": steady, "steady_MB_per_s": steady * size / 1e6,
            "broker_cpu_s_per_GB": broker_cpu / max(received * size / 1e9, 1e-12),
            "broker_cores_busy": broker_cpu / cpu_window, "broker_us_per_record": broker_cpu / max(received, 1) * 1e6,
            "requests": requests, "fetches_per_1000_records": fetches / max(received, 1) * 1000,
            "records_per_share_fetch": (requests.get("acquired", 0.0) / fetches if kind == "share" and fetches
                                        else float("nan")),
            "client_cores_busy": client_cpu / seconds, "client_us_per_record": client_cpu / max(received, 1) * 1e6,
            "members_min_records": per_member[0],
            "members_max_records": per_member[-1], "members_with_records": sum(1 for x in per_member if x)}


def _steady_rate(samples: list[tuple[float, int]], total: int) -> float:
    """Records/s between the polls that took the total past 10% and past 90%."""
    cum = 0
    t10 = t90 = None
    c10 = c90 = 0
    for t, k in samples:
        cum += k
        if t10 is None and cum >= 0.1 * total:
            t10, c10 = t, cum
        if cum >= 0.9 * total:
            t90, c90 = t, cum
            break
    if t10 is None or t90 is None or t90 <= t10:
        return float("nan")
    return (c90 - c10) / (t90 - t10)


class ProfiledKafkafast(Kafkafast):
    """kafkafast (one process) run under cProfile, its profile written to `out` when it stops."""

    def __init__(self, workdir: Path, out: Path, settings: dict[str, str]) -> None:
        super().__init__(workdir, 0, settings)
        self.out = out

    def command(self) -> list[str]:
        cmd = super().command()  # [python, -m, kafkafast.cli.main, ...]
        return [cmd[0], "-m", "cProfile", "-o", str(self.out)] + cmd[1:]


# -- the run ---------------------------------------------------------------------------------------

def preload(b: Kafkafast, topic: str, records: int, size: int, batch_bytes: int = 1 << 20) -> None:
    b.create_topic(topic, PARTITIONS)
    res = run_load("produce", [{"bootstrap": b.bootstrap, "topic": topic, "size": size, "acks": "1",
                                "count": records, "round_robin": PARTITIONS, "batch_size": batch_bytes}])[0]
    if res["acked"] != records:
        raise RuntimeError(f"preloading {topic}: {res['acked']} of {records} records acknowledged")


def configs(work_us: int) -> list[tuple[str, int, int]]:
    """(kind, members, work per record in us) of every row: the zero-work ones, then with work."""
    return [(k, m, 0) for k, m in CONFIGS] + ([(k, m, work_us) for k, m in WORK_CONFIGS] if work_us else [])


def measure(records: int, sizes: list[int], repeats: int, workers: int, timeout_s: float,
            log=print, profile: Path | None = None, work_us: int = 0) -> dict:
    runs: list[dict] = []
    load_start = os.getloadavg()
    t0 = time.monotonic()
    pool = Pool(max(m for _, m in CONFIGS))
    rows = configs(work_us)
    try:
        with tempfile.TemporaryDirectory(prefix="kafkafast-share-bench-") as tmp:
            # a classic group's first rebalance at once: each classic run starts a new group, and the
            # 3 s wait (before the measured window) would only lengthen the run
            metrics_port = free_port()
            settings = {"group.initial.rebalance.delay.ms": "0", "metrics.port": str(metrics_port)}
            b = (ProfiledKafkafast(Path(tmp), profile, settings) if profile
                 else Kafkafast(Path(tmp), workers, settings))
            b.start(timeout=60)
            try:
                topics = {}
                for size in sizes:
                    topics[size, 0] = f"share-bench-{size}"
                    preload(b, topics[size, 0], records, size)
                    if work_us:
                        topics[size, work_us] = f"share-bench-{size}-batch{WORK_BATCH_BYTES}"
                        preload(b, topics[size, work_us], records, size, WORK_BATCH_BYTES)
                warm = "share-bench-warm"
                preload(b, warm, min(records, 20_000), 100)
                for kind, members in (("classic", 4), ("share", 4)):  # internal topics, code paths, page cache
                    run_once(pool, b, kind, members, warm, min(records, 20_000), 100, timeout_s,
                             metrics_port=metrics_port)
                for rep in range(repeats):
                    order = rows[rep % len(rows):] + rows[:rep % len(rows)]
                    for size in sizes:
                        for kind, members, work in order:
                            r = run_once(pool, b, kind, members, topics[size, work], records, size, timeout_s,
                                         work, metrics_port)
                            r["repeat"] = rep
                            runs.append(r)
                            log(f"repeat {rep + 1}/{repeats} {size} B {kind} {members} work {work} us: "
                                f"{r['records_per_s']:.0f} rec/s end to end, {r['steady_records_per_s']:.0f} steady, "
                                f"{r['MB_per_s']:.1f} MB/s, broker {r['broker_cpu_s_per_GB']:.1f} CPU-s/GB "
                                f"({r['broker_us_per_record']:.2f} us/record, {r['broker_cores_busy']:.2f} cores), "
                                f"{r['fetches_per_1000_records']:.2f} fetches/1000 records, "
                                f"{r['records_per_share_fetch']:.0f} acquired/ShareFetch, "
                                f"clients {r['client_cores_busy']:.2f} cores, members {r['members_min_records']}-"
                                f"{r['members_max_records']}, redelivered {r['redelivered']}, duplicates {r['duplicates']}"
                                + ("" if r["complete"] else f", INCOMPLETE {r['received']}/{records}"))
                command = b.describe()
            finally:
                b.stop()
    finally:
        pool.close()
    return {"records": records, "sizes": sizes, "repeats": repeats, "workers": workers, "partitions": PARTITIONS,
            "work_us": work_us, "work_batch_bytes": WORK_BATCH_BYTES,
            "broker_command": command, "machine": machine(), "tree": describe_tree(REPO),
            "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "wall_s": time.monotonic() - t0,
            "rows": summarize(runs, sizes, rows), "runs": runs}


RATIOS = ((("share", 4), ("classic", 4)), (("share", 16), ("classic", 4)), (("share", 16), ("share", 4)))


def summarize(runs: list[dict], sizes: list[int], rows_wanted: list[tuple[str, int, int]]) -> list[dict]:
    rows = []
    for size in sizes:
        for kind, members, work in rows_wanted:
            rs = [r for r in runs if r["record_bytes"] == size and r["kind"] == kind and r["members"] == members
                  and r.get("work_us", 0) == work]
            if not rs:
                continue
            row = {"record_bytes": size, "kind": kind, "members": members, "work_us": work, "runs": len(rs),
                   "incomplete": sum(not r["complete"] for r in rs), "redelivered": sum(r["redelivered"] for r in rs),
                   "duplicates": sum(r["duplicates"] for r in rs),
                   "errors": sum(r["errors"] for r in rs)}
            for key in ("records_per_s", "MB_per_s", "steady_records_per_s", "steady_MB_per_s",
                        "broker_cpu_s_per_GB", "broker_us_per_record", "broker_cores_busy", "client_cores_busy",
                        "client_us_per_record",
                        "fetches_per_1000_records", "records_per_share_fetch"):
                row[key] = _stat([r[key] for r in rs])
            row["members_with_records_min"] = min(r["members_with_records"] for r in rs)
            for key in ("members_min_records", "members_max_records"):  # how evenly the members read
                row[key] = statistics.median(r[key] for r in rs)
            rows.append(row)
        # within each repeat, at each work time: share(N) over classic(4), share(16) over share(4)
        for work in sorted({w for _, _, w in rows_wanted}):
            for top, bottom in RATIOS:
                ratios, steady = [], []
                for rep in sorted({r["repeat"] for r in runs}):
                    pick = {(r["kind"], r["members"]): r for r in runs if r["record_bytes"] == size
                            and r["repeat"] == rep and r.get("work_us", 0) == work}
                    if top in pick and bottom in pick:
                        ratios.append(pick[top]["records_per_s"] / pick[bottom]["records_per_s"])
                        steady.append(pick[top]["steady_records_per_s"] / pick[bottom]["steady_records_per_s"])
                if ratios:
                    rows.append({"record_bytes": size, "work_us": work, "ratio": _stat(ratios),
                                 "steady_ratio": _stat(steady), "kind": f"{top[0]}({top[1]})/{bottom[0]}({bottom[1]})"})
    return rows


def _stat(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def _cell(s: dict, fmt: str) -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def markdown(res: dict) -> str:
    m = res["machine"]
    la0, la1 = res["loadavg_start"], res["loadavg_end"]
    lines = ["# Share groups vs a classic consumer group: consume throughput (issue 27)", "",
             f"Command: `{res['command']}` ({res['wall_s']:.0f} s). Broker: kafkafast "
             f"({res['workers'] or 'one'} worker process{'es' if res['workers'] else ''}), `{res['broker_command']}`; "
             f"tree {res['tree']['branch']} at {res['tree']['commit']}"
             f"{' (uncommitted changes)' if res['tree']['dirty'] else ''}, "
             f"compiled twins: {', '.join(res['tree']['native_modules']) or 'none'}.", "",
             f"Machine: {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, {m.get('memory_GB', '?')} GiB, Python "
             f"{m.get('python', '?')}, confluent-kafka {m.get('confluent_kafka', '?')}. The machine is shared with "
             f"other work: load average (1/5/15 min) {' / '.join(f'{x:.2f}' for x in la0)} at the start, "
             f"{' / '.join(f'{x:.2f}' for x in la1)} at the end, on 2 cores, while the broker and up to 16 "
             "consumer processes also run on them. Compare within the table; absolute numbers are low.", "",
             f"A topic of {res['partitions']} partitions per record size, preloaded with {res['records']:,} records; "
             "each run reads all of it with a fresh group: `share N` = N confluent-kafka ShareConsumers (implicit "
             "acknowledgement: every record accepted), `classic N` = N confluent-kafka Consumers subscribed in a "
             "consumer group. One process per consumer. Classic members join before the window, share consumers "
             "at its start (see the script's docstring). `end to end`: records / (start -> last record); "
             "`steady`: between 10% and 90% of the "
             f"records. Median (min–max) of {res['repeats']} repeats, configurations alternating within each repeat. "
             "Cores busy: CPU-seconds over the window; the broker is one event loop per process, so a one-process "
             "broker near 1.0 is broker-bound, and consumers near 1.0 on this 2-core machine are client-bound. "
             "Where the broker's time goes in share fetches: `perf/results/share_groups_profile.md` "
             "(`--profile-broker`).", "",
             (f"Rows with `work` > 0: each consumer spends that many microseconds per record after each poll "
              "(one sleep of the poll's record count x the time: the CPU stays free, as for an application "
              "waiting on a database or a remote call), on a topic of its own produced with "
              f"batch.size={res.get('work_batch_bytes', WORK_BATCH_BYTES)} (the Java producer's default); a "
              "record counts once processed. `broker us/record`: broker CPU per distinct record read; "
              "`fetches/1000`: ShareFetch (share) or Fetch (classic) requests answered per 1000 records; "
              "`acquired/ShareFetch`: records acquired per ShareFetch (the broker's metrics); "
              "`client us/record`: the consumer processes' CPU per record.") if res.get("work_us") else "",
             "",
             "| size | group | members | work us/record | records/s end to end | MB/s | records/s steady | MB/s steady | "
             "broker CPU-s/GB | broker us/record | broker cores busy | client cores busy | client us/record | "
             "fetches/1000 | "
             "acquired/ShareFetch | members with records | "
             "records of one member, least / most | redelivered | duplicates | incomplete |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        if "ratio" in r:
            continue
        per_fetch = r.get("records_per_share_fetch", {}).get("median", float("nan"))
        lines.append(f"| {r['record_bytes']} | {r['kind']} | {r['members']} | {r.get('work_us', 0)} | "
                     f"{_cell(r['records_per_s'], '.0f')} | "
                     f"{r['MB_per_s']['median']:.1f} | {_cell(r['steady_records_per_s'], '.0f')} | "
                     f"{r['steady_MB_per_s']['median']:.1f} | {r['broker_cpu_s_per_GB']['median']:.1f} | "
                     f"{r['broker_us_per_record']['median']:.2f} | "
                     f"{r['broker_cores_busy']['median']:.2f} | {r['client_cores_busy']['median']:.2f} | "
                     f"{r['client_us_per_record']['median']:.2f} | "
                     f"{r['fetches_per_1000_records']['median']:.2f} | "
                     f"{'-' if per_fetch != per_fetch else f'{per_fetch:.0f}'} | "
                     f"{r['members_with_records_min']} | {r['members_min_records']:,.0f} / {r['members_max_records']:,.0f} | "
                     f"{r['redelivered']} | {r['duplicates']} | {r['incomplete']} |")
    lines += ["", "## Against the goal (share(4) >= 0.7 x classic(4) records/s; share grows past the partition count)", "",
              "| size | work us/record | ratio (same repeat) | end to end | steady | goal | met |",
              "|---:|---:|---|---:|---:|---:|---|"]
    for r in res["rows"]:
        if "ratio" not in r:
            continue
        goal = {"share(4)/classic(4)": GOAL, "share(16)/share(4)": 1.0}.get(r["kind"])
        if r.get("work_us") and r["kind"] == "share(16)/classic(4)":
            goal = 1.0  # slow consumers: more consumers than partitions is what share groups are for
        met = "" if goal is None else ("yes" if r["ratio"]["median"] > goal or goal == GOAL
                                       and r["ratio"]["median"] >= goal else "**no**")
        lines.append(f"| {r['record_bytes']} | {r.get('work_us', 0)} | {r['kind']} | {_cell(r['ratio'], '.2f')} | "
                     f"{_cell(r['steady_ratio'], '.2f')} | {'-' if goal is None else goal} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.share_groups")
    ap.add_argument("--records", type=int, default=500_000, help="records per topic (each run reads them all)")
    ap.add_argument("--sizes", default="100,1024", help="record sizes in bytes, comma separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="kafkafast --workers (0: one process)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take at most")
    ap.add_argument("--work-us", type=int, default=200,
                    help="rows for classic 4, share 4 and share 16 whose consumers spend this many us per record "
                         "(a sleep per poll; 0: no such rows)")
    ap.add_argument("--smoke", action="store_true", help="3,000 records of 100 B, one repeat (seconds)")
    ap.add_argument("--out", default=None, help="write the results here (.json and .md beside it)")
    ap.add_argument("--profile-broker", type=Path, default=None,
                    help="run the broker (one process) under cProfile and write its profile here")
    args = ap.parse_args(argv)
    if args.profile_broker and args.workers:
        ap.error("--profile-broker profiles a one-process broker (--workers 0)")
    if args.smoke:
        args.records, args.sizes, args.repeats, args.timeout = 3000, "100", 1, 60.0
    sizes = [int(s) for s in args.sizes.split(",")]
    res = measure(args.records, sizes, args.repeats, args.workers, args.timeout,
                  log=lambda line: print(line, file=sys.stderr, flush=True), profile=args.profile_broker,
                  work_us=args.work_us)
    res["command"] = ("python -m perf.share_groups" + (" --smoke" if args.smoke else
                      f" --records {args.records} --sizes {args.sizes} --repeats {args.repeats} --work-us {args.work_us}")
                      + (f" --workers {args.workers}" if args.workers else "") + (f" --out {args.out}" if args.out else ""))
    md = markdown(res)
    print(md)
    if args.out:
        out = Path(args.out)
        out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
        out.with_suffix(".md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
