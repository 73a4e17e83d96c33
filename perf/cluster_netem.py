"""acks=all over a network with a real round trip: three kafkafast brokers (ZooKeeper mode), each
in a network namespace of its own, and the client and ZooKeeper in a fourth, joined by veth
pairs to a bridge; every packet a host sends waits `--delay-ms` (default 1 ms: `tc netem delay
1ms`, or the same through an nfnetlink queue where the kernel has no netem, perf/netdelay.py),
so a round trip between two hosts takes two delays. Everything is made and removed by the run
(needs root).

    python -m perf.cluster_netem [--delay-ms 1] [--rounds 3] [--produces 400] [--rate 20000 80000 160000] [--seconds 5]

What it shows is the cost of replication in round trips, which on loopback is hidden by the
loop passes around it. Per round, alternating which acks goes first:

* sequential produces: one Produce v8 of one 1 KiB record at a time to the leader of a
  1-partition topic (RF 3, min.insync.replicas=2), from a plain socket, acks=1 and acks=all.
  acks=1 costs one client round trip; acks=all adds the replication: the append wakes the
  followers' parked Fetches, whose answers carry the record, and the next Fetch of a follower
  reports its new log end and moves the high watermark, which answers the produce. That is
  one round trip between the leader and a follower; a design that also waited for a Fetch to
  bring the high watermark, or for a timer, would add a second round trip or more. Reported:
  p50/p99 of each, and (acks=all p50 - acks=1 p50) / the measured broker round trip, the
  replication's cost in round trips.
* a fixed-rate load: librdkafka's `rdkafka_performance` (`perf/rdkafka_tools.py`) at each `--rate`
  (msg/s) of 1 KiB records to 6 partitions (RF 3, min.insync.replicas=2), linger.ms=5, acks=1 and
  acks=all: produce->ack p50/p99. `--rate 0` leaves it out (and the build of the tool:
  tests/integration/test_cluster_netem.py runs the rest).

The round trips are measured with a 1-byte TCP echo between the hosts before the loads
(`perf.netdelay`), and again between the brokers after them. Writes
`perf/results/cluster_netem.json` and its section of `perf/results/cluster.md`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafkafast.cluster.local import ZooKeeperServer
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from perf import rdkafka_tools
from perf.acks_all_latency import create_topic as create_seq_topic
from perf.brokers import REPO, Kafkafast, api_versions_answered, cpu_seconds
from perf.cluster import SIZE, TABLE_SETTINGS, create_topic, settle_disk
from perf.forwarding import Conn
from perf.netdelay import Network, NetworkUnavailable

HOSTS = {"client": f"{Network.PREFIX}.10", "b1": f"{Network.PREFIX}.1", "b2": f"{Network.PREFIX}.2",
         "b3": f"{Network.PREFIX}.3"}
BROKER_PORT = 9092
ZK_PORT = 2181
SEQ_TOPIC = "seq"
LOAD_TOPIC = "bench"
BEGIN = "<!-- perf.cluster_netem: begin -->"
END = "<!-- perf.cluster_netem: end -->"


class HostBroker(Kafkafast):
    """A kafkafast broker in host `name` of the network, listening on its address."""

    def __init__(self, workdir: Path, workers: int, settings: dict[str, str], net: Network, name: str) -> None:
        super().__init__(workdir, workers, settings)
        self.net, self.host_name, self.host, self.port = net, name, net.hosts[name], BROKER_PORT

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index(f"listeners=PLAINTEXT://127.0.0.1:{self.port}")] = f"listeners=PLAINTEXT://{self.bootstrap}"
        return [*self.net.exec_prefix(self.host_name), *cmd]

    def answers(self) -> bool:
        return api_versions_answered(self.port, self.host)


def produce(conn: Conn, acks: int, value: bytes) -> None:
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=SEQ_TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    code = conn.request(req, 8).responses[0].partition_responses[0].error_code
    if code:
        raise RuntimeError(f"produce acks={acks} answered error {code}")


def sequential(conn: Conn, acks: int, count: int) -> list[float]:
    value = os.urandom(SIZE)
    for _ in range(20):  # warm-up
        produce(conn, acks, value)
    lat = []
    for _ in range(count):
        t = time.perf_counter()
        produce(conn, acks, value)
        lat.append((time.perf_counter() - t) * 1000)
    return lat


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def retransmits(net: Network) -> int:
    """TCP segments the hosts retransmitted so far (/proc/net/snmp of each host's namespace)."""
    total = 0
    for host in net.hosts:
        lines = [line.split() for line in net.run_in(host, "cat", "/proc/net/snmp").splitlines() if line.startswith("Tcp:")]
        total += int(dict(zip(lines[0], lines[1]))["RetransSegs"])
    return total


def relay_pids(net: Network) -> list[int]:
    """The delay relays' processes (none with netem)."""
    pids = []
    for host in net.hosts:
        for pid in net.pids(host):
            try:
                if b"perf.netdelay\0relay" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(pid)
            except OSError:
                pass
    return pids


def measured_load(net: Network, binary: Path, bootstrap: str, rate: int, acks: str, seconds: float) -> dict:
    """One rdkafka_performance load at `rate`; meanwhile the broker round trip (b2 -> b1, 100
    echoes from 1.5 s in) and the CPU the delay relays used, in cores."""
    relays = relay_pids(net)
    rtt: list[float] = []

    def probe() -> None:
        time.sleep(1.5)
        rtt.append(net.rtt_ms("b2", "b1", count=100))
    prober = threading.Thread(target=probe)
    settle_disk()  # what earlier loads left dirty is written before, not during, this one
    cpu0, t0, resent = cpu_seconds(relays), time.monotonic(), retransmits(net)
    prober.start()
    r = rdkafka_tools.produce(binary, bootstrap, LOAD_TOPIC, size=SIZE, acks=acks, count=int(rate * (seconds + 1)),
                              rate=rate, skip=rate)
    r["relay_cores"] = (cpu_seconds(relays) - cpu0) / (time.monotonic() - t0)
    prober.join()
    r["rtt_ms"] = rtt[0] if rtt else float("nan")
    r["retransmits"] = retransmits(net) - resent
    return r


def inside(args: argparse.Namespace) -> dict:
    """The measurements, run in the client host."""
    net = Network(HOSTS, args.delay_ms, tag=args.inside)
    net.delay = args.delay_kind
    rates = [r for r in args.rate if r > 0]
    binary = rdkafka_tools.setup(None) if rates else None
    rtt = {"client-b1": net.rtt_ms("client", "b1"), "b1-b2": net.rtt_ms("b1", "b2")}
    net.switch_delay(False)
    try:
        rtt["b1-b2 undelayed"] = net.rtt_ms("b1", "b2")
    finally:
        net.switch_delay(True)
    print(f"round trips: client-broker {rtt['client-b1']:.2f} ms, broker-broker {rtt['b1-b2']:.2f} ms", flush=True)
    root = Path(tempfile.mkdtemp(prefix="kafkafast-netem-"))
    zk = ZooKeeperServer(root / "zookeeper", ZK_PORT, host=HOSTS["client"]).start()
    brokers = [HostBroker(root / f"broker-{i}", args.workers, {
        "broker.id": str(i), "zookeeper.connect": f"{zk.connect}/kafka", "offsets.topic.replication.factor": "3",
        "log.cleaner.enable": "false", "zookeeper.session.timeout.ms": "30000", **TABLE_SETTINGS}, net, f"b{i}")
        for i in (1, 2, 3)]
    seq: dict[str, list[float]] = {"1": [], "all": [], "1 undelayed": [], "all undelayed": []}
    seq_rounds: list[dict] = []
    loads: dict[str, list[dict]] = {f"{rate} {acks}": [] for rate in rates for acks in ("1", "all")}
    try:
        for b in brokers:
            b.start()
        time.sleep(3)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        leader = brokers[create_seq_topic(bootstrap, SEQ_TOPIC) - 1]
        if binary:
            create_topic(bootstrap, LOAD_TOPIC, 3)
            rdkafka_tools.produce(binary, bootstrap, LOAD_TOPIC, size=SIZE, acks="all", count=5000)  # warm-up
        conn = Conn(leader.port, leader.host)
        for rnd in range(args.rounds):
            order = ("1", "all") if rnd % 2 == 0 else ("all", "1")
            row = {}
            for delayed in (True, False):
                if not delayed:
                    net.switch_delay(False)
                try:
                    for acks in order:
                        lat = sequential(conn, -1 if acks == "all" else 1, args.produces)
                        key = acks if delayed else f"{acks} undelayed"
                        seq[key] += lat
                        row[key] = statistics.median(lat)
                finally:
                    if not delayed:
                        net.switch_delay(True)
            seq_rounds.append(row)
            print(f"round {rnd + 1}/{args.rounds}: sequential p50 acks=1 {row['1']:.2f} acks=all {row['all']:.2f} ms;"
                  f" without the delay {row['1 undelayed']:.2f} and {row['all undelayed']:.2f} ms", flush=True)
            for rate in rates:
                for acks in order:
                    r = measured_load(net, binary, bootstrap, rate, acks, args.seconds)
                    loads[f"{rate} {acks}"].append(r)
                    print(f"round {rnd + 1}/{args.rounds}: at {rate:,} msg/s acks={acks} p50 {r['p50_ms']:.1f} "
                          f"p99 {r['p99_ms']:.1f} ms; broker round trip meanwhile {r['rtt_ms']:.2f} ms, "
                          f"delay relays {r['relay_cores']:.2f} cores, {r['retransmits']} TCP segments resent",
                          flush=True)
        conn.sock.close()
        rtt["b1-b2 after"] = net.rtt_ms("b1", "b2")
    finally:
        for b in brokers:
            b.stop()
        zk.kill()
        shutil.rmtree(root, ignore_errors=True)
    return {"rtt_ms": rtt, "leader": leader.host_name,
            "sequential": {a: {"p50_ms": statistics.median(v), "p99_ms": pct(v, 0.99), "max_ms": max(v),
                               "count": len(v)} for a, v in seq.items()},
            "sequential_rounds": seq_rounds,
            "load": {a: {"p50_ms": statistics.median(r["p50_ms"] for r in rs),
                         "p99_ms": statistics.median(r["p99_ms"] for r in rs),
                         "p99_range": [min(r["p99_ms"] for r in rs), max(r["p99_ms"] for r in rs)],
                         "msgs_per_s": statistics.median(r["msgs_per_s"] for r in rs),
                         "rtt_ms": statistics.median(r["rtt_ms"] for r in rs),
                         "relay_cores": statistics.median(r["relay_cores"] for r in rs),
                         "errors": sum(r["errors"] for r in rs)} for a, rs in loads.items() if rs}}


def replication_round_trips(res: dict) -> float:
    """What the delay added to (acks=all p50 - acks=1 p50) of the sequential produces, in what
    it added to a broker round trip: the processing on the path (the same with and without the
    delay) cancels out."""
    seqs, rtt = res["sequential"], res["rtt_ms"]
    added = (seqs["all"]["p50_ms"] - seqs["1"]["p50_ms"]) - (seqs["all undelayed"]["p50_ms"] - seqs["1 undelayed"]["p50_ms"])
    return added / (rtt["b1-b2"] - rtt["b1-b2 undelayed"])


def markdown(res: dict) -> str:
    rtt, seqs, load = res["rtt_ms"], res["sequential"], res["load"]
    rounds = replication_round_trips(res)
    delayed_rtt = rtt["b1-b2"] - rtt["b1-b2 undelayed"]
    per_round = ", ".join(f"{((r['all'] - r['1']) - (r['all undelayed'] - r['1 undelayed'])) / delayed_rtt:.2f}"
                          for r in res["sequential_rounds"])
    verdict = (f"{round(rounds)} round trip{'s' if round(rounds) != 1 else ''} between the leader and a follower"
               if rounds >= 0.5 else "less than a round trip (the replication did not cross the delayed network?)")
    rates = sorted({int(k.split()[0]) for k in load})
    loaded = [] if not load else [
        "rdkafka_performance at a fixed rate (1 KiB, 6 partitions RF3, min.insync.replicas=2, linger.ms=5), "
        f"{res['seconds']:g} s after 1 s of warm-up, medians of the rounds. \"acks=all - acks=1\": at the p50, "
        "in broker round trips measured before the loads; \"round trip during\": a broker round trip measured "
        "during the load (100 echoes from broker 2 to broker 1); \"relays\": the cores the delay relays used "
        "(their packets' wait is part of every round trip):",
        "",
        "| msg/s asked | acks | msg/s reached | p50 ms | p99 ms (range) | errors | acks=all - acks=1 "
        "| round trip during, ms | relays, cores |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *(f"| {rate:,} | {a} | {load[f'{rate} {a}']['msgs_per_s']:,} | {load[f'{rate} {a}']['p50_ms']:.1f} | "
          f"{load[f'{rate} {a}']['p99_ms']:.1f} ({load[f'{rate} {a}']['p99_range'][0]:.1f}-"
          f"{load[f'{rate} {a}']['p99_range'][1]:.1f}) | {load[f'{rate} {a}']['errors']} | "
          + (f"{(load[f'{rate} all']['p50_ms'] - load[f'{rate} 1']['p50_ms']) / rtt['b1-b2']:.2f} |" if a == "all" else " |")
          + f" {load[f'{rate} {a}']['rtt_ms']:.2f} | {load[f'{rate} {a}']['relay_cores']:.2f} |"
          for rate in rates for a in ("1", "all")),
        ""]
    return "\n".join([
        BEGIN,
        "## acks=all over a network round trip (issue 25's netem benchmark, `perf.cluster_netem`)",
        "",
        f"Command: `{res['command']}` ({res['when']}, {res['wall_s']:.0f} s). Three `--workers {res['workers']}` "
        f"brokers (ZooKeeper mode) in network namespaces of their own, the client and ZooKeeper in a fourth, "
        f"joined by veth pairs to a bridge; every packet a host sends waits {res['delay_ms']:g} ms "
        f"({'`tc netem delay`' if res['delay'] == 'netem' else 'through an nfnetlink queue: this kernel has no netem (CONFIG_NET_SCH_NETEM unset), see perf/netdelay.py'}). "
        f"Machine: {res['machine']}, load average {res['loadavg']} at the start.",
        "",
        f"Round trips (1-byte TCP echo, median of 50): client-broker {rtt['client-b1']:.2f} ms, broker-broker "
        f"{rtt['b1-b2']:.2f} ms before the loads, {rtt['b1-b2 after']:.2f} ms after; broker-broker with the delay "
        f"taken off {rtt['b1-b2 undelayed']:.2f} ms.",
        "",
        f"Sequential produces of one 1 KiB record to the leader ({res['leader']}) of a 1-partition RF3 topic "
        f"(min.insync.replicas=2), one at a time, {res['rounds']} rounds of {res['produces']} per acks, alternated; "
        "in each round also on the same connection with the delay taken off every host:",
        "",
        "| acks | p50 ms | p99 ms | max ms | without the delay: p50 / p99 ms |",
        "|---|---:|---:|---:|---:|",
        *(f"| {a} | {seqs[a]['p50_ms']:.2f} | {seqs[a]['p99_ms']:.2f} | {seqs[a]['max_ms']:.2f} | "
          f"{seqs[a + ' undelayed']['p50_ms']:.2f} / {seqs[a + ' undelayed']['p99_ms']:.2f} |" for a in ("1", "all")),
        "",
        f"acks=all - acks=1 at the median: {seqs['all']['p50_ms'] - seqs['1']['p50_ms']:.2f} ms with the delay, "
        f"{seqs['all undelayed']['p50_ms'] - seqs['1 undelayed']['p50_ms']:.2f} ms without (the processing on the "
        f"path); the delay added {seqs['all']['p50_ms'] - seqs['1']['p50_ms'] - seqs['all undelayed']['p50_ms'] + seqs['1 undelayed']['p50_ms']:.2f} ms "
        f"to it, **{rounds:.2f} times what it added to a broker round trip** ({delayed_rtt:.2f} ms; per round: "
        f"{per_round}): the replication of a produce costs {verdict}.",
        "",
        *loaded,
        END,
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.cluster_netem")
    ap.add_argument("--delay-ms", type=float, default=1.0, help="the delay of every packet a host sends")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--produces", type=int, default=400, help="sequential produces per round and acks")
    ap.add_argument("--rate", type=int, nargs="+", default=[20000, 80000, 160000],
                    help="msg/s of the rdkafka_performance loads, one load per rate (0: none)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", default="perf/results/cluster_netem.json")
    ap.add_argument("--inside", default=None, help=argparse.SUPPRESS)  # the network's tag: run in the client host
    ap.add_argument("--delay-kind", default="nfqueue", help=argparse.SUPPRESS)  # how the network delays
    args = ap.parse_args(argv)
    if args.inside:
        print("RESULT " + json.dumps(inside(args)), flush=True)
        return 0
    started = time.time()
    loadavg = " ".join(f"{x:.1f}" for x in os.getloadavg())
    if any(args.rate):
        rdkafka_tools.setup(None)  # built (once) before the network exists, with this namespace's network
    try:
        net = Network(HOSTS, args.delay_ms).create()
    except NetworkUnavailable as e:
        print(f"perf.cluster_netem: {e} (it needs root, `ip` and iptables)", file=sys.stderr)
        return 2
    try:
        cmd = [*net.exec_prefix("client"), sys.executable, "-m", "perf.cluster_netem", "--inside", net.tag,
               "--delay-kind", net.delay,
               "--delay-ms", str(args.delay_ms), "--rounds", str(args.rounds), "--produces", str(args.produces),
               "--rate", *map(str, args.rate), "--seconds", str(args.seconds), "--workers", str(args.workers)]
        proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, text=True)
        result = None
        for line in proc.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
            else:
                print(line, end="", flush=True)
        if proc.wait() != 0 or result is None:
            print("perf.cluster_netem: the run in the client host failed", file=sys.stderr)
            return 1
    finally:
        net.delete()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    res = {"command": " ".join(["python -m perf.cluster_netem", *(argv if argv is not None else sys.argv[1:])]),
           "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "wall_s": time.time() - started,
           "delay_ms": args.delay_ms, "delay": net.delay, "rounds": args.rounds, "produces": args.produces,
           "rate": args.rate, "seconds": args.seconds, "workers": args.workers, "loadavg": loadavg,
           "machine": f"{cpu}, {os.cpu_count()} CPUs", **result}
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1))
    md = out.parent / "cluster.md"
    text = md.read_text() if md.exists() else ""
    section = markdown(res)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    md.write_text(text)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
