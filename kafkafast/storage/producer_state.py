"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, trimmed)."""
from __future__ import annotations

import os
import struct
import zlib
from typing import NamedTuple

from kafkafast.protocol.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from kafkafast.records import BatchHeader
from kafkafast.records.model import ATTR_CONTROL, ATTR_TRANSACTIONAL
from kafkafast.storage.checkpoint import write_file_atomically

MAX_BATCHES_PER_PRODUCER = 5  # Kafka keeps the metadata of the last 5 batches per producer
NO_PRODUCER_EPOCH = -1
NO_COORDINATOR_EPOCH = -1
SNAPSHOT_SUFFIX = ".snapshot"

_FILE_HEADER = struct.Struct(">4sHII")  # magic, version, crc32, producer count
_PRODUCER = struct.Struct(">qhqB")      # producer id, epoch, last timestamp, batch count
_TXN = struct.Struct(">q")              # v2: first offset of the ongoing transaction, -1 if none
_COORD = struct.Struct(">i")            # v3: coordinator epoch of the last marker, -1 if none
_BATCH = struct.Struct(">iiqqq")        # first seq, last seq, first offset, last offset, timestamp
_MAGIC = b"KFPS"
_VERSION = 3  # 2 adds the ongoing transaction's first offset, 3 the coordinator epoch; 1 and 2 are still read


class BatchMetadata(NamedTuple):
    """What is kept of one appended batch to answer a retry of it (a tuple: one is made for
    every batch of an idempotent producer, leader or follower)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "txn_first_offset", "coordinator_epoch")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: list[BatchMetadata] = []
        self.last_timestamp = -1
        self.txn_first_offset = -1  # first offset of its ongoing transaction, -1 when none
        self.coordinator_epoch = NO_COORDINATOR_EPOCH  # of the last marker written for it

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == 0x7FFFFFFF and next_seq == 0)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """Per producer id: epoch, the last 5 batches' sequence and offset ranges, last timestamp.

    Checks on a leader append (`check`), as Kafka's ProducerStateManager does:

    * producer id -1: no checks (not an idempotent producer);
    * epoch older than the producer's -> InvalidProducerEpochError;
    * same epoch, first and last sequence equal to one of the last 5 batches -> a duplicate:
      nothing is appended and the original offsets are returned;
    * newer epoch: base sequence must be 0, else OutOfOrderSequenceNumberError;
    * same epoch: base sequence must be last sequence + 1 (2^31-1 wraps to 0), else
      OutOfOrderSequenceNumberError;
    * unknown producer id with base sequence != 0: UnknownProducerIdError, unless its state
      may have been lost with deleted segments (the log start offset moved past 0, or a
      snapshot was missing): then any sequence is accepted, as Kafka >= 2.5 does (KIP-360).
      Producer state is only dropped by `remove_expired` (producer.id.expiration.ms).

    Control batches and batches without a sequence only update the epoch. A transactional
    batch opens the producer's transaction (its first offset is kept until the marker:
    `complete_txn`); the smallest such offset bounds the last stable offset. Every marker
    (leader append, replicated, replayed) leaves its coordinator epoch with the producer; a
    leader refuses a marker from an older coordinator epoch (`check_marker`:
    TransactionCoordinatorFencedError), so a deposed coordinator cannot end a transaction.

    Snapshot file `<20-digit offset>.snapshot` in the partition directory: the state after
    every batch below that offset. Written at roll and at clean close (tmp + fsync + rename).
    Layout, all big-endian::

        magic "KFPS", uint16 version (3; 1 and 2 are read too), uint32 CRC-32 (zlib) of everything
        after the 12-byte header, uint32 producer count, then per producer:
          int64 producer id, int16 epoch, int64 last timestamp, uint8 n (<= 5),
            int64 first offset of its ongoing transaction (-1: none; version >= 2),
            int32 coordinator epoch of its last marker (-1: none; version 3), then n x
            int32 first seq, int32 last seq, int64 first offset, int64 last offset,
            int64 timestamp
    """

    __slots__ = ("dir", "producers", "_open")

    def __init__(self, dir: str) -> None:
        self.dir = dir
        self.producers: dict[int, ProducerEntry] = {}
        self._open: set[int] = set()  # producers with an open transaction (each append asks for the LSO)

    # -- leader appends ----------------------------------------------------------------

    def check(self, headers: list[BatchHeader], *, accept_unknown_sequence: bool) -> BatchMetadata | None:
        """Validate an append; the original batch if it is a duplicate; raises on a violation."""
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) within this append
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            entry = self.producers.get(pid)
            if pid in pending:
                cur_epoch, cur_last = pending[pid]
                known = True
            elif entry is not None:
                cur_epoch, cur_last = entry.epoch, entry.last_seq
                known = True
                if h.producer_epoch == entry.epoch and h.base_sequence >= 0 and not h.is_control:
                    dup = entry.find_duplicate(h.base_sequence, h.last_sequence)
                    if dup is not None:
                        return dup
            else:
                cur_epoch, cur_last, known = NO_PRODUCER_EPOCH, -1, False
            if h.producer_epoch < cur_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {h.producer_epoch} is older than the current epoch {cur_epoch}")
            if h.is_control or h.base_sequence < 0:
                pending[pid] = (h.producer_epoch, cur_last if h.producer_epoch == cur_epoch else -1)
                continue
            if not known:
                if h.base_sequence != 0 and not accept_unknown_sequence:
                    raise UnknownProducerIdError(
                        f"unknown producer {pid} sent sequence {h.base_sequence}; expected 0")
            elif h.producer_epoch != cur_epoch:
                if h.base_sequence != 0:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid}: new epoch {h.producer_epoch} must start at sequence 0, "
                        f"got {h.base_sequence}")
            elif not _in_sequence(cur_last, h.base_sequence):
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} epoch {h.producer_epoch}: expected sequence {cur_last + 1}, "
                    f"got {h.base_sequence}")
            pending[pid] = (h.producer_epoch, h.last_sequence)
        return None

    def update(self, h: BatchHeader, timestamp: int) -> None:
        """Record an appended batch (`h` carries its assigned offsets); no checks."""
        if h.producer_id >= 0:
            self.update_batch(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.base_offset,
                              h.last_offset, timestamp, h.max_timestamp, h.attributes)

    def update_batch(self, pid: int, producer_epoch: int, first_seq: int, last_seq: int, base_offset: int,
                     last_offset: int, timestamp: int, max_timestamp: int, attributes: int) -> None:
        """`update` from the header's fields (a replica follower has them from
        `scan_follower_batches`, without a header object); `pid` >= 0."""
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, producer_epoch)
        elif producer_epoch != entry.epoch:
            entry.epoch = producer_epoch
            entry.batches.clear()
        data = not attributes & ATTR_CONTROL
        if data and attributes & ATTR_TRANSACTIONAL and entry.txn_first_offset < 0:
            entry.txn_first_offset = base_offset
            self._open.add(pid)
        if data and first_seq >= 0:
            batches = entry.batches
            batches.append(BatchMetadata(first_seq, last_seq, base_offset, last_offset, timestamp))
            if len(batches) > MAX_BATCHES_PER_PRODUCER:
                del batches[0]
        if max_timestamp > entry.last_timestamp:
            entry.last_timestamp = max_timestamp

    # -- transactions ------------------------------------------------------------------

    def check_marker(self, producer_id: int, coordinator_epoch: int) -> None:
        """A leader's check of a marker before it is appended: refused when a marker from a
        newer coordinator epoch was written for the producer already."""
        entry = self.producers.get(producer_id)
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {producer_id}: marker from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def complete_txn(self, producer_id: int, coordinator_epoch: int) -> int:
        """A marker from `coordinator_epoch` ended the producer's transaction: its first
        offset (-1 if none was open)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return -1
        entry.coordinator_epoch = coordinator_epoch  # as the log says, also when lower (replication)
        first, entry.txn_first_offset = entry.txn_first_offset, -1
        self._open.discard(producer_id)
        return first

    def first_unstable_offset(self) -> int:
        """The smallest first offset of an ongoing transaction, -1 when none is open."""
        if not self._open:
            return -1
        return min(self.producers[pid].txn_first_offset for pid in self._open)

    def ongoing(self) -> dict[int, int]:
        """producer id -> first offset of each open transaction."""
        return {pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def remove_expired(self, now_ms: int, max_age_ms: int) -> int:
        """Forget producers idle for longer than `max_age_ms` (producer.id.expiration.ms);
        a producer with an open transaction is kept (as Kafka does)."""
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp > max_age_ms and e.txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
        self._open.clear()

    # -- snapshots ---------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if len(stem) == 20 and stem.isdigit():
                    out.append(int(stem))
        return sorted(out)

    def write_snapshot(self, offset: int, keep: int = 3, *, fsync: bool = True) -> str:
        body = bytearray()
        for entry in self.producers.values():
            body += _PRODUCER.pack(entry.producer_id, entry.epoch, entry.last_timestamp, len(entry.batches))
            body += _TXN.pack(entry.txn_first_offset)
            body += _COORD.pack(entry.coordinator_epoch)
            for b in entry.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
        data = _FILE_HEADER.pack(_MAGIC, _VERSION, zlib.crc32(body), len(self.producers)) + body
        path = os.path.join(self.dir, snapshot_name(offset))
        write_file_atomically(path, data, tmp=path + ".tmp", fsync=fsync)
        for old in self.snapshot_offsets()[:-keep]:
            self._remove_snapshot(old)
        return path

    def delete_snapshots_above(self, offset: int) -> None:
        for o in self.snapshot_offsets():
            if o > offset:
                self._remove_snapshot(o)

    def _remove_snapshot(self, offset: int) -> None:
        try:
            os.unlink(os.path.join(self.dir, snapshot_name(offset)))
        except FileNotFoundError:
            pass

    def load_latest(self, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below `max_offset`; its offset, or None
        (state cleared). Snapshots above `max_offset` and unreadable ones are deleted."""
        self.producers.clear()
        self._open.clear()
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                os.unlink(os.path.join(self.dir, name))
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                self._remove_snapshot(offset)
                continue
            if self._read(os.path.join(self.dir, snapshot_name(offset))):
                return offset
            self._remove_snapshot(offset)
        return None

    def _read(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return False
        if len(data) < _FILE_HEADER.size:
            return False
        magic, version, crc, count = _FILE_HEADER.unpack_from(data, 0)
        body = memoryview(data)[_FILE_HEADER.size:]
        if magic != _MAGIC or version not in (1, 2, _VERSION) or zlib.crc32(body) != crc:
            return False
        producers: dict[int, ProducerEntry] = {}
        pos = 0
        try:
            for _ in range(count):
                pid, epoch, last_ts, n = _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
                entry = ProducerEntry(pid, epoch)
                entry.last_timestamp = last_ts
                if version >= 2:
                    entry.txn_first_offset = _TXN.unpack_from(body, pos)[0]
                    pos += _TXN.size
                if version >= 3:
                    entry.coordinator_epoch = _COORD.unpack_from(body, pos)[0]
                    pos += _COORD.size
                for _ in range(min(n, MAX_BATCHES_PER_PRODUCER)):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                    pos += _BATCH.size
                producers[pid] = entry
        except struct.error:
            return False
        if pos != len(body):
            return False
        self.producers = producers
        self._open = {pid for pid, e in producers.items() if e.txn_first_offset >= 0}
        return True
