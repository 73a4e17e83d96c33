"""The controller (Kafka's `KafkaController` in ZooKeeper mode), one per cluster.

Every broker runs a `Controller`; the one that creates the ephemeral `/controller` znode
is active. Everything it does happens on one event thread, in order (Kafka's
`ControllerEventManager`): ZooKeeper watches, AlterPartition requests from leaders and
its own election only enqueue events, so its state needs no locks.

State machine of a partition (kept in `/brokers/topics/<t>/partitions/<p>/state`):

    NonExistent --topic created--> New --first live replica leads, ISR = live replicas--> Online
    Online --leader's broker dies--> elect from the live ISR (assignment order) --> Online
                                  \-> none live: leader -1, ISR = [its last member] --> Offline
    Offline --that last ISR member returns (or any live replica, with unclean election)--> Online
    Online --a follower's broker dies--> ISR minus that broker --> Online
    Online --AlterPartition from the leader (ISR shrink/expand, same leader epoch)--> Online

Each leader change or controller-made ISR change bumps the leader epoch; every write is a
ZooKeeper multi-op that first checks `/controller_epoch`'s version (a deposed controller's
writes fail) and then sets the state znode at its expected version. After a change the
controller sends LeaderAndIsr to the partition's live replicas and UpdateMetadata to every
live broker.

When this broker's ZooKeeper session expires, the queued events are dropped (requests among
them answered NOT_CONTROLLER at once) and the controller resigns; an event cut short by the
expiry is logged as INFO, not as an error. The new session runs for controller again.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

from kazoo.exceptions import (BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, RolledBackError,
                              SessionExpiredError)

from kafkafast.cluster import zk_data as Z
from kafkafast.cluster.channel import ControllerChannel
from kafkafast.metrics import recorder
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_partition import AlterPartitionResponse
from kafkafast.protocol._generated.alter_partition_reassignments import AlterPartitionReassignmentsResponse
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownResponse
from kafkafast.protocol._generated.elect_leaders import ElectLeadersResponse
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequest
from kafkafast.protocol._generated.stop_replica import StopReplicaRequest
from kafkafast.protocol._generated.update_metadata import UpdateMetadataRequest

log = logging.getLogger("kafkafast.controller")

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
NO_LEADER = -1
LEADER_DURING_DELETE = -2

TP = tuple[str, int]

# Requests from brokers and clients, by event kind: the answer made of an error code (the
# reply callback is the event's last element). Any other event is the controller's own.
REQUEST_ERRORS: dict[str, Callable[[int], Any]] = {
    "alter_partition": lambda code: AlterPartitionResponse(error_code=code, topics=[]),
    "controlled_shutdown": lambda code: ControlledShutdownResponse(error_code=code),
    "list_reassignments": lambda code: (code, {}),
    "alter_reassignments": lambda code: AlterPartitionReassignmentsResponse(error_code=code),
    "elect_leaders": lambda code: ElectLeadersResponse(error_code=code),
}


class ControllerMoved(Exception):
    """A fenced write: another controller was elected."""


class Controller:
    def __init__(self, node: Any) -> None:
        self.node = node  # kafkafast.cluster.node.ClusterNode: zk, broker_id, config
        self.zk = node.zk
        self.broker_id: int = node.broker_id
        self.events: "queue.Queue[tuple]" = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="controller-event-thread", daemon=True)
        self.active = False
        self.epoch = 0
        self.epoch_zk_version = -1
        self.brokers: dict[int, Z.BrokerInfo] = {}
        self.topics: dict[str, tuple[bytes, dict[int, list[int]]]] = {}
        self.states: dict[TP, Z.LeaderIsr] = {}
        self.deleting: set[str] = set()
        self.unclean_elections = 0  # metric: UncleanLeaderElectionsPerSec's count
        self.shutting_down: set[int] = set()  # brokers in controlled shutdown (Kafka's shuttingDownBrokerIds)
        self.preferred_elections = 0
        # partition -> (target replicas, adding, removing): reassignments in progress
        self.reassignments: dict[TP, tuple[list[int], list[int], list[int]]] = {}
        self.channel = ControllerChannel(f"controller-{self.broker_id}",
                                         node.config.get_int("controller.socket.timeout.ms"), node.inter_broker)
        self._stopped = False

    # -- event queue ---------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()
        self.put("elect")
        if self.node.config.get_bool("auto.leader.rebalance.enable"):
            interval = max(self.node.config.get_int("leader.imbalance.check.interval.seconds"), 1)
            threading.Thread(target=self._rebalance_timer, args=(interval,), name="controller-rebalance-timer",
                             daemon=True).start()

    def _rebalance_timer(self, interval: float) -> None:
        """Enqueues an auto-rebalance check every leader.imbalance.check.interval.seconds."""
        wake = threading.Event()
        while not wake.wait(interval) and not self._stopped:
            if self.active:
                self.put("auto_rebalance")

    def stop(self) -> None:
        self._stopped = True
        self.events.put(("shutdown",))
        self.thread.join(5)
        self.channel.close()

    def put(self, *event: Any) -> None:
        self.events.put(event)

    def _watch(self, *event: Any) -> Callable[[Any], None]:
        return lambda _ev: self.put(*event)

    def _run(self) -> None:
        EC = E.ErrorCode
        while True:
            event = self.events.get()
            kind = event[0]
            if kind == "shutdown":
                self._resign()
                return
            if self._stopped:
                self._answer(event, EC.NOT_CONTROLLER)
                continue
            try:
                getattr(self, "_on_" + kind)(*event[1:])
            except ControllerMoved:
                log.warning("controller %d: another controller was elected; resigning", self.broker_id)
                self._resign()
                self._answer(event, EC.NOT_CONTROLLER)
                self.put("elect")
            except (SessionExpiredError, ConnectionLoss) as exc:
                self._interrupted(event, exc)
            except Exception:
                log.exception("controller event %s failed", kind)
                self._answer(event, EC.UNKNOWN_SERVER_ERROR)

    @staticmethod
    def _answer(event: tuple, code: int) -> None:
        """Answers a request event with an error (a no-op for the controller's own events;
        a second answer to a request already answered is ignored by its caller)."""
        make = REQUEST_ERRORS.get(event[0])
        if make is not None:
            event[-1](make(code))

    def _interrupted(self, event: tuple, exc: Exception) -> None:
        """An event cut short by ZooKeeper: expected when a session ends, so logged as INFO.
        A request is answered NOT_CONTROLLER at once (the broker asks again, of whichever
        controller there is then). After an expired session the new one starts over
        (`session_reset` reads everything again), so the event is dropped; after a lost
        connection in the same session it runs again (kazoo holds its requests until the
        connection is back), so the watch it was setting is not lost."""
        kind = event[0]
        if isinstance(exc, ConnectionLoss) and kind not in REQUEST_ERRORS:
            log.info("controller event %s interrupted by a lost ZooKeeper connection; queued again", kind)
            self.put(*event)
            return
        log.info("controller event %s interrupted: ZooKeeper %s%s", kind,
                 "connection lost" if isinstance(exc, ConnectionLoss) else "session expired",
                 "; answered NOT_CONTROLLER" if kind in REQUEST_ERRORS else "")
        self._answer(event, E.ErrorCode.NOT_CONTROLLER)

    def session_expired(self) -> None:
        """Kazoo's thread, the session is gone (Kafka's `Expire` event, which clears the
        queue): queued events are dropped, requests among them answered NOT_CONTROLLER at
        once, and the controller resigns; the broker's new session runs for controller again."""
        if self._stopped:
            return
        dropped = []
        while True:
            try:
                dropped.append(self.events.get_nowait())
            except queue.Empty:
                break
        for event in dropped:
            if event[0] == "shutdown":
                self.events.put(event)
            else:
                self._answer(event, E.ErrorCode.NOT_CONTROLLER)
        answered = sum(e[0] in REQUEST_ERRORS for e in dropped)
        log.info("controller %d: ZooKeeper session expired; %d queued events dropped (%d requests answered "
                 "NOT_CONTROLLER)", self.broker_id, len(dropped), answered)
        self.put("session_expired")

    def _on_session_expired(self) -> None:
        self._resign()

    # -- election ------------------------------------------------------------------------------
    def _on_elect(self) -> None:
        if self.active and self._still_controller():
            return
        try:
            data, _ = self.zk.get(Z.CONTROLLER, watch=self._watch("elect"))
            current = Z.loads(data).get("brokerid", -1)
            if current != self.broker_id:
                self._resign()
                return
        except NoNodeError:
            pass
        try:
            data, stat = self.zk.get(Z.CONTROLLER_EPOCH)
        except NoNodeError:
            try:
                self.zk.create(Z.CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
            data, stat = self.zk.get(Z.CONTROLLER_EPOCH)
        epoch = int(data.decode() or 0) + 1
        t = self.zk.transaction()
        t.create(Z.CONTROLLER, Z.controller_json(self.broker_id), ephemeral=True)
        t.set_data(Z.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
        results = t.commit()
        if any(isinstance(r, Exception) for r in results):
            self.zk.exists(Z.CONTROLLER, watch=self._watch("elect"))
            return
        self.epoch, self.epoch_zk_version = epoch, stat.version + 1
        self.zk.exists(Z.CONTROLLER, watch=self._watch("elect"))
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self.active = True
        self._failover()

    def _still_controller(self) -> bool:
        try:
            data, _ = self.zk.get(Z.CONTROLLER)
            return Z.loads(data).get("brokerid") == self.broker_id
        except NoNodeError:
            return False

    def _resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        self.brokers, self.topics, self.states = {}, {}, {}
        self.shutting_down = set()
        self.reassignments = {}
        self.channel.close()

    def _on_session_reset(self) -> None:
        """The ZooKeeper session was lost and a new one made: start over."""
        self._resign()
        self._on_elect()

    def _failover(self) -> None:
        self.brokers = self._read_brokers()
        for b in self.brokers.values():
            self.channel.add(b.broker_id, *b.endpoint(self.node.inter_broker_listener))
        self.topics = {}
        for t in self.zk.get_children(Z.TOPICS, watch=self._watch("topic_change")):
            self._load_topic(t)
        self._on_delete_topics()
        changed = self._initialize_new(list(self.states_missing()))
        changed |= self._elect_offline(set())
        # a broker that died while there was no controller is still in some ISRs
        dead_in_isr = {tp for tp, s in self.states.items() if any(r not in self.brokers for r in s.isr)
                       and s.leader in self.brokers}
        changed |= self._shrink_isr(dead_in_isr, set(self.brokers))
        self._send_leader_and_isr(set(self.states), set(self.brokers))
        self._send_update_metadata(set(self.brokers), set(self.states))
        self._on_reassign_znode()
        for tp in sorted(self.reassignments):
            self._maybe_complete_reassignment(tp)

    # -- reading ZooKeeper ---------------------------------------------------------------------
    def _read_brokers(self) -> dict[int, Z.BrokerInfo]:
        out = {}
        for child in self.zk.get_children(Z.BROKER_IDS, watch=self._watch("broker_change")):
            try:
                data, stat = self.zk.get(Z.broker_path(int(child)))
            except (NoNodeError, ValueError):
                continue
            out[int(child)] = Z.BrokerInfo.from_json(int(child), data, stat.czxid)
        return out

    def _load_topic(self, topic: str) -> None:
        try:
            data, _ = self.zk.get(Z.topic_path(topic), watch=self._watch("partition_change", topic))
        except NoNodeError:
            return
        tid, assignment = Z.parse_topic_assignment(data)
        self.topics[topic] = (tid or bytes(16), assignment)
        adding, removing = Z.parse_reassigning(data)
        for p in set(adding) | set(removing):  # in progress when the previous controller stopped
            if p in assignment and (topic, p) not in self.reassignments:
                gone = set(removing.get(p, []))
                self.reassignments[(topic, p)] = ([r for r in assignment[p] if r not in gone],
                                                  adding.get(p, []), removing.get(p, []))
        for p in assignment:
            try:
                sdata, stat = self.zk.get(Z.state_path(topic, p))
                self.states[(topic, p)] = Z.LeaderIsr.from_json(sdata, stat.version)
            except NoNodeError:
                pass

    def states_missing(self) -> list[TP]:
        return [(t, p) for t, (_, a) in self.topics.items() for p in a
                if (t, p) not in self.states and t not in self.deleting]

    def _replicas(self, tp: TP) -> list[int]:
        topic = self.topics.get(tp[0])
        return list(topic[1].get(tp[1], [])) if topic else []

    def _unclean_enabled(self, topic: str) -> bool:
        try:
            data, _ = self.zk.get(Z.topic_config_path(topic))
            v = Z.parse_entity_config(data).get("unclean.leader.election.enable")
        except NoNodeError:
            v = None
        if v is None:
            return self.node.config.get_bool("unclean.leader.election.enable")
        return v.strip().lower() == "true"

    # -- writing ZooKeeper (fenced) ------------------------------------------------------------
    def _write_state(self, tp: TP, new: Z.LeaderIsr, *, create: bool = False) -> Z.LeaderIsr | None:
        """Writes the state znode, fenced by the controller epoch; None when its version moved."""
        path = Z.state_path(*tp)
        if create:
            self.zk.ensure_path(path.rsplit("/", 1)[0])
        t = self.zk.transaction()
        t.check(Z.CONTROLLER_EPOCH, self.epoch_zk_version)
        if create:
            t.create(path, new.to_json())
        else:
            t.set_data(path, new.to_json(), version=new.zk_version)
        results = t.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMoved()
        if isinstance(results[0], BadVersionError):
            raise ControllerMoved()
        if isinstance(results[1], Exception):
            log.info("state of %s-%d changed under the controller (%r); re-reading", tp[0], tp[1], results[1])
            try:
                data, stat = self.zk.get(path)
                self.states[tp] = Z.LeaderIsr.from_json(data, stat.version)
            except NoNodeError:
                pass
            return None
        stored = Z.LeaderIsr(new.leader, new.leader_epoch, new.isr, self.epoch, 0 if create else new.zk_version + 1)
        self.states[tp] = stored
        return stored

    # -- partition state machine ---------------------------------------------------------------
    def _initialize_new(self, tps: list[TP]) -> set[TP]:
        done = set()
        for tp in tps:
            replicas = self._replicas(tp)
            live = [r for r in replicas if r in self.brokers]
            if not live:
                log.warning("new partition %s-%d has no live replica", *tp)
                continue
            try:
                if self._write_state(tp, Z.LeaderIsr(live[0], 0, tuple(live), self.epoch), create=True):
                    done.add(tp)
            except NodeExistsError:
                pass
        return done

    def _elect(self, tp: TP, state: Z.LeaderIsr, dead: set[int]) -> Z.LeaderIsr | None:
        """The new state after the leader's loss (None: no change needed)."""
        replicas = self._replicas(tp)
        live_isr = [r for r in replicas if r in state.isr and r in self.brokers and r not in dead]
        live_isr.sort(key=lambda r: r in self.shutting_down)  # a broker on its way out leads last
        if live_isr:
            leader = live_isr[0]
            isr = tuple(r for r in state.isr if r in self.brokers and r not in dead)
        elif self._unclean_enabled(tp[0]) and any(r in self.brokers and r not in dead for r in replicas):
            leader = next(r for r in replicas if r in self.brokers and r not in dead)
            isr = (leader,)
            self.unclean_elections += 1
            recorder.unclean_election()
            log.warning("unclean leader election for %s-%d: %d leads without being in ISR %s",
                        tp[0], tp[1], leader, list(state.isr))
        else:
            leader = NO_LEADER
            isr = self._last_isr_member(state, dead)
            if state.leader == NO_LEADER and isr == state.isr:
                return None
        return Z.LeaderIsr(leader, state.leader_epoch + 1, isr, self.epoch, state.zk_version)

    def _last_isr_member(self, state: Z.LeaderIsr, dead: set[int]) -> tuple[int, ...]:
        """The ISR of a partition going offline (no live ISR member): its gone members leave it
        one by one and the last one stays (Kafka's rule), so that only that replica, which
        surely has every committed record, may lead it again without an unclean election.
        Members that died together (or while there was no controller) leave in id order, the
        leader last: it holds everything the ISR acknowledged, and what it took at acks=1."""
        isr = tuple(state.isr)
        gone = sorted((r for r in isr if r in dead or r not in self.brokers), key=lambda r: (r == state.leader, r))
        for r in gone:
            if len(isr) > 1:
                isr = tuple(i for i in isr if i != r)
        return isr

    def _elect_offline(self, dead: set[int]) -> set[TP]:
        changed = set()
        for tp, state in list(self.states.items()):
            if tp[0] in self.deleting:
                continue
            if state.leader in dead or state.leader not in self.brokers:
                new = self._elect(tp, state, dead)
                if new is not None and self._write_state(tp, new):
                    changed.add(tp)
        return changed

    def _shrink_isr(self, tps: set[TP], live: set[int]) -> set[TP]:
        changed = set()
        for tp in tps:
            state = self.states[tp]
            isr = tuple(r for r in state.isr if r in live)
            if isr == state.isr or not isr:
                continue
            if self._write_state(tp, Z.LeaderIsr(state.leader, state.leader_epoch + 1, isr, self.epoch,
                                                 state.zk_version)):
                changed.add(tp)
        return changed

    # -- events --------------------------------------------------------------------------------
    def _on_broker_change(self) -> None:
        if not self.active:
            return
        current = self._read_brokers()
        dead = {b for b, info in self.brokers.items() if b not in current or current[b].epoch != info.epoch}
        new = {b for b, info in current.items() if b not in self.brokers or self.brokers[b].epoch != info.epoch}
        if not dead and not new:
            return
        log.info("controller: brokers %s registered, %s gone", sorted(new), sorted(dead))
        for b in dead:
            self.channel.remove(b)
        self.shutting_down -= dead | new
        self.brokers = current
        for b in new:
            self.channel.add(b, *current[b].endpoint(self.node.inter_broker_listener))
        changed = self._elect_offline(dead)
        followers_dead = {tp for tp, s in self.states.items() if s.leader in self.brokers and s.leader not in dead
                          and any(r in dead or r not in self.brokers for r in s.isr)}
        changed |= self._shrink_isr(followers_dead, set(self.brokers) - dead)
        if new:  # a returning broker: offline partitions it can lead, and all of its replicas
            changed |= self._elect_offline(set())
            hosted = {tp for tp in self.states if any(r in new for r in self._replicas(tp))}
            self._send_update_metadata(new, set(self.states))
            self._send_leader_and_isr(hosted, new)
        self._send_leader_and_isr(changed, set(self.brokers))
        self._send_update_metadata(set(self.brokers), changed)

    def _on_topic_change(self) -> None:
        if not self.active:
            return
        children = set(self.zk.get_children(Z.TOPICS, watch=self._watch("topic_change")))
        for gone in set(self.topics) - children:
            self.topics.pop(gone, None)
            for tp in [tp for tp in self.states if tp[0] == gone]:
                del self.states[tp]
        new_topics = children - set(self.topics)
        for t in new_topics:
            self._load_topic(t)
        self._on_new_partitions({tp for tp in self.states_missing() if tp[0] in new_topics})

    def _on_partition_change(self, topic: str) -> None:
        if not self.active or topic not in self.topics:
            return
        self._load_topic(topic)
        self._on_new_partitions(set(self.states_missing()))

    def _on_new_partitions(self, tps: set[TP]) -> None:
        changed = self._initialize_new(sorted(tps))
        if changed:
            self._send_leader_and_isr(changed, set(self.brokers), is_new=True)
            self._send_update_metadata(set(self.brokers), changed)

    def _on_delete_topics(self) -> None:
        if not self.active:
            return
        try:
            names = self.zk.get_children(Z.DELETE_TOPICS, watch=self._watch("delete_topics"))
        except NoNodeError:
            return
        for topic in names:
            if topic not in self.topics:
                self.zk.delete(f"{Z.DELETE_TOPICS}/{topic}")
                continue
            self.deleting.add(topic)
            tps = {tp for tp in self.states if tp[0] == topic} | {(topic, p) for p in self.topics[topic][1]}
            for tp in tps:
                s = self.states.get(tp)
                self.states[tp] = Z.LeaderIsr(LEADER_DURING_DELETE, (s.leader_epoch if s else 0) + 1,
                                              s.isr if s else (), self.epoch, s.zk_version if s else 0)
            self._send_update_metadata(set(self.brokers), tps)
            for b in self.brokers:
                parts = sorted(p for (t, p) in tps if b in self._replicas((t, p)))
                if parts:
                    req = StopReplicaRequest(
                        controller_id=self.broker_id, controller_epoch=self.epoch,
                        broker_epoch=self.brokers[b].epoch, topic_states=[StopReplicaRequest.StopReplicaTopicState(
                            topic_name=topic, partition_states=[StopReplicaRequest.StopReplicaPartitionState(
                                partition_index=p, leader_epoch=LEADER_DURING_DELETE, delete_partition=True)
                                for p in parts])])
                    self.channel.send(b, req, STOP_REPLICA_VERSION)
            for tp in tps:
                self.states.pop(tp, None)
                self.reassignments.pop(tp, None)
            self.topics.pop(topic, None)
            self.zk.delete(Z.topic_path(topic), recursive=True)
            try:
                self.zk.delete(Z.topic_config_path(topic))
            except NoNodeError:
                pass
            self.zk.delete(f"{Z.DELETE_TOPICS}/{topic}")
            self.deleting.discard(topic)
            log.info("controller: topic %s deleted", topic)

    def _on_alter_partition(self, request: Any, reply: Callable[[Any], None]) -> None:
        """An ISR change from a partition's leader (AlterPartition v1, by topic name)."""
        if not self.active:
            reply(AlterPartitionResponse(error_code=E.ErrorCode.NOT_CONTROLLER, topics=[]))
            return
        broker = self.brokers.get(request.broker_id)
        if broker is None or (request.broker_epoch >= 0 and request.broker_epoch != broker.epoch):
            reply(AlterPartitionResponse(error_code=E.ErrorCode.STALE_BROKER_EPOCH, topics=[]))
            return
        Part = AlterPartitionResponse.PartitionData
        topics, changed = [], set()
        for t in request.topics:
            out = AlterPartitionResponse.TopicData(topic_name=t.topic_name, topic_id=t.topic_id, partitions=[])
            topics.append(out)
            for p in t.partitions:
                tp = (t.topic_name, p.partition_index)
                state = self.states.get(tp)
                err = 0
                new_isr = tuple(p.new_isr)
                if state is None:
                    err = E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif state.leader != request.broker_id:
                    err = E.ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif p.leader_epoch < state.leader_epoch:
                    err = E.ErrorCode.FENCED_LEADER_EPOCH
                elif p.partition_epoch != state.zk_version:
                    err = E.ErrorCode.INVALID_UPDATE_VERSION
                elif (request.broker_id not in new_isr
                      or any(r not in self._replicas(tp) or r not in self.brokers for r in new_isr)
                      or any(r in self.shutting_down and r not in state.isr for r in new_isr)):
                    err = E.ErrorCode.INELIGIBLE_REPLICA
                if not err:
                    stored = self._write_state(tp, Z.LeaderIsr(state.leader, state.leader_epoch, new_isr, self.epoch,
                                                               state.zk_version))
                    if stored is None:
                        err = E.ErrorCode.INVALID_UPDATE_VERSION
                    else:
                        state = stored
                        changed.add(tp)
                if err:
                    out.partitions.append(Part(partition_index=p.partition_index, error_code=err, leader_id=-1,
                                               leader_epoch=-1, isr=[], partition_epoch=-1))
                else:
                    out.partitions.append(Part(partition_index=p.partition_index, error_code=0, leader_id=state.leader,
                                               leader_epoch=state.leader_epoch, isr=list(state.isr),
                                               partition_epoch=state.zk_version))
        reply(AlterPartitionResponse(throttle_time_ms=0, error_code=0, topics=topics))
        if changed:
            self._send_update_metadata(set(self.brokers), changed)
        for tp in sorted(changed & set(self.reassignments)):
            self._maybe_complete_reassignment(tp)

    # -- controlled shutdown (ControlledShutdown v3) -------------------------------------------
    def _on_controlled_shutdown(self, broker_id: int, broker_epoch: int, reply: Callable[[Any], None]) -> None:
        """A broker about to stop asks for its leaderships to move (Kafka's
        `doControlledShutdown`): each partition it leads with more than one replica gets the first
        live ISR member not shutting down as leader (ISR without the brokers shutting down); it
        leaves the ISR of the partitions it follows. The answer lists the partitions it still
        leads (no other ISR member): the broker retries until none remain or its retries run out."""
        EC = E.ErrorCode
        if not self.active:
            reply(ControlledShutdownResponse(error_code=EC.NOT_CONTROLLER))
            return
        info = self.brokers.get(broker_id)
        if info is None:
            reply(ControlledShutdownResponse(error_code=EC.BROKER_NOT_AVAILABLE))
            return
        if broker_epoch >= 0 and broker_epoch != info.epoch:
            reply(ControlledShutdownResponse(error_code=EC.STALE_BROKER_EPOCH))
            return
        self.shutting_down.add(broker_id)
        log.info("controller: controlled shutdown of broker %d (shutting down: %s)", broker_id,
                 sorted(self.shutting_down))
        changed: set[TP] = set()
        for tp, state in sorted(self.states.items()):
            replicas = self._replicas(tp)
            if tp[0] in self.deleting or broker_id not in replicas or len(replicas) < 2:
                continue
            if state.leader == broker_id:
                candidates = [r for r in replicas if r in state.isr and r in self.brokers
                              and r not in self.shutting_down]
                if not candidates:
                    continue
                isr = tuple(r for r in state.isr if r not in self.shutting_down)
                new = Z.LeaderIsr(candidates[0], state.leader_epoch + 1, isr, self.epoch, state.zk_version)
            elif broker_id in state.isr and state.leader in self.brokers and len(state.isr) > 1:
                new = Z.LeaderIsr(state.leader, state.leader_epoch + 1,
                                  tuple(r for r in state.isr if r != broker_id), self.epoch, state.zk_version)
            else:
                continue
            if self._write_state(tp, new):
                changed.add(tp)
        self._send_leader_and_isr(changed, set(self.brokers))
        self._send_update_metadata(set(self.brokers), changed)
        R = ControlledShutdownResponse.RemainingPartition
        remaining = [R(topic_name=t, partition_index=p) for (t, p), s in sorted(self.states.items())
                     if s.leader == broker_id and len(self._replicas((t, p))) > 1]
        reply(ControlledShutdownResponse(error_code=0, remaining_partitions=remaining))

    # -- leader elections (ElectLeaders v0-v2, auto rebalance) ---------------------------------
    def _preferred_leader(self, tp: TP, state: Z.LeaderIsr) -> tuple[int, Z.LeaderIsr | None]:
        """(error code, new state): the first assigned replica leads if it is live and in sync."""
        EC = E.ErrorCode
        replicas = self._replicas(tp)
        preferred = replicas[0] if replicas else NO_LEADER
        if state.leader == preferred:
            return EC.ELECTION_NOT_NEEDED, None
        if preferred not in self.brokers or preferred not in state.isr or preferred in self.shutting_down:
            return EC.PREFERRED_LEADER_NOT_AVAILABLE, None
        return 0, Z.LeaderIsr(preferred, state.leader_epoch + 1, state.isr, self.epoch, state.zk_version)

    def _unclean_leader(self, tp: TP, state: Z.LeaderIsr) -> tuple[int, Z.LeaderIsr | None]:
        """(error code, new state): only for a partition without a live leader; an in-sync
        replica first, else any live replica (which may lose acknowledged records)."""
        EC = E.ErrorCode
        if state.leader in self.brokers:
            return EC.ELECTION_NOT_NEEDED, None
        replicas = self._replicas(tp)
        live = [r for r in replicas if r in self.brokers]
        in_sync = [r for r in live if r in state.isr]
        if in_sync:
            return 0, Z.LeaderIsr(in_sync[0], state.leader_epoch + 1, tuple(r for r in state.isr if r in self.brokers),
                                  self.epoch, state.zk_version)
        if not live:
            return EC.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
        self.unclean_elections += 1
        recorder.unclean_election()
        log.warning("unclean leader election (requested) for %s-%d: %d leads", tp[0], tp[1], live[0])
        return 0, Z.LeaderIsr(live[0], state.leader_epoch + 1, (live[0],), self.epoch, state.zk_version)

    def _run_elections(self, tps: list[TP], unclean: bool) -> dict[TP, int]:
        results: dict[TP, int] = {}
        changed: set[TP] = set()
        for tp in tps:
            state = self.states.get(tp)
            if state is None or tp[0] in self.deleting:
                results[tp] = E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            err, new = (self._unclean_leader if unclean else self._preferred_leader)(tp, state)
            if new is not None:
                if self._write_state(tp, new):
                    changed.add(tp)
                    if not unclean:
                        self.preferred_elections += 1
                else:  # the state moved under us; the caller may ask again
                    err = E.ErrorCode.NOT_CONTROLLER if not self.active else E.ErrorCode.UNKNOWN_SERVER_ERROR
            results[tp] = err
        if changed:
            self._send_leader_and_isr(changed, set(self.brokers))
            self._send_update_metadata(set(self.brokers), changed)
        return results

    def _on_elect_leaders(self, unclean: bool, tps: list[TP] | None, reply: Callable[[Any], None]) -> None:
        """ElectLeaders: `tps` None means every partition (Kafka's null topic_partitions)."""
        if not self.active:
            reply(ElectLeadersResponse(error_code=E.ErrorCode.NOT_CONTROLLER))
            return
        if tps is None:
            tps = sorted(tp for tp in self.states if tp[0] not in self.deleting)
        results = self._run_elections(tps, unclean)
        by_topic: dict[str, list] = {}
        P = ElectLeadersResponse.ReplicaElectionResult.PartitionResult
        for (t, p), err in results.items():
            by_topic.setdefault(t, []).append(P(partition_id=p, error_code=err, error_message=None))
        reply(ElectLeadersResponse(error_code=0, replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()]))

    def _on_auto_rebalance(self) -> None:
        """Kafka's `checkAndTriggerAutoLeaderRebalance`: a broker whose share of partitions it
        should lead (first in the assignment) but does not exceeds
        leader.imbalance.per.broker.percentage gets them back, where it is live and in sync."""
        if not self.active:
            return
        limit = self.node.config.get_int("leader.imbalance.per.broker.percentage") / 100.0
        by_preferred: dict[int, list[TP]] = {}
        for tp in self.states:
            replicas = self._replicas(tp)
            if replicas and tp[0] not in self.deleting and tp not in self.reassignments:
                by_preferred.setdefault(replicas[0], []).append(tp)
        todo: list[TP] = []
        for broker, tps in sorted(by_preferred.items()):
            if broker not in self.brokers or broker in self.shutting_down:
                continue
            not_leading = [tp for tp in tps if self.states[tp].leader != broker]
            if not_leading and len(not_leading) / len(tps) > limit:
                todo += [tp for tp in not_leading if broker in self.states[tp].isr]
        if todo:
            log.info("controller: leader imbalance; preferred election for %d partitions", len(todo))
            self._run_elections(sorted(todo), unclean=False)

    # -- partition reassignment (AlterPartitionReassignments v0, /admin/reassign_partitions) -----
    def _write_assignment(self, topic: str) -> None:
        """The topic znode with its replicas and the reassignments in progress (unconditional:
        only the controller rewrites an existing topic's assignment while it reassigns)."""
        tid, assignment = self.topics[topic]
        ours = {p: r for (t, p), r in self.reassignments.items() if t == topic}
        self.zk.set(Z.topic_path(topic), Z.topic_assignment_json(
            tid, assignment, {p: r[1] for p, r in ours.items()}, {p: r[2] for p, r in ours.items()}))

    def _start_reassignment(self, tp: TP, target: list[int] | None) -> int:
        """Kafka's `onPartitionReassignment`, first phase: replicas = target + original, the new
        ones added as followers (leader epoch + 1) and left to catch up. None cancels: back to
        the original replicas."""
        EC = E.ErrorCode
        state = self.states.get(tp)
        if state is None or tp[0] in self.deleting:
            return EC.UNKNOWN_TOPIC_OR_PARTITION
        current = self._replicas(tp)
        ongoing = self.reassignments.get(tp)
        original = [r for r in current if r not in ongoing[1]] if ongoing else current
        if target is None:
            if ongoing is None:
                return EC.NO_REASSIGNMENT_IN_PROGRESS
            target = original
        if not target or len(set(target)) != len(target) or any(r not in self.brokers for r in target):
            return EC.INVALID_REPLICA_ASSIGNMENT
        replicas = list(dict.fromkeys(list(target) + original))
        adding = [r for r in target if r not in original]
        removing = [r for r in original if r not in target]
        dropped = [r for r in current if r not in replicas]  # new replicas of a replaced reassignment
        self.topics[tp[0]][1][tp[1]] = replicas
        self.reassignments[tp] = (list(target), adding, removing)
        self._write_assignment(tp[0])
        for _ in range(3):  # the state znode may move under us (an ISR change): bump the epoch of the new one
            isr = tuple(r for r in state.isr if r in replicas) or state.isr
            if self._write_state(tp, Z.LeaderIsr(state.leader, state.leader_epoch + 1, isr, self.epoch,
                                                 state.zk_version)):
                break
            state = self.states[tp]
        log.info("controller: reassigning %s-%d from %s to %s (adding %s, removing %s)", tp[0], tp[1], original,
                 target, adding, removing)
        self._stop_replicas(tp, dropped, delete=True)
        self._send_leader_and_isr({tp}, set(self.brokers))
        self._send_update_metadata(set(self.brokers), {tp})
        self._maybe_complete_reassignment(tp)
        return 0

    def _maybe_complete_reassignment(self, tp: TP) -> None:
        """Second phase, once every target replica is in the ISR: a target replica leads (the
        first live in-sync one, unless the leader is in the target), replicas = target, the
        removed replicas stop and delete their logs (StopReplica with delete)."""
        entry = self.reassignments.get(tp)
        state = self.states.get(tp)
        if entry is None or state is None:
            return
        target, _, removing = entry
        if not all(r in state.isr for r in target):
            return
        leader = state.leader
        if leader not in target or leader not in self.brokers:
            live = [r for r in target if r in self.brokers and r in state.isr]
            if not live:
                return
            leader = live[0]
        isr = tuple(r for r in state.isr if r in target)
        if self._write_state(tp, Z.LeaderIsr(leader, state.leader_epoch + 1, isr, self.epoch,
                                             state.zk_version)) is None:
            return
        self.topics[tp[0]][1][tp[1]] = list(target)
        del self.reassignments[tp]
        self._write_assignment(tp[0])
        log.info("controller: reassignment of %s-%d done: replicas %s, leader %d", tp[0], tp[1], target, leader)
        self._send_leader_and_isr({tp}, set(self.brokers))
        self._stop_replicas(tp, removing, delete=True)
        self._send_update_metadata(set(self.brokers), {tp})
        self._remove_from_reassign_znode(tp)

    def _stop_replicas(self, tp: TP, brokers: list[int], *, delete: bool) -> None:
        S = StopReplicaRequest
        for b in brokers:
            if b in self.brokers:
                self.channel.send(b, S(controller_id=self.broker_id, controller_epoch=self.epoch,
                                       broker_epoch=self.brokers[b].epoch, topic_states=[S.StopReplicaTopicState(
                                           topic_name=tp[0], partition_states=[S.StopReplicaPartitionState(
                                               partition_index=tp[1], leader_epoch=LEADER_DURING_DELETE,
                                               delete_partition=delete)])]), STOP_REPLICA_VERSION)

    def _on_alter_reassignments(self, request: Any, reply: Callable[[Any], None]) -> None:
        R = AlterPartitionReassignmentsResponse
        if not self.active:
            reply(R(error_code=E.ErrorCode.NOT_CONTROLLER, error_message=None))
            return
        out = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                code = self._start_reassignment((t.name, p.partition_index),
                                                None if p.replicas is None else list(p.replicas))
                parts.append(R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code,
                                                             error_message=None))
            out.append(R.ReassignableTopicResponse(name=t.name, partitions=parts))
        reply(R(error_code=0, error_message=None, responses=out))

    def _on_list_reassignments(self, tps: list[TP] | None, reply: Callable[[Any], None]) -> None:
        """(error code, {partition: (replicas, adding, removing)})."""
        if not self.active:
            reply((E.ErrorCode.NOT_CONTROLLER, {}))
            return
        reply((0, {tp: (self._replicas(tp), entry[1], entry[2]) for tp, entry in sorted(self.reassignments.items())
                   if tps is None or tp in tps}))

    def _on_reassign_znode(self) -> None:
        """`/admin/reassign_partitions` (Kafka's legacy path): its partitions are reassigned;
        each leaves the znode when done, the znode goes when empty."""
        if not self.active:
            return
        try:
            data, _ = self.zk.get(Z.REASSIGN_PARTITIONS, watch=self._watch("reassign_znode"))
        except NoNodeError:
            self.zk.exists(Z.REASSIGN_PARTITIONS, watch=self._watch("reassign_znode"))
            return
        try:
            wanted = Z.parse_reassign_partitions(data)
        except (ValueError, KeyError, TypeError):
            log.warning("controller: unreadable %s removed", Z.REASSIGN_PARTITIONS)
            self.zk.delete(Z.REASSIGN_PARTITIONS)
            return
        for tp, target in sorted(wanted.items()):
            entry = self.reassignments.get(tp)
            if entry is not None and entry[0] == target:
                continue  # in progress already
            if entry is None and self._replicas(tp) == target:
                self._remove_from_reassign_znode(tp)
                continue
            code = self._start_reassignment(tp, target)
            if code:
                log.warning("controller: reassignment of %s-%d to %s refused (error %d)", tp[0], tp[1], target, code)
                self._remove_from_reassign_znode(tp)

    def _remove_from_reassign_znode(self, tp: TP) -> None:
        try:
            data, stat = self.zk.get(Z.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            wanted = Z.parse_reassign_partitions(data)
        except (ValueError, KeyError, TypeError):
            wanted = {}
        if tp not in wanted and wanted:
            return
        wanted.pop(tp, None)
        try:
            if wanted:
                self.zk.set(Z.REASSIGN_PARTITIONS, Z.reassign_partitions_json(wanted), version=stat.version)
            else:
                self.zk.delete(Z.REASSIGN_PARTITIONS, version=stat.version)
        except (BadVersionError, NoNodeError):
            self.put("reassign_znode")  # changed meanwhile: read it again

    # -- requests to brokers -------------------------------------------------------------------
    def _send_leader_and_isr(self, tps: set[TP], to: set[int], *, is_new: bool = False) -> None:
        S = LeaderAndIsrRequest
        for b in to:
            if b not in self.brokers:
                continue
            by_topic: dict[str, list] = {}
            leaders = set()
            for tp in sorted(tps):
                state = self.states.get(tp)
                replicas = self._replicas(tp)
                if state is None or b not in replicas:
                    continue
                leaders.add(state.leader)
                by_topic.setdefault(tp[0], []).append(S.LeaderAndIsrPartitionState(
                    topic_name=tp[0], partition_index=tp[1], controller_epoch=state.controller_epoch,
                    leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                    partition_epoch=state.zk_version, replicas=replicas, adding_replicas=[], removing_replicas=[],
                    is_new=is_new, leader_recovery_state=0))
            if not by_topic:
                continue
            live_leaders = []
            for leader in sorted(leaders):
                info = self.brokers.get(leader)
                if info is not None:
                    host, port = info.endpoint(self.node.inter_broker_listener)
                    live_leaders.append(S.LeaderAndIsrLiveLeader(broker_id=leader, host_name=host, port=port))
            req = S(controller_id=self.broker_id, is_k_raft_controller=False, controller_epoch=self.epoch,
                    broker_epoch=self.brokers[b].epoch, type=0, topic_states=[
                        S.LeaderAndIsrTopicState(topic_name=t, topic_id=self.topics[t][0], partition_states=ps)
                        for t, ps in by_topic.items() if t in self.topics],
                    live_leaders=live_leaders)
            self.channel.send(b, req, LEADER_AND_ISR_VERSION)

    def _send_update_metadata(self, to: set[int], tps: set[TP]) -> None:
        U = UpdateMetadataRequest
        by_topic: dict[str, list] = {}
        for tp in sorted(tps):
            state = self.states.get(tp)
            if state is None:
                continue
            replicas = self._replicas(tp)
            by_topic.setdefault(tp[0], []).append(U.UpdateMetadataPartitionState(
                topic_name=tp[0], partition_index=tp[1], controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                zk_version=state.zk_version, replicas=replicas,
                offline_replicas=[r for r in replicas if r not in self.brokers]))
        live = []
        for info in self.brokers.values():
            protocols = dict(info.security_protocols)
            live.append(U.UpdateMetadataBroker(id=info.broker_id, endpoints=[
                U.UpdateMetadataEndpoint(port=port, host=host, listener=name,
                                         security_protocol=Z.SECURITY_PROTOCOLS.get(protocols.get(name, name), 0))
                for name, host, port in info.endpoints], rack=info.rack))
        for b in to:
            if b not in self.brokers:
                continue
            req = U(controller_id=self.broker_id, is_k_raft_controller=False, type=0, controller_epoch=self.epoch,
                    broker_epoch=self.brokers[b].epoch, topic_states=[
                        U.UpdateMetadataTopicState(topic_name=t, topic_id=self.topics[t][0] if t in self.topics
                                                   else bytes(16), partition_states=ps)
                        for t, ps in by_topic.items()], live_brokers=live)
            self.channel.send(b, req, UPDATE_METADATA_VERSION)
