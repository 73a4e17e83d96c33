"""A network namespace of our own for the nemesis suite: its loopback, one source address
per broker, and iptables rules that exist only inside it.

Addresses: ZooKeeper listens on 127.0.0.10, broker i on 127.0.0.1<i> (i = 1..3); the test's
own clients (producers, consumers, the ZooKeeper view) run as root and connect from
127.0.0.1. A fault is a set of DROP rules between addresses, so for iptables to tell the
brokers apart, every connection a broker *opens* (to ZooKeeper, to the controller, to the
leader it fetches from) must leave from the broker's own address as well.

kafkafast has no setting for the source address of its outgoing connections (kazoo's
ZooKeeper session, `cluster/channel.py`'s sockets and the replica fetchers all connect with
the kernel's choice), so the namespace chooses it: broker i runs under its own uid
(`BROKER_UID_BASE + i`) and a policy-routing rule sends that uid's traffic through a table
whose only route is `local 127.0.0.0/8 dev lo src 127.0.0.1<i>`. The kernel then picks the
broker's address for every socket the broker's processes open, whatever library opens it,
including the worker processes `--workers N` forks (they inherit the uid). The main table
`local` is moved after the per-uid rules (rule 0 cannot take precedence otherwise). This
needs no change to the broker and cannot miss a code path, which binding each client
socket would.

Everything lives and dies with the namespace: `delete()` SIGKILLs every process still in
it (`ip netns pids`), and removing the namespace removes its routes and rules.
"""
from __future__ import annotations

import os
import subprocess

from perf.netdelay import kill_namespace_processes, namespace_pids

ZOOKEEPER_ADDRESS = "127.0.0.10"
CLIENT_ADDRESS = "127.0.0.1"
BROKER_UID_BASE = 20000  # broker i runs as uid 20000 + i (no such user needs to exist)
CHAIN = "KF-NEMESIS"


def broker_address(broker_id: int) -> str:
    return f"127.0.0.1{broker_id}"


def broker_uid(broker_id: int) -> int:
    return BROKER_UID_BASE + broker_id


class NamespaceUnavailable(RuntimeError):
    """The namespace cannot be created here (not root, no `ip`, no iptables)."""


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=30)


class Namespace:
    """`kf-nemesis-<pid>`: created by `create()`, removed (with every process in it) by
    `delete()`. `exec_prefix` runs a command inside it."""

    def __init__(self, name: str | None = None, brokers: int = 3) -> None:
        self.name = name or f"kf-nemesis-{os.getpid()}"
        self.brokers = brokers

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def ip(self, *args: str) -> None:
        run(*self.exec_prefix, "ip", *args)

    def create(self) -> "Namespace":
        try:
            run("ip", "netns", "add", self.name)
        except (OSError, subprocess.CalledProcessError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            raise NamespaceUnavailable(f"`ip netns add {self.name}` failed: {detail.strip()}") from e
        try:
            self.ip("link", "set", "lo", "up")
            for i in range(1, self.brokers + 1):
                table = str(100 + i)
                self.ip("route", "add", "local", "127.0.0.0/8", "dev", "lo", "src", broker_address(i),
                        "table", table)
                self.ip("rule", "add", "pref", str(100 + i), "uidrange", f"{broker_uid(i)}-{broker_uid(i)}",
                        "lookup", table)
            self.ip("rule", "add", "pref", "32000", "lookup", "local")
            self.ip("rule", "del", "pref", "0")
            run(*self.exec_prefix, "iptables", "-N", CHAIN)
            run(*self.exec_prefix, "iptables", "-I", "INPUT", "-j", CHAIN)
        except (OSError, subprocess.CalledProcessError) as e:
            self.delete()
            detail = getattr(e, "stderr", "") or str(e)
            raise NamespaceUnavailable(f"setting up namespace {self.name} failed: {detail.strip()}") from e
        return self

    def pids(self) -> list[int]:
        return namespace_pids(self.name)

    def delete(self) -> None:
        """SIGKILL every process in the namespace (what we started there), then remove it."""
        self.kill_all()
        run("ip", "netns", "del", self.name, check=False)

    def heal(self) -> None:
        """Removes every fault rule (from outside the namespace)."""
        run(*self.exec_prefix, "iptables", "-F", CHAIN, check=False)

    def kill_all(self) -> None:
        kill_namespace_processes(self.name, 0.1)

    def __enter__(self) -> "Namespace":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.delete()


# -- fault rules, for a process running inside the namespace ------------------------------------

def cut(side_a: list[str], side_b: list[str]) -> None:
    """Drops every packet between an address of `side_a` and one of `side_b`, both ways (the
    rules live in the namespace's own KF-NEMESIS chain, hooked into INPUT: on loopback every
    packet passes INPUT once)."""
    for a in side_a:
        for b in side_b:
            run("iptables", "-A", CHAIN, "-s", a, "-d", b, "-j", "DROP")
            run("iptables", "-A", CHAIN, "-s", b, "-d", a, "-j", "DROP")


def heal() -> None:
    """Removes every fault rule."""
    run("iptables", "-F", CHAIN)


def rules() -> str:
    return run("iptables", "-S", CHAIN).stdout
