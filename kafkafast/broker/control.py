"""The control plane of a single node: the broker is the whole cluster and its own controller.

Handlers reach the control plane through `broker.control` and never ask which one they have:
this one, or the ZooKeeper one (`kafkafast/cluster/zk_control.py`), chosen once where the
broker is built. Each method answers what a cluster's controller (or a cluster member) would
answer; here, with no other broker, that is Kafka's answer for a lone broker:

* controller requests from other brokers (AlterPartition, ControlledShutdown) have no sender
  here: NOT_CONTROLLER, as a broker that is not the controller answers them;
* requests from a controller to a member (LeaderAndIsr, UpdateMetadata, StopReplica): this
  broker is no member of another's cluster, BROKER_NOT_AVAILABLE;
* reassignment: nothing can move, every partition INVALID_REPLICA_ASSIGNMENT; none in progress;
* the cluster view (DescribeCluster): this broker, which is also the controller;
* the data plane (`broker.replicas`, broker/replica_manager.py): each partition the placement
  opens gets the state a controller's LeaderAndIsr gives a lone broker (leader this broker at
  the epoch of its leader-epoch checkpoint, which another worker takes from the owner's
  slot, ISR and replicas [this broker]), through the
  replica manager's `apply_state` as a LeaderAndIsr's states; a lone leader has no follower, so no ISR change is ever asked
  for, and nothing fences it;
* the stores and coordinators that differ by control plane (`make_*`): the dynamic configs and
  the share groups' state and configs in the first log dir, the transaction coordinator that
  writes its markers locally, no follower fetchers.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from kafkafast.broker.dynamic_configs import DynamicConfigs
from kafkafast.broker.replica_manager import NO_FETCHERS, PartitionState
from kafkafast.broker.share.coordinator import ShareCoordinator
from kafkafast.broker.topic_admin import FileTopicStore
from kafkafast.broker.topics import TopicStore
from kafkafast.broker.txn_coordinator import TransactionCoordinator
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_partition import AlterPartitionResponse
from kafkafast.protocol._generated.alter_partition_reassignments import AlterPartitionReassignmentsResponse
from kafkafast.protocol._generated.controlled_shutdown import ControlledShutdownResponse
from kafkafast.protocol._generated.elect_leaders import ElectLeadersResponse

Reassignments = AlterPartitionReassignmentsResponse
TRANSACTIONS_UNSUPPORTED = ("this kafkafast broker runs no transaction coordinator; "
                            "produce without transactional.id (idempotent producers are supported)")
Result = ElectLeadersResponse.ReplicaElectionResult
PartResult = ElectLeadersResponse.PartitionResult


def election_everywhere(req: Any, code: int) -> ElectLeadersResponse:
    """The same code for every partition asked about (and as the top-level error, v1+,
    unless it is ELECTION_NOT_NEEDED, which is no error)."""
    results = [Result(topic=t.topic, partition_result=[PartResult(partition_id=p, error_code=code, error_message=None)
                                                       for p in t.partitions])
               for t in req.topic_partitions or []]
    top = 0 if code == E.ErrorCode.ELECTION_NOT_NEEDED else code
    return ElectLeadersResponse(error_code=top, replica_election_results=results)


def _elections_on_one_broker(broker: Any, req: Any) -> ElectLeadersResponse:
    broker.refresh_topics()
    results = []
    for t in req.topic_partitions or []:
        meta = broker.topics.get(t.topic)
        results.append(Result(topic=t.topic, partition_result=[PartResult(
            partition_id=p, error_message=None,
            error_code=E.ErrorCode.ELECTION_NOT_NEEDED if meta is not None and 0 <= p < meta.partitions
            else E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in t.partitions]))
    return ElectLeadersResponse(error_code=0, replica_election_results=results)


async def until_in_image(control: Any, done: Callable[[str], bool], names: list[str], timeout_ms: int) -> set[str]:
    """Waits, at most `timeout_ms`, until `done(name)` holds in the metadata image for every
    name (as Kafka answers CreateTopics once the new partitions have leaders and DeleteTopics
    once the topic is gone from the answering broker's metadata, so a client that acts on the
    answer finds the change in place); the names for which it still does not hold. A lone
    broker's image changes with the request; a cluster broker's with the controller's
    UpdateMetadata a moment later."""
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
    while True:
        control.refresh()
        waiting = {n for n in names if not done(n)}
        if not waiting or time.monotonic() >= deadline:
            return waiting
        await asyncio.sleep(0.02)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition in the metadata image: what Metadata tells clients about it."""
    index: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


def broker_endpoint(broker: Any, ctx: Any = None) -> tuple[str, int]:
    """(host, port) this broker advertises on the listener the request came in on (else its first)."""
    listener = getattr(getattr(ctx, "conn", None), "listener", None)
    if listener is not None:
        return listener.endpoint()
    adv = broker.config.advertised_listeners()[0]
    return adv.host or "127.0.0.1", adv.port


def reassignment_everywhere(req: Any, code: int, message: str | None = None) -> Reassignments:
    """An AlterPartitionReassignments answer with `code` for every partition of `req`."""
    R = Reassignments
    return R(error_code=0, error_message=None, responses=[R.ReassignableTopicResponse(name=t.name, partitions=[
        R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=message)
        for p in t.partitions]) for t in req.topics])


class LocalControl:
    """Control plane of a single-node broker (see the module docstring)."""

    zk = None  # no ZooKeeper: ACLs and SCRAM credentials are kept in the first log dir
    fence_reason = None  # a lone broker always knows that it leads (ReplicaManager.leadership_fence)
    # Every replica is this broker's alone: its high watermark is the log end each append
    # publishes, so with workers any worker may append to it, a transactional produce too
    # (runtime/placement.py: WorkerPlacement.appends_here).
    lone_replicas = True
    # The cluster id is meta.properties' in the first log dir (with workers the supervisor
    # writes it once, before the fork).
    cluster_id_in_log_dir = True

    @staticmethod
    def shutdown_budget_s(config: Any) -> float:
        """No controlled shutdown: nothing to hand over before the workers stop."""
        return 0.0

    @staticmethod
    def shared_append_enabled(config: Any) -> bool:
        """Whether any worker may append (`kafkafast.produce.shared.append`), else the owner only."""
        return config.get_bool("kafkafast.produce.shared.append")

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        # owner worker -> partitions it owns, opened here before it published their epochs
        # (`partition_opened`), and the task that gives them their role once it has
        self._unpublished: dict[int, list[Any]] = {}
        self._publications: asyncio.Task | None = None

    # -- the broker's lifecycle: nothing to register, watch or hand over ----------------

    def initial_cluster_id(self) -> str:
        return self.broker._load_cluster_id()  # meta.properties in the first log dir

    def make_topics(self) -> TopicStore:
        """The topics of the metadata image: the topics file in the first log dir."""
        return TopicStore(self.broker.log_dirs[0])

    def make_topic_store(self) -> FileTopicStore:
        """Topic administration's store: the topics file (and the logs, in each process)."""
        return FileTopicStore(self.broker)

    async def load(self) -> None:
        self.broker.load()  # topics, logs (recovery), partitions, on the loop

    def started(self) -> None:
        if self._unpublished:
            self._publications = asyncio.get_running_loop().create_task(self._await_publications())

    def config_for_topic(self, topic: str) -> Any:
        return self.broker.local_config_for_topic(topic)

    async def on_listening(self) -> None:
        pass

    async def before_stop(self) -> None:
        pass

    async def stop(self) -> None:
        if self._publications is not None:
            self._publications.cancel()

    # -- what the broker builds: the single node's stores and coordinators --------------

    def make_dynamic_configs(self) -> DynamicConfigs:
        return DynamicConfigs(self.broker.log_dirs[0])

    def make_fetchers(self) -> Any:
        return NO_FETCHERS  # a lone broker follows no other

    async def make_share_coordinator(self) -> ShareCoordinator:
        return ShareCoordinator(self.broker)  # state and group configs in the first log dir

    def make_txn_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.broker)

    # -- the data plane's partition states ------------------------------------------------

    def partition_opened(self, part: Any) -> None:
        """A partition of the topic store, just opened by the placement: the partition state a
        controller's LeaderAndIsr gives a cluster of one (leader and ISR and replicas this
        broker, partition epoch 0), applied as the ZooKeeper side applies the controller's
        (ReplicaManager.apply_state). Its leader epoch: where this process holds its log, the
        latest of the log's leader-epoch checkpoint (`latest_known_epoch`: an empty log's too,
        which its load dropped from the cache; 0 for none or offline); else the one its
        owner worker published in the partition's slot that it leads at (0 if it leads at none
        once loaded, as a partition created after the owner's load until it opens it). Until
        the owner has loaded (`loading`) it has published nothing: the partition gets its role
        here once it has (`_take_published`; meanwhile it is served as loading, then led by no
        one here: NOT_LEADER_OR_FOLLOWER, which clients retry)."""
        if self.broker.placement.owns(part):
            self._lead(part, 0 if part.state.offline else max(part.log.leader_epochs.latest_known_epoch, 0))
            return
        epoch = part.home.leading_epoch()
        if epoch < 0 and part.loading:
            self._unpublished.setdefault(part.owner, []).append(part)
            return
        self._lead(part, max(epoch, 0))

    def _lead(self, part: Any, epoch: int) -> None:
        node = self.broker.node_id
        ps = PartitionState(partition_index=part.index, leader=node, leader_epoch=epoch,
                            partition_epoch=0, isr=[node], replicas=[node])
        self.broker.replicas.apply_state(part, ps, -1)

    def _take_published(self) -> None:
        """The partitions of each owner worker that has loaded since they were opened here
        take the epochs it published (a partition dropped meanwhile is left alone)."""
        partitions = self.broker.partitions
        for owner, parts in list(self._unpublished.items()):
            if parts[0].loading:  # (the owner's: all of its partitions are, or none)
                continue
            del self._unpublished[owner]
            for part in parts:
                if partitions.get((part.topic, part.index)) is part:
                    self._lead(part, max(part.home.leading_epoch(), 0))

    async def _await_publications(self) -> None:
        """At start, until every owner worker has published the epochs of the partitions
        opened here before it loaded: taken as each one has (shared memory has no
        notification: looked at every 10 ms; a request's `refresh` takes them sooner)."""
        while self._unpublished:
            await asyncio.sleep(0.01)
            self._take_published()

    # -- requests a cluster's brokers send to the controller ---------------------------

    async def alter_partition(self, req: Any) -> AlterPartitionResponse:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=E.ErrorCode.NOT_CONTROLLER, topics=[])

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ControlledShutdownResponse:
        return ControlledShutdownResponse(error_code=E.ErrorCode.NOT_CONTROLLER)

    async def elect_leaders(self, req: Any) -> ElectLeadersResponse:
        """Nothing to elect: a known partition ELECTION_NOT_NEEDED, any other UNKNOWN_TOPIC_OR_PARTITION."""
        return _elections_on_one_broker(self.broker, req)

    async def alter_reassignments(self, req: Any) -> Reassignments:
        return reassignment_everywhere(req, E.ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       "a single broker: there is no other broker to move a replica to")

    async def list_reassignments(self, partitions: list[tuple[str, int]] | None) -> tuple[int, dict]:
        """(error code, {(topic, partition): (replicas, adding, removing)}) of the reassignments in progress."""
        return 0, {}

    # -- requests a controller sends to the members of its cluster ---------------------

    async def leader_and_isr(self, req: Any) -> tuple[int, list[tuple[str, bytes, int, int]]]:
        return E.ErrorCode.BROKER_NOT_AVAILABLE, []

    async def update_metadata(self, req: Any) -> int:
        return E.ErrorCode.BROKER_NOT_AVAILABLE

    async def stop_replica(self, req: Any) -> tuple[int, list[tuple[str, int, int]]]:
        return E.ErrorCode.BROKER_NOT_AVAILABLE, []

    # -- coordinators -------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: int, ctx: Any) -> tuple[int, str, int, int, str | None]:
        """(node, host, port, error, message) of the coordinator of a group (key type 0) or a
        transactional id (1), authorized and of a known key type: this broker, whose coordinators
        create their topic on first use. Where no transaction coordinator runs (a broker without a
        group coordinator) TRANSACTIONAL_ID_AUTHORIZATION_FAILED with TRANSACTIONS_UNSUPPORTED as
        message: the code confluent-kafka, kafka-python and aiokafka treat as fatal, so
        `init_transactions()` fails at once."""
        broker = self.broker
        coordinator = broker.group_coordinator if key_type == 0 else broker.txn_coordinator
        if coordinator is None:
            if key_type == 0:
                return -1, "", -1, E.ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            return -1, "", -1, E.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_UNSUPPORTED
        err = coordinator.status(key, "find_coordinator") if key_type == 0 else coordinator.status(key)
        if err in (E.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, E.ErrorCode.NOT_COORDINATOR):
            err = 0  # this broker it is (the owner worker loads it); the client retries its request
        if err:
            return -1, "", -1, err, None
        host, port = broker_endpoint(broker, ctx)
        return broker.node_id, host, port, 0, None

    # -- the cluster as clients see it: the metadata image -----------------------------

    def refresh(self) -> None:
        """Bring the image up to date (another worker may have changed the topic file, or
        published the epochs of partitions it owns)."""
        self.broker.placement.refresh_topics()
        if self._unpublished:
            self._take_published()

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the image has the partition: here, whether this broker has it."""
        return self.broker.get_partition(topic, index) is not None

    def topic_names(self) -> list[str]:
        return sorted(self.broker.topics.topics)

    def topic_id(self, name: str) -> bytes | None:
        """The topic's id, None when the image has no such topic."""
        meta = self.broker.topics.get(name)
        return meta.topic_id if meta is not None else None

    def stored_topic_id(self, name: str) -> bytes | None:
        """The id of a topic whose partition gets a slot (the image is the topic store here)."""
        return self.topic_id(name)

    def topic_named_by(self, topic_id: bytes) -> str | None:
        meta = self.broker.topics.by_id.get(topic_id)
        return meta.name if meta is not None else None

    def partitions_of(self, name: str) -> list[PartitionView]:
        """Each partition of the topic: led by this broker, its lone replica in sync; no leader
        while its owner worker still loads it or while its log dir has failed (offline)."""
        meta = self.broker.topics.get(name)
        node = self.broker.node_id
        out = []
        for i in range(meta.partitions if meta is not None else 0):
            p = self.broker.partitions.get((name, i))
            epoch = p.leader_epoch if p is not None else 0
            if p is not None and p.loading:
                out.append(PartitionView(i, -1, epoch, [node], [node], []))
            elif p is not None and p.state.offline:
                out.append(PartitionView(i, -1, epoch, [node], [], [node]))
            else:
                out.append(PartitionView(i, node, epoch, [node], [node], []))
        return out

    def controller_id(self) -> int:
        return self.broker.node_id

    def leader_of(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of a partition this broker does not lead, if one is known:
        a lone broker leads every partition it has."""
        return None

    def endpoint_of(self, broker_id: int) -> tuple[str, int, str | None] | None:
        """(host, port, rack) of another broker, on the inter-broker listener: there is none."""
        return None

    def brokers_for(self, ctx: Any) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker, on the listener of the request."""
        host, port = broker_endpoint(self.broker, ctx)
        return [(self.broker.node_id, host, port, self.broker.config.get("broker.rack") or None)]
