"""The transaction coordinator in cluster mode (Kafka's ZooKeeper-mode TransactionCoordinator
with its TransactionStateManager and TransactionMarkerChannelManager).

`__transaction_state` is a replicated internal topic, created on first use with
transaction.state.log.num.partitions, .replication.factor and .min.isr. The coordinator of a
transactional id is the leader of its partition (FindCoordinator key type 1 answers that
broker). Becoming leader of a partition loads its ids (COORDINATOR_LOAD_IN_PROGRESS
meanwhile; transactions found in Prepare* get their markers written); becoming follower
drops them (NOT_COORDINATOR). Every state write is appended by the leader and answered once
the ISR has it (acks=all, as Kafka's transaction log): NOT_ENOUGH_REPLICAS before the append
and a timeout are COORDINATOR_NOT_AVAILABLE, a lost leadership NOT_COORDINATOR.

Markers go to the partition leaders: appended here when this broker leads the partition
(through the owner worker in a multi-worker broker), else sent with WriteTxnMarkers v1 over
one inter-broker connection per broker (the inter-broker listener and security); every
partition of a transaction at once. A marker is acked once the partition's ISR has it (its
leader waits for the high watermark, as Kafka appends markers with acks=-1).
TRANSACTION_COORDINATOR_FENCED (the leader holds a marker from a newer coordinator epoch for
the producer) is not retried, as in Kafka: the newer coordinator finishes the transaction.
Errors (NOT_LEADER_OR_FOLLOWER, an unreachable broker, ...) are retried for up to
`MARKER_RETRY_S`, the leader looked up again each time from UpdateMetadata; then the
transaction stays in Prepare* and the periodic task tries again. EndTxn does not wait for
those retries (Kafka answers it once the decision is written): it is answered after each
marker was tried once, the retries go on in the background. A partition whose topic is
gone from the metadata needs no marker.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafkafast.broker.txn_coordinator import TXN_TOPIC, TransactionCoordinator, TxnError, write_marker
from kafkafast.cluster.peers import PeerConnections
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.write_txn_markers import WriteTxnMarkersRequest

log = logging.getLogger("kafkafast.transactions")
EC = E.ErrorCode
APPEND_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms default, which its transaction log appends wait
MARKER_RETRY_S = 10.0
MARKER_BACKOFF_S = 0.2
WRITE_TXN_MARKERS_VERSION = 1


class ClusterTxnCoordinator(TransactionCoordinator):
    def __init__(self, broker: Any) -> None:
        super().__init__(broker)
        self.peers = PeerConnections(broker, "txn-markers")
        self.topic_known = False

    async def stop(self) -> None:
        await super().stop()
        self.peers.close()

    # -- the topic and who coordinates ----------------------------------------------------
    def ensure_topic(self) -> None:
        """Created through ZooKeeper once (replication factor and min ISR from the
        transaction.state.log settings, see Broker.create_topic); `topic_known` stays
        False while it cannot be (fewer live brokers than its replication factor)."""
        if self.topic_known:
            return
        if self.broker.topics.get(TXN_TOPIC) is None:
            try:
                super().ensure_topic()
            except E.KafkaError as exc:
                log.info("cannot create %s: %s", TXN_TOPIC, exc)
                return
        self.topic_known = True

    def status(self, transactional_id: str | None) -> int:
        err = super().status(transactional_id)
        return EC.COORDINATOR_NOT_AVAILABLE if err == EC.NOT_COORDINATOR and not self.topic_known else err

    # -- state writes: acks=all ---------------------------------------------------------------
    async def _persist(self, m: Any, *, tombstone: bool = False) -> None:
        part = self._partition(self.partition_for(m.transactional_id))
        if part is not None and len(part.isr) < self.broker.min_insync_replicas(part):
            raise TxnError(EC.COORDINATOR_NOT_AVAILABLE)  # Kafka: NOT_ENOUGH_REPLICAS
        await super()._persist(m, tombstone=tombstone)

    async def _replicated(self, part: Any, end_offset: int) -> None:
        code = await part.wait_for_hw(end_offset, APPEND_TIMEOUT_S)
        if code == 0 and len(part.isr) < self.broker.min_insync_replicas(part):
            code = EC.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if code == EC.NOT_LEADER_OR_FOLLOWER:
            raise TxnError(EC.NOT_COORDINATOR)
        if code:
            log.warning("%s-%d: state write not replicated: %s", part.topic, part.index, EC(code).name)
            raise TxnError(EC.COORDINATOR_NOT_AVAILABLE)

    # -- markers ------------------------------------------------------------------------------
    async def _write_markers(self, m: Any, commit: bool, retry: bool) -> set[tuple[str, int]]:
        """Every partition's marker at once, with the coordinator epoch: the leader epoch of the
        id's `__transaction_state` partition, as Kafka's coordinator sends it."""
        index = self.partition_for(m.transactional_id)
        part = self._partition(index)
        epoch = part.leader_epoch if part is not None else 0
        unloads = self._unloads.get(index, 0)

        def still_coordinator() -> bool:
            return self._unloads.get(index, 0) == unloads

        tps = sorted(m.partitions)
        done = await asyncio.gather(*(self.write_marker(tp, m.producer_id, m.producer_epoch, commit, epoch,
                                                        still_coordinator, retry) for tp in tps))
        return {tp for tp, ok in zip(tps, done) if not ok}

    async def write_marker(self, tp: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int = 0, still_coordinator: Any = None, retry: bool = True) -> bool:
        """One marker, retried (with `retry`) for up to MARKER_RETRY_S while this broker still
        coordinates the transaction (else the new coordinator writes it: False)."""
        deadline = time.monotonic() + MARKER_RETRY_S
        while True:
            try:
                code = await self._marker_once(tp, producer_id, producer_epoch, commit, coordinator_epoch)
            except (OSError, asyncio.TimeoutError, E.KafkaError) as exc:
                code, why = EC.NETWORK_EXCEPTION, repr(exc)
            else:
                why = EC(code).name if code else ""
            if code == 0:
                return True
            if code == EC.TRANSACTION_COORDINATOR_FENCED:  # a newer coordinator finishes the transaction
                log.info("transaction marker for %s-%d (producer %d) fenced: coordinator epoch %d is stale",
                         tp[0], tp[1], producer_id, coordinator_epoch)
                return False
            if still_coordinator is not None and not still_coordinator():
                return False
            if self._stopped or not retry or time.monotonic() > deadline:
                log.warning("transaction marker for %s-%d (producer %d) not written: %s; retried later",
                            tp[0], tp[1], producer_id, why)
                return False
            await asyncio.sleep(MARKER_BACKOFF_S)

    async def _marker_once(self, tp: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int) -> int:
        broker = self.broker
        topic, index = tp
        part = broker.get_partition(topic, index)
        if part is not None and getattr(part, "is_leader", False):
            return await write_marker(broker, part, producer_id, producer_epoch, commit, coordinator_epoch)
        if topic not in broker.control.metadata.partitions:
            return 0  # the topic was deleted: no marker needed
        leader = broker.control.metadata.leader_of(topic, index)
        if leader < 0:
            return EC.LEADER_NOT_AVAILABLE
        if leader == broker.node_id:
            return EC.NOT_LEADER_OR_FOLLOWER  # the LeaderAndIsr that makes this broker leader is on its way
        R = WriteTxnMarkersRequest
        req = R(markers=[R.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=topic, partition_indexes=[index])])])
        resp = await self.peers.send(leader, req, WRITE_TXN_MARKERS_VERSION, APPEND_TIMEOUT_S + 5)
        if resp is None:
            return EC.LEADER_NOT_AVAILABLE
        return resp.markers[0].topics[0].partitions[0].error_code
