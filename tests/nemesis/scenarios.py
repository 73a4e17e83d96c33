"""The faults, injected from inside the namespace while the load runs. Each scenario returns
once its fault has ended (the process restarted or resumed, the rules removed); what follows
(healing, the read-back) is the runner's.

Durations are chosen against the test cluster's timeouts (zookeeper.session.timeout.ms=6000,
replica.lag.time.max.ms=4000): a pause or a cut outlasts the session, so leadership moves."""
from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass
from typing import Callable

from tests.nemesis import netns
from tests.nemesis.cluster import NemesisCluster

TOPIC = "nemesis"


@dataclass(frozen=True)
class Timing:
    down_s: float = 10.0      # a killed broker stays down this long
    pause_s: float = 12.0     # SIGSTOP of a leader (twice the session timeout)
    cut_s: float = 15.0       # an isolation or a cut between brokers
    zk_pause_s: float = 10.0  # SIGSTOP of ZooKeeper
    gap_s: float = 6.0        # between the faults of a mix (drawn from [gap/2, gap])
    mix_faults: int = 6


SHORT = Timing(down_s=8.0, pause_s=9.0, cut_s=10.0, zk_pause_s=8.0, gap_s=3.0, mix_faults=2)


class Nemesis:
    def __init__(self, cluster: NemesisCluster, timing: Timing, rng: random.Random, t0: float) -> None:
        self.cluster, self.timing, self.rng, self.t0 = cluster, timing, rng, t0
        self.events: list[tuple[float, str]] = []

    def note(self, what: str) -> None:
        self.events.append((round(time.monotonic() - self.t0, 1), what))

    def leader(self, partition: int = 0) -> int:
        return self.cluster.wait_for(lambda: max(self.cluster.leader(TOPIC, partition), 0), 60,
                                     f"a leader of {TOPIC}-{partition}")

    def _others(self, broker: int) -> list[str]:
        return [netns.broker_address(i) for i in self.cluster.brokers if i != broker]

    # -- the faults -------------------------------------------------------------------------
    def kill(self, broker: int) -> None:
        self.note(f"SIGKILL broker {broker}")
        self.cluster.brokers[broker].kill()
        time.sleep(self.timing.down_s)
        self.cluster.brokers[broker].start()
        self.note(f"broker {broker} restarted")

    def pause(self, broker: int) -> None:
        self.note(f"SIGSTOP broker {broker}")
        self.cluster.brokers[broker].signal(signal.SIGSTOP)
        time.sleep(self.timing.pause_s)
        self.cluster.brokers[broker].signal(signal.SIGCONT)
        self.note(f"SIGCONT broker {broker}")

    def isolate(self, broker: int) -> None:
        self.note(f"isolate broker {broker} from ZooKeeper and the brokers (clients still reach it; "
                  f"controller {self.cluster.controller()})")
        netns.cut([netns.broker_address(broker)], [netns.ZOOKEEPER_ADDRESS] + self._others(broker))
        time.sleep(self.timing.cut_s)
        netns.heal()
        self.note("healed")

    def cut_from_brokers(self, broker: int) -> None:
        self.note(f"cut broker {broker} from the other brokers (ZooKeeper and clients still reach it; "
                  f"controller {self.cluster.controller()})")
        netns.cut([netns.broker_address(broker)], self._others(broker))
        time.sleep(self.timing.cut_s)
        netns.heal()
        self.note("healed")

    def pause_zookeeper(self) -> None:
        self.note("SIGSTOP ZooKeeper")
        self.cluster.zookeeper.signal(signal.SIGSTOP)
        time.sleep(self.timing.zk_pause_s)
        self.cluster.zookeeper.signal(signal.SIGCONT)
        self.note("SIGCONT ZooKeeper")

    # -- the scenarios ----------------------------------------------------------------------
    def leader_kill(self) -> None:
        self.kill(self.leader())

    def leader_pause(self) -> None:
        self.pause(self.leader())

    def leader_isolate(self) -> None:
        self.isolate(self.leader())

    def broker_cut(self) -> None:
        self.cut_from_brokers(self.leader())

    def zookeeper_pause(self) -> None:
        self.pause_zookeeper()

    def controller_kill(self) -> None:
        controller = self.cluster.wait_for(lambda: max(self.cluster.controller(), 0), 60, "a controller")
        self.kill(controller)

    def followers_then_leader_kill(self) -> None:
        """Kafka's documented unclean-election sequence: both followers of partition 0 die
        (its ISR shrinks to the leader, which goes on taking acks=1 writes; acks=all ones are
        refused under min.insync.replicas=2), then the leader dies, then the followers come
        back before it. Without unclean election the partition waits for its last leader and
        nothing is lost; with it (`unclean-election`) a follower leads and what only the
        last leader had is gone."""
        leader = self.leader()
        followers = [i for i in self.cluster.brokers if i != leader]
        for f in followers:
            self.note(f"SIGKILL broker {f} (follower)")
            self.cluster.brokers[f].kill()
        time.sleep(self.timing.down_s)
        self.note(f"SIGKILL broker {leader} (leader, ISR {self.cluster.isr(TOPIC, 0)})")
        self.cluster.brokers[leader].kill()
        for f in followers:
            self.cluster.brokers[f].start()
            self.note(f"broker {f} restarted")
        time.sleep(self.timing.down_s)
        self.cluster.brokers[leader].start()
        self.note(f"broker {leader} restarted")

    def mix(self) -> None:
        """`mix_faults` faults drawn from the others, each on the leader of a random partition
        or a random broker, with a random gap between them (the seed decides everything)."""
        single: list[Callable[[int], None]] = [self.kill, self.pause, self.isolate, self.cut_from_brokers]
        for i in range(self.timing.mix_faults):
            if i:
                time.sleep(self.rng.uniform(self.timing.gap_s / 2, self.timing.gap_s))
            choice = self.rng.randrange(len(single) + 2)
            if choice == len(single):
                self.pause_zookeeper()
                continue
            if choice == len(single) + 1:
                self.controller_kill()
                continue
            target = (self.leader(self.rng.randrange(6)) if self.rng.random() < 0.7
                      else self.rng.choice(sorted(self.cluster.brokers)))
            single[choice](target)


SCENARIOS = {
    "leader-kill": Nemesis.leader_kill,
    "leader-pause": Nemesis.leader_pause,
    "leader-isolate": Nemesis.leader_isolate,
    "broker-cut": Nemesis.broker_cut,
    "zookeeper-pause": Nemesis.zookeeper_pause,
    "controller-kill": Nemesis.controller_kill,
    "mix": Nemesis.mix,
    "followers-then-leader-kill": Nemesis.followers_then_leader_kill,
    "unclean-election": Nemesis.followers_then_leader_kill,
}
# topic configs a scenario runs with (besides min.insync.replicas=2)
TOPIC_CONFIGS = {"unclean-election": {"unclean.leader.election.enable": "true"}}
