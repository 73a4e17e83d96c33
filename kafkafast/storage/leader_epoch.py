"""Leader-epoch cache of one partition: which leader epoch started at which offset."""
from __future__ import annotations

import bisect
import logging

from kafkafast.protocol.errors import KafkaStorageError
from kafkafast.storage.checkpoint import EpochCheckpointFile, is_out_of_space

logger = logging.getLogger("kafkafast.storage")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) pairs, both strictly increasing, persisted on every change.

    File `leader-epoch-checkpoint` in the partition directory (Kafka's format)::

        0                          version
        <count>
        <epoch> <start offset>     one line per epoch, oldest first

    Used by OffsetForLeaderEpoch (`end_offset_for`) and follower truncation.
    """

    __slots__ = ("_file", "_epochs", "_offsets", "unwritten")

    def __init__(self, path: str) -> None:
        self._file = EpochCheckpointFile(path)
        self.unwritten = False
        """The file lags the cache: a full disk refused the last write (retried at the
        next change and at close; the log's batches carry their epochs meanwhile)."""
        try:
            entries = self._file.read()
        except KafkaStorageError:
            entries = []  # a torn checkpoint: start over; the log's batches carry their epochs
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in entries:
            if (self._epochs and (epoch <= self._epochs[-1] or offset < self._offsets[-1])) or epoch < 0 or offset < 0:
                continue
            self._epochs.append(epoch)
            self._offsets.append(offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` started at `start_offset` (Kafka's assign: conflicting later
        entries -- epoch >= `epoch` or start offset >= `start_offset` -- are removed)."""
        if epoch < 0 or start_offset < 0:
            return
        if self._epochs and self._epochs[-1] == epoch:
            return
        if self._epochs and epoch < self._epochs[-1] and start_offset >= self._offsets[-1]:
            return  # an older epoch after a newer one: ignore, as Kafka does
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._flush()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's OffsetForLeaderEpoch answers it: the end offset is the
        start offset of the first epoch after `requested_epoch` (the log end for the latest),
        the epoch is the largest known epoch <= `requested_epoch`."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        n = len(self._offsets)
        while self._offsets and self._offsets[-1] >= end_offset:
            self._epochs.pop()
            self._offsets.pop()
        if len(self._offsets) != n:
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop epochs wholly below it, and move the
        start of the epoch containing it up to `start_offset`."""
        i = bisect.bisect_right(self._offsets, start_offset) - 1
        if i < 0:
            return
        changed = i > 0 or self._offsets[i] != start_offset
        del self._epochs[:i]
        del self._offsets[:i]
        self._offsets[0] = start_offset
        if changed:
            self._flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self._flush()

    def _flush(self) -> None:
        try:
            self._file.write(self.entries())
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
            if not self.unwritten:
                logger.warning("%s: no space to write the leader-epoch checkpoint", self._file.path)
            self.unwritten = True
            return
        self.unwritten = False

    def flush_if_unwritten(self) -> bool:
        """Retry a write a full disk refused; True if the file is up to date."""
        if self.unwritten:
            self._flush()
        return not self.unwritten
