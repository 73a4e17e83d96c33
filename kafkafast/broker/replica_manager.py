"""The data plane of this broker, in every mode (issue 24: a single node is a cluster of one):
Kafka's `ReplicaManager`, held by the broker as `broker.replicas`.

It takes partition states from the control plane (`broker.control`) exactly as a controller's
LeaderAndIsr carries them (leader, leader epoch, partition epoch, ISR, replicas) and makes each
replica leader or follower through the placement's hooks (`become_leader`, `become_follower`:
the process that holds the replica's log applies the role, the others learn it). The single
node's control plane (`broker/control.py:LocalControl`) hands every partition the state a
controller gives a lone broker: leader this broker at the epoch of its leader-epoch checkpoint
(0 for none), ISR = replicas = [this broker]; ZooKeeper's (`cluster/zk_control.py`) hands it
the controller's LeaderAndIsr and StopReplica. Both go through `apply_state`.

What it holds, the same code for a replication factor of 1 and of 3:

* the leader's append (`append`): its high watermark is the minimum log end over the ISR
  (`Partition.maybe_increment_hw`); a leader with no follower (a lone replica) publishes the
  log end as high watermark inside the append (a shared-mode Log under its lock), so its
  acks=all produces never wait;
* the leader's records of its followers' fetch positions (`on_replica_fetch`), the fetch bounds
  (`fetch_upper_bound`: consumers the high watermark, followers the log end, the leader-side
  replication throttle), the rack-aware read replica (KIP-392), and what a follower has been
  answered (`high_watermark_news`);
* ISR changes: a follower that reached the high watermark rejoins, one not caught up for
  replica.lag.time.max.ms leaves (checked every half of it); either goes out through the
  control plane's `alter_isr` (ZooKeeper's: AlterPartition to the controller; a lone broker
  has no followers, so never one);
* fencing: a leader that cannot confirm its leadership appends nothing; the reason comes from
  the control plane (`fence_reason`: the ZooKeeper session and lease; none on a single node);
* the coordinators' loading and unloading when leadership of `__consumer_offsets`,
  `__transaction_state` or `__share_group_state` comes or goes.

The follower fetchers are network code and stay in cluster/: the ZooKeeper side gives them to
the replica manager (`fetchers`, a `cluster/fetcher.py:FetcherManager`); a lone broker has none
(`NO_FETCHERS`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from kafkafast import clock
from kafkafast.broker.follower_state import FollowerState
from kafkafast.broker.group_coordinator import OFFSETS_TOPIC
from kafkafast.broker.partition import Partition
from kafkafast.broker.replication_throttle import ReplicationQuota, throttled
from kafkafast.broker.share.state_store import STATE_TOPIC
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.config_def import RACK_AWARE_REPLICA_SELECTOR
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequest

log = logging.getLogger("kafkafast.replica_manager")
EC = E.ErrorCode
# After this broker takes a leadership with followers, a follower that has not fetched that
# partition since parks its fetches at most SETTLING_WAIT_S, for at most SETTLING_S
# (`ReplicaManager.follower_wait_s`): 50 short polls a second of one fetcher, until it fetches
# the partition. The follower's LeaderAndIsr may come well after the leader's (a loaded
# machine, a follower opening many logs at once); with one second, a follower that came later
# parked its fetches for its whole replica.fetch.wait.max.ms again before it named the
# partition (seen once on a CI run with 30 s: a first acks=all produce timed out).
SETTLING_S = 10.0
SETTLING_WAIT_S = 0.02
PartitionState = LeaderAndIsrRequest.LeaderAndIsrPartitionState


class NoFetchers:
    """The follower fetchers of a broker that follows no other (a single node)."""

    def add(self, tp: tuple[str, int], part: Any, leader: int, host: str, port: int, leader_epoch: int) -> None:
        raise E.NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]}: no other broker to follow")

    def remove(self, tp: tuple[str, int]) -> None:
        pass

    async def close(self) -> None:
        pass


NO_FETCHERS = NoFetchers()


class ReplicaManager:
    """Every partition replica of this broker with its role (see the module docstring)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.placement = broker.placement
        config = broker.config
        self.lag_ms = config.get_int("replica.lag.time.max.ms")
        self.leader_quota = ReplicationQuota(config.get_int("leader.replication.throttled.rate"))
        self.rack_aware_reads = config.get("replica.selector.class") == RACK_AWARE_REPLICA_SELECTOR
        self.control: Any = None  # the control plane feeding it (attach_control)
        self.fetchers: Any = NO_FETCHERS  # the follower fetchers (cluster/fetcher.py), given by ZooKeeper's side
        # the control plane's: why this broker cannot confirm a leadership now (None: it never fences)
        self.fence_reason: Callable[[Any], str | None] | None = None
        self.leader_endpoints: dict[int, tuple[str, int]] = {}  # the leaders' inter-broker endpoints
        self._isr_task: asyncio.Task | None = None
        self._wake_scheduled = False  # (`_wake_parked_fetches_soon`)
        self.settling_until = 0.0  # (monotonic) until then `awaiting` holds (`took_leadership`)
        # follower -> {partition led since: when (clock ms)}, until that follower fetched it
        self.awaiting: dict[int, dict[tuple[str, int], int]] = {}

    def attach_control(self, control: Any) -> None:
        """The control plane feeding this replica manager (the broker's, chosen once)."""
        self.control = control
        self.fence_reason = control.fence_reason

    # -- lifecycle ------------------------------------------------------------------------
    def start_isr_maintenance(self) -> None:
        """Once the broker serves: followers that fall behind leave the ISR."""
        self._isr_task = asyncio.get_running_loop().create_task(self._isr_maintenance())

    async def stop(self) -> None:
        """Before the logs close (a cluster broker's stop calls it first: again, a no-op)."""
        if self._isr_task is not None:
            self._isr_task.cancel()
            self._isr_task = None
        await self.fetchers.close()

    # -- partition states (the control plane's) --------------------------------------------
    async def apply_partition_state(self, topic: str, topic_id: bytes, ps: Any, broker_epoch: int) -> int:
        """One LeaderAndIsr partition state: the replica opened by the placement if new
        (`new_replica`), then `apply_state`; the partition's error code."""
        part = self.broker.partitions.get((topic, ps.partition_index))
        if part is None:
            if self.broker.node_id not in ps.replicas:
                return EC.UNKNOWN_TOPIC_OR_PARTITION
            part = await self.placement.new_replica(topic, topic_id, ps.partition_index)
            part.topic_id = topic_id
        return self.apply_state(part, ps, broker_epoch)

    def apply_state(self, part: Partition, ps: Any, broker_epoch: int) -> int:
        """A partition state for `part`, a replica held here or just opened by the placement
        (a controller's LeaderAndIsr, or the single node's control plane opening its topics'
        partitions): its role applied; the partition's error code (STALE_CONTROLLER_EPOCH for a
        state not newer than the one held, UNKNOWN_TOPIC_OR_PARTITION for a state that does not
        name this broker a replica)."""
        if part.partition_epoch >= 0:
            if ps.leader_epoch < part.leader_epoch or (ps.leader_epoch == part.leader_epoch
                                                       and ps.partition_epoch <= part.partition_epoch):
                if ps.leader_epoch == part.leader_epoch and ps.leader == part.leader_id:
                    # nothing new to apply (Kafka answers it so), but the controller of this
                    # registration names the same role: the role is confirmed (a new controller, or
                    # a re-registration after which no leader changed, sends only such states)
                    part.confirmed_epoch = broker_epoch
                return EC.STALE_CONTROLLER_EPOCH
        if self.broker.node_id not in ps.replicas:
            return EC.UNKNOWN_TOPIC_OR_PARTITION
        self.broker.partitions[(part.topic, part.index)] = part
        self.become(part, ps, broker_epoch)
        return 0

    def become(self, part: Partition, ps: Any, broker_epoch: int = -1) -> None:
        """`part` takes the role `ps` names (through its placement: the process holding its log
        applies it)."""
        if ps.leader == self.broker.node_id:
            self.placement.become_leader(part, ps)
        else:
            self.placement.become_follower(part, ps)
        part.confirmed_epoch = broker_epoch

    def make_leader(self, part: Partition, ps: Any) -> None:
        """The process holding the replica's log leads it (its placement's `become_leader`)."""
        node_id = self.broker.node_id
        self.fetchers.remove((part.topic, part.index))
        if part.state.offline:  # its files could not be opened: the role only (reads and writes
            part.apply_state(ps, is_leader=True)  # answer KAFKA_STORAGE_ERROR), no log to set up
            return
        was_leader = part.is_leader
        now = clock.now_ms()
        lg = part.log
        new_leadership = part.new_leadership(ps)
        if new_leadership:
            replicas = set(ps.replicas)
            part.followers = {r: part.followers.get(r) or self._new_follower(part, r, now, replicas)
                              for r in ps.replicas if r != node_id}
            for f in part.followers.values():
                f.last_caught_up_ms = max(f.last_caught_up_ms, now)
            part.epoch_start_offset = lg.log_end_offset
        part.apply_state(ps, is_leader=True)
        lg.leader_epochs.assign(ps.leader_epoch, lg.log_end_offset)
        st = lg.state
        st.high_watermark = min(st.high_watermark, lg.log_end_offset)
        st.last_stable_offset = lg.last_stable_offset(st.high_watermark)
        # (a lone replica's leadership is no news: debug, else one line per partition at a single node's start)
        (log.info if part.followers else log.debug)("%s-%d: leader at epoch %d, ISR %s, log end %d, HW %d",
                                                    part.topic, part.index, ps.leader_epoch, part.isr,
                                                    lg.log_end_offset, st.high_watermark)
        part.maybe_increment_hw(node_id)
        part.wake_everywhere()
        if new_leadership and part.followers:
            self.took_leadership(part, ps.replicas)
        if not was_leader:
            self._coordinator_partition(part, load=True)

    def took_leadership(self, part: Partition, replicas: list[int]) -> None:
        """This broker took the leadership of `part` with followers `replicas` (a new one, or a
        new leader epoch; with worker processes every worker calls it, the owner from
        `make_leader`): once the LeaderAndIsr being applied is done, every fetch parked in this
        process answers, and until each follower fetched `part` (for SETTLING_S at most) its
        fetches park briefly (`follower_wait_s`). A follower's fetch parked before does not name
        the new partition (the follower may even follow it already): it would hold the
        partition's first fetch, and so its first acks=all produces, for up to its
        replica.fetch.wait.max.ms; and the controller's LeaderAndIsr reaches the leader and the
        followers in no set order, so an answered fetch may come back before its follower
        follows the partition, and would park for its whole wait again without it."""
        now_ms, key, node_id = clock.now_ms(), (part.topic, part.index), self.broker.node_id
        for r in replicas:
            if r != node_id:
                self.awaiting.setdefault(r, {})[key] = now_ms
        self.settling_until = time.monotonic() + SETTLING_S
        self._wake_parked_fetches_soon()

    def _wake_parked_fetches_soon(self) -> None:
        if self._wake_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # applied before the loop runs: nothing is parked yet
            return
        self._wake_scheduled = True
        loop.call_soon(self._wake_parked_fetches)

    def _wake_parked_fetches(self) -> None:
        self._wake_scheduled = False
        for part in list(self.broker.partitions.values()):
            if part.waiters:
                part.wake()

    def follower_wait_s(self, replica_id: int, max_wait_ms: int) -> float:
        """How long follower `replica_id`'s fetch may park: its max_wait_ms, but SETTLING_WAIT_S
        at most while it has yet to fetch a partition this broker took the lead of
        (`took_leadership`; one woken meanwhile is answered at once: `handlers/fetch.py`)."""
        wait = max(max_wait_ms, 0) / 1000.0
        if self.awaiting and self.awaits(replica_id):
            return min(wait, SETTLING_WAIT_S)
        return wait

    def awaits(self, replica_id: int) -> bool:
        """Whether follower `replica_id` has not fetched a partition this broker took the lead
        of since (for SETTLING_S at most: a follower that never comes is no reason to poll)."""
        if time.monotonic() >= self.settling_until:
            self.awaiting.clear()
            return False
        pending = self.awaiting.get(replica_id)
        if not pending:
            return False
        partitions = self.broker.partitions
        for key, since in list(pending.items()):
            part = partitions.get(key)
            if part is None or not part.is_leader or replica_id not in part.replicas:
                del pending[key]  # no longer led here, or no longer its follower
                continue
            f = self.follower_state(part, replica_id)
            if f is None:  # a worker that took it before its owner recorded the follower: still awaited
                continue
            # fetched since: later, or in the same ms by its log end (a new record starts at its
            # creation's ms with none; a fetch in the ms before the leadership counts too: rare)
            if f.last_fetch_ms > since or (f.last_fetch_ms == since and f.leo >= 0):
                del pending[key]
        if pending:
            return True
        del self.awaiting[replica_id]
        return False

    def make_follower(self, part: Partition, ps: Any) -> None:
        """The process holding the replica's log follows (its placement's `become_follower`)."""
        tp = (part.topic, part.index)
        was_leader = part.is_leader
        part.apply_state(ps, is_leader=False)
        part.followers = {}
        part.fail_waiters(EC.NOT_LEADER_OR_FOLLOWER)
        if was_leader:
            self._coordinator_partition(part, load=False)
        self.fetchers.remove(tp)
        endpoint = self.leader_endpoints.get(ps.leader)
        if ps.leader >= 0 and endpoint is None:
            endpoint = self.control.endpoint_of(ps.leader)
        if ps.leader >= 0 and endpoint is not None:
            self.fetchers.add(tp, part, ps.leader, endpoint[0], endpoint[1], ps.leader_epoch)
        log.info("%s-%d: follower of %d at epoch %d", part.topic, part.index, ps.leader, ps.leader_epoch)
        part.wake_everywhere()

    def stop_replica(self, tp: tuple[str, int], delete: bool) -> None:
        """StopReplica of one partition: no longer led nor followed here; its log deleted if asked."""
        broker = self.broker
        self.fetchers.remove(tp)
        part = broker.partitions.get(tp)
        if part is not None:
            part.fail_waiters(EC.NOT_LEADER_OR_FOLLOWER)
            if part.is_leader:
                self._coordinator_partition(part, load=False)
            part.is_leader = False
        if delete:
            removed = broker.partitions.pop(tp, None)
            if removed is not None:
                removed.wake()
            broker.log_manager.delete(*tp)
            if broker.log_cleaner is not None:
                broker.log_cleaner.forget(*tp)
            if removed is not None:
                self.placement.replica_removed(removed)

    def _coordinator_partition(self, part: Partition, *, load: bool) -> None:
        """Leadership of a `__consumer_offsets`, `__transaction_state` or `__share_group_state`
        partition came or went: its coordinator loads (COORDINATOR_LOAD_IN_PROGRESS meanwhile) or
        drops its state. (A single node's coordinators are made after its partitions are first
        opened: they load what they lead when they start.)"""
        broker = self.broker
        share = broker.share
        coordinator = {OFFSETS_TOPIC: broker.group_coordinator, TXN_TOPIC: broker.txn_coordinator,
                       STATE_TOPIC: share.store if share is not None else None}.get(part.topic)
        if coordinator is not None:
            (coordinator.load_partition if load else coordinator.unload_partition)(part.index)

    def _new_follower(self, part: Partition, replica_id: int, now: int, replicas: set[int]) -> Any:
        """The leader's record of a follower's fetch position: in the partition's slot with
        workers (every worker serves the follower's fetches), else, or when the slot has no
        room left, a FollowerState here."""
        f = self.placement.claim_slot_follower(part, replica_id, replicas)
        if f is None:
            return FollowerState(now)
        f.reset(now)
        return f

    # -- the leader's append -----------------------------------------------------------------
    def append(self, part: Partition, log_: Any, records: bytearray | memoryview, *,
               allow_control: bool = False) -> Any:
        """A leader's append through the writer `log_` (the partition's own Log, or in a
        worker, the Log it appends with through shared memory: kafkafast/runtime/placement.py).
        Control batches only from the marker writer (`allow_control`). KafkaStorageError when
        the files refuse it (a full disk): nothing was appended."""
        if not part.is_leader:
            raise E.NotLeaderOrFollowerError(f"broker {self.broker.node_id} does not lead {part.topic}-{part.index}")
        fenced = self.fence_reason is not None
        if fenced:
            self.check_fence(part)
        try:
            result = log_.append(records, part.leader_epoch, now_ms=clock.now_ms(), allow_control=allow_control)
        except OSError as exc:
            raise E.KafkaStorageError(f"{part.topic}-{part.index}: {exc}") from exc
        if part.followers:  # the ISR's log ends decide the high watermark
            part.wake_everywhere()  # (followers parked in other workers wait for the log end)
            part.maybe_increment_hw(self.broker.node_id)
        else:  # alone in the ISR: the high watermark is the log end (a shared-mode Log published it)
            if not log_.publishes_high_watermark:
                st = log_.state
                st.high_watermark = st.log_end_offset
                st.last_stable_offset = log_.last_stable_offset(st.high_watermark)
            part.wake()
            self.placement.on_append(part)
        if fenced:
            self.check_fence(part)  # stopped between the check and the write: written, never acknowledged
        return result

    # -- self-fencing (docs/ARCHITECTURE.md, "Self-fencing of a cut-off leader") -----------------
    def leadership_fence(self, part: Partition) -> str | None:
        """Why this broker cannot confirm now that it still leads `part` (then it appends nothing
        for clients), or None; the reason is the control plane's (a lone broker's: never)."""
        fence_reason = self.fence_reason
        if fence_reason is None:
            return None
        reason = fence_reason(part)
        if reason != part.fenced:
            if reason is not None:
                log.warning("%s-%d: not appending as leader at epoch %d: %s", part.topic, part.index,
                            part.leader_epoch, reason)
            else:
                log.info("%s-%d: leadership at epoch %d confirmed; appending again", part.topic, part.index,
                         part.leader_epoch)
            part.fenced = reason
        return reason

    def check_fence(self, part: Partition) -> None:
        reason = self.leadership_fence(part)
        if reason is not None:
            raise E.NotLeaderOrFollowerError(f"broker {self.broker.node_id} cannot confirm that it leads "
                                             f"{part.topic}-{part.index}: {reason}")

    def isr_error(self, part: Partition) -> int:
        """NOT_ENOUGH_REPLICAS when fewer replicas than min.insync.replicas are in sync, else 0
        (as in Kafka, a lone replica under a topic's min.insync.replicas=2 takes no acks=all
        write), over the ISR its keeper has (a worker that does not own a replicated partition:
        the owner's, in the slot)."""
        home = part.home
        isr = home.isr(part) if home.remote else part.isr
        return EC.NOT_ENOUGH_REPLICAS if len(isr) < part.log.config.min_insync_replicas else 0

    # -- the fetch path ----------------------------------------------------------------------
    def fetch_error(self, part: Partition, replica_id: int, any_replica: bool = False) -> int:
        """NOT_LEADER_OR_FOLLOWER unless this broker leads the partition or, for a consumer's
        Fetch v11+ (`any_replica`, KIP-392), holds a replica of it."""
        return 0 if part.is_leader or any_replica else EC.NOT_LEADER_OR_FOLLOWER

    def fetch_upper_bound(self, part: Partition, replica_id: int) -> int:
        """Followers read up to the log end; consumers up to the high watermark. A follower of a
        leader-throttled replica gets nothing while leader.replication.throttled.rate is used up
        (Kafka's `shouldLeaderThrottle`): up to where it already is."""
        if replica_id < 0:
            return part.high_watermark
        leo = part.seen_leo = part.log_end_offset  # what a follower's fetch about to park saw (workers compare)
        if self._leader_throttled(part) and self.leader_quota.exceeded():
            f = part.followers.get(replica_id)
            if f is not None and f.leo >= 0:
                return min(f.leo, leo)
        return leo

    def preferred_read_replica(self, part: Partition, client_rack: str, fetch_offset: int) -> int:
        """Kafka's RackAwareReplicaSelector as its ReplicaManager.findPreferredReadReplica applies
        it, on the leader only and recomputed at every fetch: a consumer without a rack, or in
        the leader's rack, stays here; otherwise the most caught-up (then most recently caught
        up) follower in its rack among those in the ISR, live, and holding `fetch_offset` (its
        log end, as its last fetch reported it, at or past it); -1 when none is (a lone
        replica has no other)."""
        broker = self.broker
        if not self.rack_aware_reads or not client_rack or not part.is_leader \
                or client_rack == broker.config.get("broker.rack"):
            return -1
        best, chosen = (-1, 0), -1
        for r in part.in_sync_replicas:  # (a worker's replica another keeps: the owner's ISR)
            endpoint = self.control.endpoint_of(r)
            f = self.follower_state(part, r) if r != broker.node_id else None
            if endpoint is None or endpoint[2] != client_rack or f is None or f.leo < fetch_offset:
                continue
            if (f.leo, f.last_caught_up_ms) > best:
                best, chosen = (f.leo, f.last_caught_up_ms), r
        return chosen

    def follower_state(self, part: Partition, replica_id: int) -> Any:
        """The leader's record of a follower's fetch position (None: not a follower): the
        owner's, or in another worker the owner's record in the partition's slot."""
        if self.placement.owns(part):
            return part.followers.get(replica_id)
        return self.placement.slot_follower(part, replica_id)

    def _leader_throttled(self, part: Partition) -> bool:
        return (not self.leader_quota.unlimited
                and throttled(part.log.config.leader_replication_throttled_replicas, part.index,
                              self.broker.node_id))

    def on_replica_read(self, part: Partition, replica_id: int, nbytes: int) -> None:
        """Bytes a follower fetch of this partition returned: counted against the throttle."""
        if self._leader_throttled(part):
            self.leader_quota.record(nbytes)

    @staticmethod
    def answered_high_watermark(part: Partition, replica_id: int, hw: int) -> bool:
        """Whether `hw` is what this process answered the follower last (nothing recorded)."""
        return part.answered_hw.get(replica_id) == hw

    def high_watermark_news(self, part: Partition, replica_id: int, hw: int) -> bool:
        """Records `hw` as what the follower is answered now; True when it differs from what this
        process answered it last (docs/ARCHITECTURE.md, "acks=all in one round trip")."""
        if self.answered_high_watermark(part, replica_id, hw):
            return False
        part.answered_hw[replica_id] = hw
        return True

    def quiet_follower_partition(self, part: Partition, replica_id: int, fp: Any, cached: Any, track: bool,
                                 now_ms: int) -> bool:
        """Whether a follower's incremental-session partition has nothing to tell it: led here
        (this process keeps its state, or another worker does: `_quiet_elsewhere`), the follower at
        the log end and at the current leader epoch, no error, and the high watermark, last stable
        offset and log start offset the ones the session (`cached`) and this follower were answered
        last. Such a partition needs no
        read and no answer; on the pass that records fetch offsets (`track`) the follower's
        position is unchanged (in the ISR, at the offset it fetched last), so only its caught-up
        time moves: the high watermark and the ISR cannot. False whenever any of that is not so
        (the full pass then handles the partition). A follower's fetch names every partition of
        its session, mostly quiet (e.g. the internal topics' 50 partitions each): this keeps
        their cost per fetch to these checks."""
        if cached is None or not part.is_leader or part.home.loading:
            return False
        st = part.state
        offset = fp.fetch_offset
        if offset != st.log_end_offset or st.offline or (
                fp.current_leader_epoch >= 0 and fp.current_leader_epoch != part.leader_epoch):
            return False
        if self.placement.owns(part):
            f = part.followers.get(replica_id)
            return f is not None and _quiet_here(part, f, replica_id, offset, cached, track, now_ms)
        hw = part.high_watermark  # (records what a fetch about to park saw, as the full pass does)
        part.seen_leo = offset
        if part.answered_hw.get(replica_id) != hw or not cached.unchanged(
                hw, min(st.last_stable_offset, hw), st.log_start_offset):
            return False
        return self._quiet_elsewhere(part, replica_id, offset, hw, track, now_ms)

    def _quiet_elsewhere(self, part: Partition, replica_id: int, offset: int, hw: int, track: bool,
                         now_ms: int) -> bool:
        """`quiet_follower_partition` in a worker that does not own `part` (it reads the owner's
        state from the slot): also the high watermark at the log end and every replica in the ISR
        the owner published. Then the full pass's `on_replica_fetch` would only move the
        follower's caught-up time and skip waking the owner (placement's `_owner_may_move`: no
        higher watermark possible, no replica to rejoin), so that is all this does."""
        if hw != offset:
            return False
        isr = part.home.published_isr()
        if replica_id not in isr or any(r not in isr for r in part.replicas):
            return False
        if track:
            f = self.placement.slot_follower(part, replica_id)
            if f is None or f.leo != offset:
                return False
            f.on_fetch(offset, offset, now_ms)
        return True

    def steady_follower_partition(self, part: Partition, replica_id: int, current_leader_epoch: int) -> bool:
        """Whether a follower's fetch of `part` can only be answered with records, offsets or
        nothing (the lean path, handlers/fetch.py `follower_fetch`): led and kept by this process,
        not loading, not offline, `replica_id` one of its followers, the fetch at the current
        leader epoch (or naming none), and no leader replication throttle configured. Anything
        else (an error to answer, a throttle to apply) goes the general way."""
        return (part.is_leader and self.leader_quota.unlimited and replica_id in part.followers
                and (current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch)
                and self.placement.owns(part) and not part.home.loading and not part.state.offline)

    def steady_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int, cached: Any, track: bool,
                              now_ms: int) -> tuple[int, int, int, int] | None:
        """`quiet_follower_partition`, then (`track`) `on_replica_fetch` and `fetch_upper_bound`,
        for a partition `steady_follower_partition` accepted with nothing awaited since (its
        checks hold): None when the partition is quiet, else (high watermark, last stable offset,
        log start offset, upper bound) after the follower's offset was recorded."""
        f = part.followers[replica_id]
        if _quiet_here(part, f, replica_id, fetch_offset, cached, track, now_ms):
            return None
        st = part.state
        hw = st.high_watermark
        leo = st.log_end_offset
        lso = st.last_stable_offset
        if track:
            moved = f.leo != fetch_offset
            f.on_fetch(fetch_offset, leo, now_ms)
            if moved:  # (as Kafka's updateFollowerFetchState: a log end that stayed moves no watermark)
                part.maybe_increment_hw(self.broker.node_id)
            if replica_id not in part.isr:
                self.maybe_expand_isr(part, replica_id, fetch_offset)
            hw = st.high_watermark
            leo = st.log_end_offset
            lso = st.last_stable_offset
        part.seen_hw, part.seen_leo = hw, leo
        return hw, lso if lso < hw else hw, st.log_start_offset, leo

    def on_replica_fetch(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower's fetch: its log end, which may move the high watermark and the ISR."""
        if not part.is_leader:
            return
        f = self.follower_state(part, replica_id)
        if f is None:
            return
        f.on_fetch(fetch_offset, part.log.state.log_end_offset, clock.now_ms())
        if not self.placement.owns(part):
            self.placement.wake_owner(part)  # the owner recomputes the high watermark and the ISR
            return
        part.maybe_increment_hw(self.broker.node_id)
        self.maybe_expand_isr(part, replica_id, fetch_offset)

    # -- ISR changes (leader -> control plane) -----------------------------------------------
    def maybe_expand_isr(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower that reached the high watermark and the current epoch's start rejoins the ISR."""
        if (replica_id not in part.isr and part.alter_in_flight is None
                and fetch_offset >= part.high_watermark and fetch_offset >= part.epoch_start_offset):
            self._alter_isr(part, sorted(set(part.isr) | {replica_id}))

    async def _isr_maintenance(self) -> None:
        interval = max(self.lag_ms / 2, 100) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.shrink_lagging_isrs()
            except Exception:  # keep checking; the error is in the log
                log.exception("ISR maintenance failed")

    def shrink_lagging_isrs(self) -> None:
        """Followers in the ISR that have not caught up for replica.lag.time.max.ms leave it."""
        broker = self.broker
        now = clock.now_ms()
        node_id = broker.node_id
        for part in list(broker.partitions.values()):
            if not part.followers or not broker.owns(part) or part.alter_in_flight is not None:
                continue
            leo = part.log.state.log_end_offset
            lagging = [r for r in part.isr if r != node_id and (f := part.followers.get(r)) is not None
                       and f.leo < leo and now - f.last_caught_up_ms > self.lag_ms]
            if lagging:
                log.info("%s-%d: shrinking ISR %s: %s not caught up for %d ms", part.topic, part.index,
                         part.isr, lagging, self.lag_ms)
                self._alter_isr(part, [r for r in part.isr if r not in lagging])

    def _alter_isr(self, part: Partition, new_isr: list[int]) -> None:
        part.alter_in_flight = new_isr
        asyncio.get_running_loop().create_task(self._alter_partition(part, new_isr, part.leader_epoch))

    async def _alter_partition(self, part: Partition, new_isr: list[int], epoch: int) -> None:
        """The ISR change asked of the control plane; the high watermark waits for the members
        being added meanwhile (`Partition.maximal_isr`)."""
        try:
            await self.control.alter_isr(part, new_isr, epoch)
        finally:
            if part.alter_in_flight is new_isr:
                part.alter_in_flight = None
            part.maybe_increment_hw(self.broker.node_id)
        self.placement.on_isr_changed(part)


def _quiet_here(part: Partition, f: Any, replica_id: int, fetch_offset: int, cached: Any, track: bool,
                now_ms: int) -> bool:
    """The quiet test of a partition this process keeps, for a fetch its other checks accepted
    (`quiet_follower_partition`, `steady_follower_fetch`): the follower `f` at the log end, its
    high watermark, last stable offset and log start offset what the session (`cached`) and it
    were answered last, and on the pass that records fetch offsets (`track`) in the ISR at the
    offset it fetched last. Then only its caught-up time moves, and what the fetch saw is
    recorded (`seen_hw`, `seen_leo`: a worker's wake-up compares)."""
    st = part.state
    leo = st.log_end_offset
    hw = st.high_watermark
    lso = st.last_stable_offset
    if (fetch_offset == leo and part.answered_hw.get(replica_id) == hw
            and cached.unchanged(hw, lso if lso < hw else hw, st.log_start_offset)
            and (not track or (f.leo == fetch_offset and replica_id in part.isr))):
        part.seen_hw, part.seen_leo = hw, leo
        if track:
            f.on_fetch(fetch_offset, fetch_offset, now_ms)
        return True
    return False
