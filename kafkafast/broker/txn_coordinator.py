"""The transaction coordinator (KIP-98, KIP-360, KIP-447), as Kafka's TransactionCoordinator.

State per transactional id lives in memory and in the compacted internal topic
`__transaction_state` (`transaction.state.log.num.partitions`, default 50), in Kafka's
record format (`../shared/kafka-protocol/transaction-coordinator/`): key = int16 version 0 +
TransactionLogKey (the id); value = int16 version 0 + TransactionLogValue (producer id and
epoch, timeout, state, partitions, last update and start timestamps); a null value removes
the id. The id's partition is (Java `String.hashCode` & 0x7fffffff) % partitions. On start
the partitions this process owns are read back (COORDINATOR_LOAD_IN_PROGRESS meanwhile);
transactions found in PrepareCommit/PrepareAbort get their markers written then.

States and transitions (Kafka's TransactionState)::

    Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, InitProducerId--> PrepareAbort --markers--> CompleteAbort

Every transition is written to `__transaction_state` before it is answered, so the decision
of a PrepareCommit/PrepareAbort survives a crash and the markers are written after restart.
Markers are control batches appended by `write_marker` to each partition of the transaction
(the `__consumer_offsets` ones also make the group coordinator apply or drop the offsets of
TxnOffsetCommit). A marker that cannot be written (a full disk, an offline partition) is
retried in the background and every cleanup tick; the transaction stays in Prepare*
meanwhile (CONCURRENT_TRANSACTIONS to its producer), its EndTxn already answered.

Fencing: InitProducerId bumps the epoch (an ongoing transaction is aborted with the bumped
epoch first); requests with an older epoch get PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for
request versions before KIP-588), with another producer id INVALID_PRODUCER_ID_MAPPING.
KIP-360: InitProducerId with the current producer id and epoch bumps the epoch of that
producer (the client recovers from an abortable error without a new id).

Timers (every `transaction.abort.timed.out.transaction.cleanup.interval.ms`): transactions
open longer than their timeout are aborted with a bumped epoch (the producer is fenced);
ids idle in Empty/Complete* for `transactional.id.expiration.ms` are removed (tombstone).
All times come from `kafkafast/clock.py`.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from kafkafast import clock
from kafkafast.broker.group_coordinator import (
    OFFSETS_TOPIC,
    cancel_tasks,
    java_string_hash,
    load_each,
    nothing_to_load,
    read_partition,
)
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.coordinator_records import TransactionLogKey, TransactionLogValue
from kafkafast.protocol.primitives import Reader, Writer
from kafkafast.records import BatchBuilder
from kafkafast.storage import txn_index

log = logging.getLogger("kafkafast.transactions")

TXN_TOPIC = "__transaction_state"
EC = E.ErrorCode
MAX_EPOCH = 32767
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence")


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    last_producer_id: int = -1
    last_producer_epoch: int = -1


def txn_key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(0)
    TransactionLogKey(transactional_id=transactional_id).encode(w, 0)
    return w.getvalue()


def txn_value(m: TxnMetadata) -> bytes:
    topics: dict[str, list[int]] = {}
    for t, p in sorted(m.partitions):
        topics.setdefault(t, []).append(p)
    w = Writer()
    w.int16(0)
    TransactionLogValue(
        producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_timeout_ms=m.timeout_ms,
        transaction_status=m.state,
        transaction_partitions=[TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
                                for t, ps in topics.items()],
        transaction_last_update_timestamp_ms=m.update_ms, transaction_start_timestamp_ms=m.start_ms).encode(w, 0)
    return w.getvalue()


def decode_txn_record(key, value) -> tuple[str, TxnMetadata | None] | None:
    if key is None or len(key) < 2:
        return None
    r = Reader(bytes(key))
    if r.int16() != 0:
        return None
    tid = TransactionLogKey.decode(r, 0).transactional_id
    if value is None:
        return tid, None
    vr = Reader(bytes(value))
    version = vr.int16()
    v = TransactionLogValue.decode(vr, min(version, TransactionLogValue.MAX_VERSION))
    parts = {(ps.topic, p) for ps in (v.transaction_partitions or []) for p in ps.partition_ids}
    return tid, TxnMetadata(tid, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, v.transaction_status,
                            parts, v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms)


class TxnError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(EC(code).name)
        self.code = code


class TransactionCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.txns: dict[str, TxnMetadata] = {}
        self.loading: set[int] = set()
        self._unloads: dict[int, int] = {}  # __transaction_state partition -> times its leadership went
        self.max_timeout_ms = cfg.get_int("transaction.max.timeout.ms")
        self.abort_interval_ms = cfg.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms")
        self.expiration_ms = cfg.get_int("transactional.id.expiration.ms")
        self.expire_interval_ms = cfg.get_int("transaction.remove.expired.transaction.cleanup.interval.ms")
        self._tasks: list[asyncio.Task] = []
        self._stopped = False
        self._last_expire_ms = clock.now_ms()
        self._completing: set[str] = set()
        self._writing: set[str] = set()  # ids whose state write awaits replication

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        meta = self.broker.topics.get(TXN_TOPIC)
        if meta is not None:
            owned = [i for i in range(meta.partitions) if self._owns(i)]
            self.loading.update(owned)
            self._tasks.append(loop.create_task(self._load_partitions(owned)))
        self._tasks.append(loop.create_task(self._periodic()))

    async def stop(self) -> None:
        self._stopped = True
        await cancel_tasks(self._tasks)

    # -- placement ---------------------------------------------------------------------------
    def num_partitions(self) -> int:
        meta = self.broker.topics.get(TXN_TOPIC)
        return meta.partitions if meta is not None else self.broker.config.get_int(
            "transaction.state.log.num.partitions")

    def partition_for(self, transactional_id: str) -> int:
        return (java_string_hash(transactional_id) & 0x7FFFFFFF) % self.num_partitions()

    def ensure_topic(self) -> None:
        if self.broker.topics.get(TXN_TOPIC) is None:
            cfg = self.broker.config
            try:
                self.broker.create_topic(TXN_TOPIC, cfg.get_int("transaction.state.log.num.partitions"), {
                    "cleanup.policy": "compact", "min.insync.replicas": cfg.get("transaction.state.log.min.isr"),
                    "segment.bytes": cfg.get("transaction.state.log.segment.bytes")})
            except E.TopicAlreadyExistsError:
                self.broker.refresh_topics()

    def _partition(self, index: int) -> Any:
        return self.broker.get_partition(TXN_TOPIC, index)

    def _owns(self, index: int) -> bool:
        part = self._partition(index)
        return part is not None and self.broker.owns(part)

    def status(self, transactional_id: str | None) -> int:
        """NONE, or why this process cannot coordinate the id now."""
        if not transactional_id:
            return EC.INVALID_REQUEST
        if self._stopped:
            return EC.COORDINATOR_NOT_AVAILABLE
        self.ensure_topic()
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return EC.COORDINATOR_LOAD_IN_PROGRESS
        if not self._owns(p):
            return EC.NOT_COORDINATOR
        return 0

    # -- persistence -------------------------------------------------------------------------
    async def _persist(self, m: TxnMetadata, *, tombstone: bool = False) -> None:
        """Write the id's state; TxnError(COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR) if refused."""
        part = self._partition(self.partition_for(m.transactional_id))
        if part is None:
            raise TxnError(EC.COORDINATOR_NOT_AVAILABLE)
        builder = BatchBuilder()
        builder.append(clock.now_ms(), txn_key(m.transactional_id), None if tombstone else txn_value(m))
        try:
            res = self.broker.append(part, bytearray(builder.build()))
        except (E.NotLeaderOrFollowerError, E.KafkaStorageError) as exc:
            log.warning("transaction %s: writing its state failed: %s", m.transactional_id, exc)
            raise TxnError(EC.NOT_COORDINATOR) from exc
        except E.KafkaError as exc:
            log.warning("transaction %s: writing its state failed: %s", m.transactional_id, exc)
            raise TxnError(EC.COORDINATOR_NOT_AVAILABLE) from exc
        await self._replicated(part, res.last_offset + 1)

    async def _replicated(self, part: Any, end_offset: int) -> None:
        """Waits until a state write up to `end_offset` is safe (cluster mode: the ISR has it)."""

    async def _transition(self, m: TxnMetadata, **changes: Any) -> None:
        """Apply `changes` if they can be written; unchanged metadata on failure."""
        new = TxnMetadata(**{f: getattr(m, f) for f in TxnMetadata.__slots__})
        new.partitions = set(m.partitions)
        for k, v in changes.items():
            setattr(new, k, v)
        new.update_ms = clock.now_ms()
        if m.transactional_id in self._writing:  # another request's write is in flight (Kafka's pendingState)
            raise TxnError(EC.CONCURRENT_TRANSACTIONS)
        self._writing.add(m.transactional_id)
        try:
            await self._persist(new)
        finally:
            self._writing.discard(m.transactional_id)
        for f in TxnMetadata.__slots__:
            setattr(m, f, getattr(new, f))

    # -- validation --------------------------------------------------------------------------
    def _get(self, transactional_id: str, producer_id: int, producer_epoch: int, fenced_code: int) -> TxnMetadata:
        err = self.status(transactional_id)
        if err:
            raise TxnError(err)
        m = self.txns.get(transactional_id)
        if m is None:
            raise TxnError(EC.INVALID_PRODUCER_ID_MAPPING)
        if m.producer_id != producer_id:
            raise TxnError(EC.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != m.producer_epoch:
            raise TxnError(fenced_code)
        return m

    # -- InitProducerId ----------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int,
                         fenced_code: int) -> tuple[int, int]:
        """(producer id, epoch) for the id; raises TxnError."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise TxnError(EC.INVALID_TRANSACTION_TIMEOUT)
        err = self.status(transactional_id)
        if err:
            raise TxnError(err)
        m = self.txns.get(transactional_id)
        if m is None:
            pid = self._new_producer_id()
            m = TxnMetadata(transactional_id, pid, -1, timeout_ms)
            await self._transition(m, producer_epoch=0, state=EMPTY, partitions=set(), start_ms=-1)
            self.txns[transactional_id] = m
            return m.producer_id, m.producer_epoch
        if producer_id >= 0:  # KIP-360: the client names the id and epoch it has
            retry = (producer_id == m.last_producer_id and producer_epoch == m.last_producer_epoch)
            if retry and m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                return m.producer_id, m.producer_epoch  # our answer to its bump was lost
            if producer_id != m.producer_id:
                raise TxnError(fenced_code)
            if producer_epoch != m.producer_epoch:
                raise TxnError(fenced_code)
        if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
            await self._complete(m)  # markers still to write: try now
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TxnError(EC.CONCURRENT_TRANSACTIONS)
        if m.state == ONGOING:
            # Kafka: bump the epoch (fencing the old producer), abort with it, then bump again.
            await self._abort_with_bump(m)
            if m.state != COMPLETE_ABORT:
                raise TxnError(EC.CONCURRENT_TRANSACTIONS)
        prev = (m.producer_id, m.producer_epoch)
        if m.producer_epoch + 1 >= MAX_EPOCH:
            await self._transition(m, producer_id=self._new_producer_id(), producer_epoch=0, state=EMPTY,
                                   partitions=set(), start_ms=-1, timeout_ms=timeout_ms)
        else:
            await self._transition(m, producer_epoch=m.producer_epoch + 1, state=EMPTY, partitions=set(),
                                   start_ms=-1, timeout_ms=timeout_ms)
        m.last_producer_id, m.last_producer_epoch = prev
        return m.producer_id, m.producer_epoch

    def _new_producer_id(self) -> int:
        try:
            return self.broker.producer_ids.next_id()
        except E.KafkaStorageError as exc:
            raise TxnError(EC.COORDINATOR_NOT_AVAILABLE) from exc

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], fenced_code: int, *, verify_only: bool = False) -> None:
        m = self._get(transactional_id, producer_id, producer_epoch, fenced_code)
        if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise TxnError(EC.CONCURRENT_TRANSACTIONS)
        if verify_only:
            if m.state != ONGOING or not set(partitions) <= m.partitions:
                raise TxnError(EC.INVALID_TXN_STATE)
            return
        if m.state == ONGOING and set(partitions) <= m.partitions:
            return
        start = m.start_ms if m.state == ONGOING else clock.now_ms()
        await self._transition(m, state=ONGOING, partitions=m.partitions | set(partitions), start_ms=start)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, self.broker.group_coordinator.partition_for(group_id)

    # -- EndTxn ------------------------------------------------------------------------------
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                fenced_code: int) -> None:
        err = self.status(transactional_id)
        if err:
            raise TxnError(err)
        m = self.txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            raise TxnError(EC.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != m.producer_epoch:
            # A retry of the abort that timed the transaction out keeps its old epoch: still fenced.
            raise TxnError(fenced_code)
        if m.state == ONGOING:
            await self._transition(m, state=PREPARE_COMMIT if commit else PREPARE_ABORT)
            # The decision is written: answered once every marker was tried once (Kafka answers
            # at once and sends the markers after); markers that failed are retried in the
            # background, the producer meanwhile gets CONCURRENT_TRANSACTIONS.
            await self._complete(m, retry=False)
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT) and not self._stopped:
                self._tasks = [t for t in self._tasks if not t.done()]
                self._tasks.append(asyncio.get_running_loop().create_task(self._complete(m)))
            return
        if m.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return  # a retry of what is done
        if m.state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
            await self._complete(m)
            if m.state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
                raise TxnError(EC.CONCURRENT_TRANSACTIONS)
            return
        raise TxnError(EC.INVALID_TXN_STATE)

    async def _abort_with_bump(self, m: TxnMetadata) -> None:
        """Timeout or InitProducerId: abort the ongoing transaction with epoch + 1, so the old
        producer's later writes are refused (as Kafka's PrepareEpochFence)."""
        if m.producer_epoch + 1 >= MAX_EPOCH:
            await self._transition(m, state=PREPARE_ABORT)
        else:
            await self._transition(m, state=PREPARE_ABORT, producer_epoch=m.producer_epoch + 1)
        await self._complete(m)

    async def _complete(self, m: TxnMetadata, *, retry: bool = True) -> None:
        """Write the markers of a Prepare* transaction, then its Complete* state. Partitions
        whose marker failed stay in the transaction (retried by the periodic task). `retry`:
        a failed marker may be tried again before giving up (cluster mode)."""
        if m.transactional_id in self._completing:
            return
        self._completing.add(m.transactional_id)
        try:
            await self._complete_once(m, retry)
        finally:
            self._completing.discard(m.transactional_id)

    async def _complete_once(self, m: TxnMetadata, retry: bool) -> None:
        commit = m.state == PREPARE_COMMIT
        failed = await self._write_markers(m, commit, retry)
        if failed:
            if failed != m.partitions:
                try:
                    await self._transition(m, partitions=failed)
                except TxnError:
                    pass
            return
        try:
            await self._transition(m, state=COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=set())
        except TxnError:
            pass  # stays Prepare*: markers are idempotent, the periodic task writes it again

    async def _write_markers(self, m: TxnMetadata, commit: bool, retry: bool) -> set[tuple[str, int]]:
        """The transaction's markers, one partition after the other; the partitions that failed
        (each tried once: in this process a retry would fail the same way)."""
        failed = set()
        for tp in sorted(m.partitions):
            if not await self.write_marker(tp, m.producer_id, m.producer_epoch, commit):
                failed.add(tp)
        return failed

    async def write_marker(self, tp: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool) -> bool:
        """Append a COMMIT/ABORT marker to the partition, here or through its owner worker
        (WriteTxnMarkers over the forwarding path); a deleted partition needs none."""
        part = self.broker.get_partition(*tp)
        if part is None:
            return True
        try:
            if self.broker.owns(part):
                code = append_marker(self.broker, part, producer_id, producer_epoch, commit, self._coordinator_epoch())
            else:
                code = await self.broker.placement.forward_marker(part, producer_id, producer_epoch, commit,
                                                        self._coordinator_epoch())
        except Exception as exc:  # the owner cannot be reached now: retried by the periodic task
            log.warning("transaction marker for %s-%d (producer %d) failed: %s", tp[0], tp[1], producer_id, exc)
            return False
        if code:
            log.warning("transaction marker for %s-%d (producer %d) failed: %s", tp[0], tp[1], producer_id,
                        EC(code).name)
        return code == 0

    def _coordinator_epoch(self) -> int:
        return 0

    # -- describe / list ---------------------------------------------------------------------
    def describe(self, transactional_id: str) -> tuple[int, TxnMetadata | None]:
        err = self.status(transactional_id)
        if err:
            return err, None
        m = self.txns.get(transactional_id)
        return (0, m) if m is not None else (EC.TRANSACTIONAL_ID_NOT_FOUND, None)

    def list(self) -> list[TxnMetadata]:
        return [m for m in self.txns.values() if m.state != DEAD]

    # -- timers ------------------------------------------------------------------------------
    async def _periodic(self) -> None:
        while True:
            await clock.sleep(self.abort_interval_ms)
            try:
                await self.tick(clock.now_ms())
            except Exception:
                log.exception("transaction timeouts failed")

    async def tick(self, now: int) -> None:
        """Abort timed-out transactions, finish pending markers, expire idle ids."""
        for m in list(self.txns.values()):
            if m.state == ONGOING and m.start_ms >= 0 and now - m.start_ms > m.timeout_ms:
                log.info("transaction %s (producer %d) timed out after %d ms: aborting", m.transactional_id,
                         m.producer_id, now - m.start_ms)
                try:
                    await self._abort_with_bump(m)
                except TxnError:
                    pass
            elif m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                await self._complete(m)
        if now - self._last_expire_ms >= min(self.expire_interval_ms, self.expiration_ms):
            self._last_expire_ms = now
            for m in list(self.txns.values()):
                if m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and now - m.update_ms > self.expiration_ms:
                    try:
                        await self._persist(m, tombstone=True)
                    except TxnError:
                        continue
                    del self.txns[m.transactional_id]

    # -- loading -----------------------------------------------------------------------------
    def load_partition(self, index: int) -> None:
        """This broker now leads `__transaction_state` partition `index` (the replica manager
        says so): load its ids; an empty partition (a new topic's) has none, and serves at once."""
        if self._stopped or nothing_to_load(self._partition(index)):
            return
        self.loading.add(index)
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.get_running_loop().create_task(self._load_partitions([index])))

    def unload_partition(self, index: int) -> None:
        """Leadership moved away: forget its ids (NOT_COORDINATOR from now on)."""
        self.loading.discard(index)
        self._unloads[index] = self._unloads.get(index, 0) + 1
        self._forget(index)

    def _forget(self, index: int) -> None:
        gone = [tid for tid in self.txns if self.partition_for(tid) == index]
        for tid in gone:
            del self.txns[tid]
        if gone:
            log.info("unloaded %d transactional ids of %s-%d", len(gone), TXN_TOPIC, index)

    async def _load_partitions(self, partitions: list[int]) -> None:
        await load_each(partitions, self._load_partition, self.loading, TXN_TOPIC)
        for m in list(self.txns.values()):  # decisions whose markers were not all written
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                await self._complete(m)

    async def _load_partition(self, index: int) -> None:
        unloads = self._unloads.get(index, 0)
        await self._read_partition(index)
        if self._unloads.get(index, 0) != unloads:  # leadership went while it was read
            self._forget(index)

    async def _read_partition(self, index: int) -> None:
        part = self._partition(index)
        if part is None:
            return
        found: dict[str, TxnMetadata | None] = {}
        async for header, records in read_partition(part):
            if header.is_control:
                continue
            for rec in records:
                decoded = decode_txn_record(rec.key, rec.value)
                if decoded is not None:
                    found[decoded[0]] = decoded[1]
        for tid, m in found.items():
            if m is None:
                self.txns.pop(tid, None)
            else:
                self.txns[tid] = m
        log.info("loaded %d transactional ids from %s-%d", sum(1 for m in found.values() if m), TXN_TOPIC, index)


def append_marker(broker: Any, part: Any, producer_id: int, producer_epoch: int, commit: bool,
                  coordinator_epoch: int) -> int:
    """The marker writer (in the partition's owner): appends the control batch and, on a
    `__consumer_offsets` partition, applies or drops the transaction's offsets. An error code."""
    marker = txn_index.control_batch(producer_id, producer_epoch, txn_index.COMMIT if commit else txn_index.ABORT,
                                     coordinator_epoch, clock.now_ms())
    try:
        broker.append(part, marker, allow_control=True)
    except E.InvalidProducerEpochError:
        return 0  # a newer epoch wrote there already (and ended this transaction with its marker)
    except E.KafkaError as exc:
        return exc.code
    except OSError:
        return EC.KAFKA_STORAGE_ERROR
    if part.topic == OFFSETS_TOPIC and broker.group_coordinator is not None:
        broker.group_coordinator.complete_txn(part.index, producer_id, commit)
    return 0


MARKER_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms default, which its marker appends wait


async def write_marker(broker: Any, part: Any, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, timeout_s: float = MARKER_TIMEOUT_S) -> int:
    """A marker for a partition this broker leads (WriteTxnMarkers arriving here, or the
    coordinator's own): appended by the owner (another worker's through the forwarding path),
    answered once the ISR has it, as Kafka appends markers with acks=all (a lone replica: at
    once). An error code."""
    if not part.is_leader:
        return EC.NOT_LEADER_OR_FOLLOWER
    code = broker.replicas.isr_error(part)
    if code:
        return code
    if broker.owns(part):
        code = append_marker(broker, part, producer_id, producer_epoch, commit, coordinator_epoch)
    else:
        code = await broker.placement.forward_marker(part, producer_id, producer_epoch, commit, coordinator_epoch)
    if code:
        return code
    code = await part.wait_for_hw(part.log.state.log_end_offset, timeout_s)
    if code == 0 and broker.replicas.isr_error(part):
        code = EC.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    return code


def fenced_code(version: int, since: int) -> int:
    """PRODUCER_FENCED for request versions that know it (KIP-588), else INVALID_PRODUCER_EPOCH."""
    return EC.PRODUCER_FENCED if version >= since else EC.INVALID_PRODUCER_EPOCH


def no_coordinator_code() -> int:
    """The answer where no transaction coordinator runs (a broker without a group coordinator)."""
    return EC.COORDINATOR_NOT_AVAILABLE
