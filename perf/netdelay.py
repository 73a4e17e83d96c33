"""A fixed delay on every packet a network namespace sends out of an interface: `tc netem
delay` where the kernel has it, else the same done through an nfnetlink queue.

`Network` builds hosts as network namespaces joined by veth pairs to a bridge (in a namespace
of its own), each host with one address, and delays every packet a host sends by `delay_ms`:
a round trip between two hosts then takes two delays. Everything it makes is removed by
`delete()` (the namespaces, and with them their interfaces, rules and the processes still in
them).

The delay, in order of preference:
* `tc qdisc add dev eth0 root netem delay Dms` on each host's interface;
* where the kernel has no netem (`CONFIG_NET_SCH_NETEM` unset: "Specified qdisc kind is
  unknown"), an iptables rule in each host sends the packets leaving `eth0` to nfnetlink queue
  0 (`-j NFQUEUE --queue-bypass`), and a relay process in the host (`python -m perf.netdelay
  relay`) gives the kernel its verdict on each packet `delay_ms` after the packet was queued.
  The kernel keeps the packet (the relay asks for its metadata only, no payload) and releases
  the packets in queue order, with one batch verdict for all that are due, so a packet is
  never reordered and costs the relay one receive. Its delay is the netem one plus the relay's
  wake-up, a few tens of microseconds on an idle core. The relay runs under SCHED_FIFO (as
  root) so that the hosts' load does not hold it back; it still needs CPU time, about a third
  of a core at 160 MB/s here (report the round trip measured during the load, not only the
  one asked for).

The nfnetlink queue protocol (linux/netfilter/nfnetlink_queue.h): a NETLINK_NETFILTER socket;
NFQNL_MSG_CONFIG with NFQA_CFG_CMD (bind the queue number), NFQA_CFG_PARAMS (copy mode
NFQNL_COPY_META) and NFQA_CFG_FLAGS (NFQA_CFG_F_FAIL_OPEN: accept when the queue is full; NFQA_CFG_F_GSO: a TCP
segment offloaded to the device is queued whole, not cut to the MTU first);
each packet arrives as NFQNL_MSG_PACKET whose NFQA_PACKET_HDR carries the packet id;
NFQNL_MSG_VERDICT_BATCH with NFQA_VERDICT_HDR (NF_ACCEPT, id) accepts every queued packet up to
that id. Integers in the netfilter payloads are big-endian, netlink's own headers are native.
"""
from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
QUEUE_MAXLEN = 65536
NLMSG = struct.Struct("=IHHII")
NFGEN = struct.Struct("!BBH")


def _attr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _message(kind: int, queue: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = NFGEN.pack(socket.AF_UNSPEC, 0, queue) + attrs
    return NLMSG.pack(NLMSG.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


class Queue:
    """Queue `number` of this network namespace, bound on a NETLINK_NETFILTER socket."""

    def __init__(self, number: int = 0) -> None:
        self.number = number
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        self._config(_attr(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, socket.AF_INET)))
        self._config(_attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
                     + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))
                     + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))
                     + _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)))

    def _config(self, attrs: bytes) -> None:
        self.seq += 1
        self.sock.send(_message(NFQNL_MSG_CONFIG, self.number, attrs, self.seq, NLM_F_REQUEST | NLM_F_ACK))
        while True:  # the acknowledgement (packets may already come first)
            data = self.sock.recv(65536)
            length, kind, _, seq, _ = NLMSG.unpack_from(data)
            if kind == NLMSG_ERROR and seq == self.seq:
                error = struct.unpack_from("=i", data, NLMSG.size)[0]
                if error:
                    raise OSError(-error, f"nfnetlink queue {self.number}: {os.strerror(-error)}")
                return

    def packet_ids(self, data: bytes) -> list[int]:
        """The packet ids in what one receive returned."""
        ids, pos = [], 0
        while pos + NLMSG.size <= len(data):
            length, kind, _, _, _ = NLMSG.unpack_from(data, pos)
            if length < NLMSG.size:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                at, end = pos + NLMSG.size + NFGEN.size, pos + length
                while at + 4 <= end:
                    alen, akind = struct.unpack_from("=HH", data, at)
                    if alen < 4:
                        break
                    if akind & 0x7FFF == NFQA_PACKET_HDR:
                        ids.append(struct.unpack_from("!I", data, at + 4)[0])
                        break
                    at += (alen + 3) & ~3
            pos += (length + 3) & ~3
        return ids

    def accept_through(self, packet_id: int) -> None:
        """Accepts every queued packet up to `packet_id`."""
        self.seq += 1
        self.sock.send(_message(NFQNL_MSG_VERDICT_BATCH, self.number,
                                _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id)), self.seq))


def relay(delay_s: float, number: int = 0, ready: str | None = None) -> None:
    """Holds each packet of queue `number` for `delay_s`, in order, until killed. Under the
    SCHED_FIFO policy where allowed (root): the delay of a network does not wait for the
    hosts' CPUs, and a relay that waited for a core behind the brokers it serves added
    milliseconds to some packets (TCP then resent segments on its tail-loss probes)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, OSError):
        pass
    q = Queue(number)
    if ready:
        open(ready, "w").close()
    held: deque[tuple[float, int]] = deque()
    fd = q.sock.fileno()
    while True:
        timeout = max(held[0][0] - time.monotonic(), 0.0) if held else None
        readable, _, _ = select.select([fd], [], [], timeout)
        now = time.monotonic()
        if readable:
            while True:
                try:
                    data = q.sock.recv(65536, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError:  # ENOBUFS: the socket overflowed; the kernel keeps the packets
                    break
                for pid in q.packet_ids(data):
                    held.append((now + delay_s, pid))
        due = None
        while held and held[0][0] <= now + 20e-6:
            due = held.popleft()[1]
        if due is not None:
            q.accept_through(due)


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def echo(bind: str, count: int) -> None:
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(_address(bind))
        srv.listen(1)
        srv.settimeout(30)
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(count):
                if not conn.recv(1):
                    return
                conn.sendall(b"y")


def probe(to: str, count: int) -> float:
    deadline = time.monotonic() + 10
    while True:  # the echo server may not listen yet
        try:
            sock = socket.create_connection(_address(to), timeout=5)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for i in range(count + 1):
            t = time.perf_counter()
            sock.sendall(b"x")
            if sock.recv(1) != b"y":
                raise ConnectionError("echo closed")
            if i:
                times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return times[len(times) // 2]


# -- the hosts ------------------------------------------------------------------------------------

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*cmd: str, check: bool = True, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=60, cwd=cwd)


def namespace_pids(name: str) -> list[int]:
    """The processes in network namespace `name`."""
    r = run("ip", "netns", "pids", name, check=False)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def kill_namespace_processes(name: str, pause_s: float = 0.05) -> None:
    """SIGKILLs every process in network namespace `name` until none is left (50 tries)."""
    for _ in range(50):
        pids = namespace_pids(name)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(pause_s)


class NetworkUnavailable(RuntimeError):
    """Namespaces, veth or a delay cannot be made here (not root, no `ip`, no iptables)."""


class Network:
    """Hosts (name -> address in 10.199.0.0/24) in namespaces `<tag>-<name>`, their `eth0`
    joined to a bridge in `<tag>-hub`, every packet a host sends out delayed by `delay_ms`."""

    PREFIX = "10.199.0"

    def __init__(self, hosts: dict[str, str], delay_ms: float, tag: str | None = None) -> None:
        self.hosts = hosts
        self.delay_ms = delay_ms
        self.tag = tag or f"kfd{os.getpid()}"
        self.delay = "none"
        self.relays: list[subprocess.Popen] = []

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host)]

    def run_in(self, host: str, *cmd: str) -> str:
        """The output of `cmd` run in `host`."""
        return self._in(host, *cmd).stdout

    def _in(self, host: str, *cmd: str, check: bool = True, cwd: str | None = None) -> subprocess.CompletedProcess:
        return run(*self.exec_prefix(host), *cmd, check=check, cwd=cwd)

    def create(self) -> "Network":
        try:
            hub = f"{self.tag}-hub"
            run("ip", "netns", "add", hub)
            run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
            run("ip", "-n", hub, "link", "set", "br0", "up")
            for i, (host, address) in enumerate(self.hosts.items()):
                ns = self.ns(host)
                run("ip", "netns", "add", ns)
                run("ip", "-n", ns, "link", "set", "lo", "up")
                run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", hub)
                run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
                run("ip", "-n", ns, "link", "set", "eth0", "up")
                run("ip", "-n", hub, "link", "set", f"p{i}", "master", "br0")
                run("ip", "-n", hub, "link", "set", f"p{i}", "up")
            if self.delay_ms > 0:
                self._delay()
        except (OSError, subprocess.CalledProcessError) as e:
            self.delete()
            detail = getattr(e, "stderr", "") or str(e)
            raise NetworkUnavailable(f"building the network failed: {detail.strip()}") from e
        return self

    def _delay(self) -> None:
        hosts = list(self.hosts)
        netem = self._in(hosts[0], "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                         "delay", f"{self.delay_ms}ms", "limit", str(QUEUE_MAXLEN), check=False)
        if netem.returncode == 0:
            for host in hosts[1:]:
                self._in(host, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", f"{self.delay_ms}ms",
                         "limit", str(QUEUE_MAXLEN))
            self.delay = "netem"
            return
        for host in hosts:
            ready = f"/tmp/{self.ns(host)}.ready"
            self.relays.append(subprocess.Popen(
                [*self.exec_prefix(host), sys.executable, "-m", "perf.netdelay", "relay", "--delay-ms",
                 str(self.delay_ms), "--ready", ready], cwd=REPO_DIR,
                start_new_session=True))
            deadline = time.monotonic() + 10
            while not os.path.exists(ready):
                if self.relays[-1].poll() is not None or time.monotonic() > deadline:
                    raise NetworkUnavailable(f"the delay relay of {host} did not start")
                time.sleep(0.02)
            os.unlink(ready)
            self._in(host, "iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", "0",
                     "--queue-bypass")
        self.delay = "nfqueue"

    def switch_delay(self, on: bool) -> None:
        """Takes the delay off every host (`on` False) or puts it back, on a network made with
        one: the same hosts and connections with and without the delay."""
        for host in self.hosts:
            if self.delay == "netem":
                self._in(host, "tc", "qdisc", "change", "dev", "eth0", "root", "netem", "delay",
                         f"{self.delay_ms if on else 0}ms", "limit", str(QUEUE_MAXLEN))
            elif self.delay == "nfqueue":
                self._in(host, "iptables", "-A" if on else "-D", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE",
                         "--queue-num", "0", "--queue-bypass")

    def rtt_ms(self, src: str, dst: str, count: int = 50) -> float:
        """The median TCP round trip of a 1-byte message from host `src` to host `dst`
        (`count` of them, one at a time, after a first one that opens the connection)."""
        port = 7000
        server = subprocess.Popen([*self.exec_prefix(dst), sys.executable, "-m", "perf.netdelay", "echo",
                                   "--bind", f"{self.hosts[dst]}:{port}", "--count", str(count + 1)], cwd=REPO_DIR)
        try:
            out = self._in(src, sys.executable, "-m", "perf.netdelay", "probe", "--to", f"{self.hosts[dst]}:{port}",
                           "--count", str(count), cwd=REPO_DIR).stdout
        finally:
            server.wait(10)
        return float(out.split()[-1])

    def pids(self, host: str) -> list[int]:
        return namespace_pids(self.ns(host))

    def delete(self) -> None:
        """SIGKILLs every process left in the hosts (the relays too), removes the namespaces."""
        for host in self.hosts:
            kill_namespace_processes(self.ns(host))
        for p in self.relays:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for name in [*(self.ns(h) for h in self.hosts), f"{self.tag}-hub"]:
            run("ip", "netns", "del", name, check=False)

    def __enter__(self) -> "Network":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.delete()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.netdelay")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay", help="delay this namespace's nfnetlink queue 0 (run by Network)")
    r.add_argument("--delay-ms", type=float, required=True)
    r.add_argument("--queue", type=int, default=0)
    r.add_argument("--ready", default=None, help="a file made once the queue is bound")
    e = sub.add_parser("echo", help="answer `count` 1-byte messages of one connection (rtt_ms)")
    e.add_argument("--bind", required=True)
    e.add_argument("--count", type=int, required=True)
    p = sub.add_parser("probe", help="print the median round trip of `count` 1-byte messages (rtt_ms)")
    p.add_argument("--to", required=True)
    p.add_argument("--count", type=int, required=True)
    t = sub.add_parser("rtt", help="build two hosts, print their round trip, remove them")
    t.add_argument("--delay-ms", type=float, default=1.0)
    args = ap.parse_args(argv)
    if args.cmd == "relay":
        relay(args.delay_ms / 1000, args.queue, args.ready)
    elif args.cmd == "echo":
        echo(args.bind, args.count)
    elif args.cmd == "probe":
        print(f"{probe(args.to, args.count):.3f}")
    else:
        with Network({"a": f"{Network.PREFIX}.1", "b": f"{Network.PREFIX}.2"}, args.delay_ms) as net:
            print(f"delay {args.delay_ms} ms per host ({net.delay}): round trip a->b {net.rtt_ms('a', 'b'):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
