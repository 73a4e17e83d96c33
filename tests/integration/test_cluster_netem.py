"""The network of perf/netdelay.py and the benchmark perf/cluster_netem.py (issue 25's netem
benchmark): hosts in network namespaces joined by veth pairs, every packet a host sends
delayed, all of it removed afterwards; and over that network an acks=all produce costs one
round trip between the leader and a follower more than an acks=1 produce, not two.

Needs root (`ip netns add`, iptables); skipped without it, except on CI (`CI=true`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perf.cluster_netem import replication_round_trips
from perf.netdelay import Network, NetworkUnavailable, run
from tests.support.broker_process import REPO


def network(hosts: dict[str, str], delay_ms: float) -> Network:
    try:
        return Network(hosts, delay_ms).create()
    except NetworkUnavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the network must be made on CI: {e}")
        pytest.skip(f"no network namespaces here ({e}); run as root")


def namespaces() -> list[str]:
    return run("ip", "netns", "list").stdout.split()


def test_every_packet_a_host_sends_waits_the_delay_and_nothing_is_left_after():
    before = set(namespaces())
    quick = network({"a": "10.199.0.1", "b": "10.199.0.2"}, 0)
    try:
        undelayed = quick.rtt_ms("a", "b", count=20)
    finally:
        quick.delete()
    net = network({"a": "10.199.0.1", "b": "10.199.0.2"}, 5)
    try:
        assert {net.ns("a"), net.ns("b"), f"{net.tag}-hub"} <= set(namespaces())
        delayed = net.rtt_ms("a", "b", count=20)
        relays = [p.pid for p in net.relays]
    finally:
        net.delete()
    assert undelayed < 3, undelayed
    assert 10 <= delayed < 25, delayed  # a round trip: one delay each way
    assert set(namespaces()) == before  # the namespaces and everything in them are gone
    for pid in relays:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_an_acks_all_produce_costs_one_broker_round_trip_over_the_network(tmp_path):
    """5 ms per packet: a broker round trip is 10 ms, so one round trip of replication adds
    about 10 ms to a produce and two would add 20 ms; the medians of 40 produces, with and
    without the delay (the processing on the path cancels out), decide."""
    try:
        Network({"x": "10.199.0.1"}, 0, tag=f"kfprobe{os.getpid()}").create().delete()
    except NetworkUnavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the network must be made on CI: {e}")
        pytest.skip(f"no network namespaces here ({e}); run as root")
    before = set(namespaces())
    out = tmp_path / "netem.json"
    proc = subprocess.run([sys.executable, "-m", "perf.cluster_netem", "--delay-ms", "5", "--rounds", "1",
                           "--produces", "40", "--rate", "0", "--out", str(out)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    rtt = res["rtt_ms"]["b1-b2"]
    assert 10 <= rtt < 25 and 10 <= res["rtt_ms"]["client-b1"] < 25, res["rtt_ms"]
    seq = res["sequential"]
    assert seq["1"]["p50_ms"] >= rtt * 0.9  # acks=1: the client's round trip
    assert res["rtt_ms"]["b1-b2 undelayed"] < 3  # the delay can be taken off and put back
    rounds = replication_round_trips(res)  # what the delay added to acks=all - acks=1, in round trips
    assert 0.7 <= rounds < 1.5, (rounds, res["rtt_ms"], seq)  # one broker round trip, not two
    assert "replication of a produce costs 1 round trip" in (tmp_path / "cluster.md").read_text()
    assert set(namespaces()) == before
