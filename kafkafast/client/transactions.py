"""The producer's side of transactions (KIP-98): the transaction coordinator's requests.

`TransactionManager` is owned by an `AIOProducer` with a `transactional_id`. Its states::

    init_transactions()  -> ready      (InitProducerId: id and epoch; an earlier instance is fenced)
    begin_transaction()  -> in a transaction
      sending to a new partition: the sender holds its batches until AddPartitionsToTxn answered
      send_offsets_to_transaction(): AddOffsetsToTxn to the coordinator, TxnOffsetCommit to the group's
    commit_transaction() / abort_transaction(): flush, then EndTxn -> ready

Retriable coordinator errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) are retried with backoff within the
request timeout; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH / TRANSACTIONAL_ID_AUTHORIZATION_FAILED
are fatal (the producer can only be closed); a failed send makes the transaction abortable
only (commit raises, abort works).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import ErrorCode, KafkaError, for_code



def _codes(*names: str) -> set[int]:
    """Error codes by Kafka name (ErrorCode is built from the error table at import)."""
    return {int(getattr(ErrorCode, name)) for name in names}


_RETRY = _codes("COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "CONCURRENT_TRANSACTIONS")
_FATAL = _codes("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                "INVALID_PRODUCER_ID_MAPPING", "INVALID_TRANSACTION_TIMEOUT")


class TransactionManager:
    def __init__(self, producer: Any, transactional_id: str, timeout_ms: int) -> None:
        self.producer = producer
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.in_transaction = False
        self.added: set[Any] = set()       # partitions the coordinator has in the transaction
        self.wanted: set[Any] = set()      # partitions with records, not added yet
        self._adding: asyncio.Task | None = None
        self.offsets_added = False
        self.fatal: BaseException | None = None
        self.abortable: BaseException | None = None

    # -- coordinator requests ----------------------------------------------------------
    async def _call(self, make_request: Any, key: str | None = None, key_type: int = 1) -> Any:
        """Sends to the coordinator of `key` (the transactional id by default), retrying what is
        retriable; the response (error code 0) or raises (fatal errors stay the producer's)."""
        try:
            return await call_coordinator(self.producer.cluster, make_request, key or self.transactional_id, key_type,
                                          self.transactional_id, self.producer.request_timeout_ms,
                                          self.producer.retry_backoff_ms)
        except KafkaError as exc:
            if exc.code in _FATAL:
                self.fatal = exc
            raise

    def _check(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    async def init(self) -> None:
        acc = self.producer.acc
        resp = await self._call(lambda: gen.InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms,
            producer_id=-1, producer_epoch=-1))
        acc.producer_id, acc.producer_epoch = resp.producer_id, resp.producer_epoch
        acc.states.clear()  # a new epoch starts its sequences at 0

    def begin(self) -> None:
        self._check()
        if self.in_transaction:
            raise KafkaError("a transaction is already open")
        self.in_transaction = True
        self.added.clear()
        self.wanted.clear()
        self.offsets_added = False
        self.abortable = None

    # -- partitions --------------------------------------------------------------------
    def on_append(self, tp: Any) -> None:
        """A record for `tp` was buffered (any thread): the sender adds it before sending."""
        if tp not in self.added:
            self.wanted.add(tp)

    def may_send(self, tp: Any) -> bool:
        """Whether the sender may send `tp`'s batches now; starts adding it when not."""
        if tp in self.added:
            return True
        self.wanted.add(tp)
        if self._adding is None or self._adding.done():
            self._adding = asyncio.get_running_loop().create_task(self._add_wanted())
        return False

    async def _add_wanted(self) -> None:
        tps = sorted(self.wanted - self.added)
        if not tps:
            return
        acc = self.producer.acc
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        T = gen.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        try:
            await self._call(lambda: gen.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=acc.producer_id,
                v3_and_below_producer_epoch=acc.producer_epoch,
                v3_and_below_topics=[T(name=t, partitions=ps) for t, ps in topics.items()]))
        except KafkaError as exc:
            self.abortable = exc
            for tp in tps:  # fail what waits for these partitions
                self.producer.fail_partition(tp, exc)
            return
        self.added.update(tps)
        self.wanted.difference_update(tps)
        self.producer.wakeup()

    # -- offsets -----------------------------------------------------------------------
    async def send_offsets(self, offsets: dict[Any, int], group_id: str) -> None:
        self._check()
        if not self.in_transaction:
            raise KafkaError("send_offsets_to_transaction() outside a transaction")
        acc = self.producer.acc
        if not self.offsets_added:
            await self._call(lambda: gen.AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id, producer_id=acc.producer_id,
                producer_epoch=acc.producer_epoch, group_id=group_id))
            self.offsets_added = True
        by_topic: dict[str, list[Any]] = {}
        P = gen.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition
        for (topic, partition), offset in sorted(offsets.items()):
            off = getattr(offset, "offset", offset)
            by_topic.setdefault(topic, []).append(P(partition_index=partition, committed_offset=off,
                                                    committed_leader_epoch=-1, committed_metadata=""))
        T = gen.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        await self._call(lambda: gen.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group_id, producer_id=acc.producer_id,
            producer_epoch=acc.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()]), key=group_id, key_type=0)

    # -- ending ------------------------------------------------------------------------
    async def prepare(self) -> tuple[int, int]:
        """Flushes the open transaction and leaves it open, every partition added: (producer
        id, epoch), with which `end_prepared_transaction` (any client, any process) commits
        or aborts it. Raises when the transaction could not commit (a failed send)."""
        self._check()
        if not self.in_transaction:
            raise KafkaError("no transaction is open")
        await self.producer.flush()
        failed = self.producer.take_failures()
        if self.abortable is not None or failed:
            raise KafkaError(f"the transaction cannot commit: {self.abortable or failed[0]}")
        while self._adding is not None and not self._adding.done() or self.wanted - self.added:
            if self._adding is None or self._adding.done():
                self._adding = asyncio.get_running_loop().create_task(self._add_wanted())
            await self._adding
            self._check()
            if self.abortable is not None:
                raise KafkaError(f"the transaction cannot commit: {self.abortable}")
        acc = self.producer.acc
        return acc.producer_id, acc.producer_epoch

    async def end(self, commit: bool) -> None:
        self._check()
        if not self.in_transaction:
            raise KafkaError("no transaction is open")
        try:
            await self.producer.flush()
        except Exception as exc:
            self.abortable = self.abortable or exc
        failed = self.producer.take_failures()
        if commit and (self.abortable is not None or failed):
            raise KafkaError(f"the transaction cannot commit, abort it: {self.abortable or failed[0]}")
        if self._adding is not None and not self._adding.done():
            await self._adding
        if self.added or self.offsets_added:
            acc = self.producer.acc
            await self._call(lambda: gen.EndTxnRequest(
                transactional_id=self.transactional_id, producer_id=acc.producer_id,
                producer_epoch=acc.producer_epoch, committed=commit))
        self.in_transaction = False
        self.added.clear()
        self.wanted.clear()
        self.abortable = None


async def call_coordinator(cluster: Any, make_request: Any, key: str, key_type: int, transactional_id: str,
                           timeout_ms: int, backoff_ms: int) -> Any:
    """Sends `make_request()` to the coordinator of `key` (key_type 1: a transactional id,
    0: a group), retrying retriable errors with backoff until `timeout_ms`; the response
    (error code 0), else the typed error."""
    deadline = time.monotonic() + timeout_ms / 1000.0
    backoff = backoff_ms / 1000.0
    while True:
        node = await cluster.find_coordinator(key, key_type)
        resp = await cluster.send(node, make_request())
        code = _error_of(resp)
        if code == 0:
            return resp
        err = for_code(code)
        if code in _RETRY and time.monotonic() <= deadline:
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            continue
        raise err(f"transactional id {transactional_id!r}: {err.name}")


async def end_prepared_transaction(cluster: Any, transactional_id: str, producer_id: int, producer_epoch: int,
                                   commit: bool, *, timeout_ms: int = 30000, backoff_ms: int = 100) -> None:
    """Commits (or aborts) a transaction that a producer flushed and left open
    (`AIOProducer.prepare_transaction`), from any client: the coordinator knows a
    transaction by its transactional id, producer id and epoch, not by the connection that
    began it (two-phase commit over Kafka transactions, as Flink's exactly-once Kafka sink
    does). PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: the transactional id was taken over by
    a newer instance, or the coordinator aborted the transaction on its timeout; a commit
    repeated after a lost answer succeeds again."""
    await call_coordinator(cluster, lambda: gen.EndTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        committed=commit), transactional_id, 1, transactional_id, timeout_ms, backoff_ms)


def _error_of(resp: Any) -> int:
    code = getattr(resp, "error_code", 0)
    if code:
        return code
    for t in getattr(resp, "results_by_topic_v3_and_below", None) or []:  # AddPartitionsToTxn
        for p in t.results_by_partition:
            if p.partition_error_code:
                return p.partition_error_code
    for t in getattr(resp, "topics", None) or []:  # TxnOffsetCommit
        for p in getattr(t, "partitions", []):
            if getattr(p, "error_code", 0):
                return p.error_code
    return 0
