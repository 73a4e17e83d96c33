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
    """(epoch, start offset) pairs, both strictly increasing, persisted when they change.

    File `leader-epoch-checkpoint` in the partition directory (Kafka's format)::

        0                          version
        <count>
        <epoch> <start offset>     one line per epoch, oldest first

    Used by OffsetForLeaderEpoch (`end_offset_for`) and follower truncation.

    As Kafka's LeaderEpochFileCache, the file is written (tmp file, fsync, rename) only when
    the entries differ from what it holds: an `assign` of the latest epoch changes nothing, so
    a partition that leads again at its epoch writes nothing. The truncations of a log's load
    (`write=False`) stay in memory until the next write (Kafka flushes them asynchronously):
    an empty log's load drops its `<epoch> 0` entry, its leadership at that epoch assigns it
    back, and the file, unchanged, is not rewritten; a file left behind by a crash is
    truncated again at the next load. A log start moved by retention or DeleteRecords is kept
    in memory the same way (Kafka flushes that truncation asynchronously too, KAFKA-15046):
    the file's older entries are below the log start, which a load drops, and the write's two
    fsyncs took 20-30 ms on the event loop of a broker retention ran on. `assign` and
    `flush_if_behind` (at close) write what is pending.
    """

    __slots__ = ("_file", "_epochs", "_offsets", "_on_file", "unwritten")

    def __init__(self, path: str) -> None:
        self._file = EpochCheckpointFile(path)
        self.unwritten = False
        """A full disk refused the last write (retried at the next change and at close; the
        log's batches carry their epochs meanwhile)."""
        try:
            entries = self._file.read()
        except KafkaStorageError:
            entries = None  # a torn checkpoint: start over; the log's batches carry their epochs
        self._on_file: list[tuple[int, int]] | None = entries
        """The entries the file holds (None: unknown, the next write rewrites it)."""
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in entries or ():
            if (self._epochs and (epoch <= self._epochs[-1] or offset < self._offsets[-1])) or epoch < 0 or offset < 0:
                continue
            self._epochs.append(epoch)
            self._offsets.append(offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def latest_known_epoch(self) -> int:
        """The latest epoch of the cache or of its file: a log's load drops (in memory) an epoch
        that starts at or after its log end, e.g. an empty log's only one, which the file keeps
        until the next write; a lone leader leads on at it, never at an earlier one."""
        on_file = self._on_file[-1][0] if self._on_file else UNDEFINED_EPOCH
        return max(self.latest_epoch, on_file)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` started at `start_offset` (Kafka's assign: conflicting later
        entries -- epoch >= `epoch` or start offset >= `start_offset` -- are removed; the
        latest epoch again is no change). The file is brought up to date (a truncation of the
        load still pending included) where it differs."""
        if self._update_needed(epoch, start_offset):
            while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
                self._epochs.pop()
                self._offsets.pop()
            self._epochs.append(epoch)
            self._offsets.append(start_offset)
        self._flush()

    def _update_needed(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch:
            return False
        # an older epoch after a newer one: ignored, as Kafka does
        return not (self._epochs and epoch < self._epochs[-1] and start_offset >= self._offsets[-1])

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

    def truncate_from_end(self, end_offset: int, *, write: bool = True) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there).
        `write=False`: in memory only, written with the next change (a log's load)."""
        while self._offsets and self._offsets[-1] >= end_offset:
            self._epochs.pop()
            self._offsets.pop()
        if write:
            self._flush()

    def truncate_from_start(self, start_offset: int, *, write: bool = True) -> None:
        """The log now starts at `start_offset`: drop epochs wholly below it, and move the
        start of the epoch containing it up to `start_offset` (`write` as `truncate_from_end`)."""
        i = bisect.bisect_right(self._offsets, start_offset) - 1
        if i >= 0:
            del self._epochs[:i]
            del self._offsets[:i]
            self._offsets[0] = start_offset
        if write:
            self._flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self._flush()

    def _flush(self) -> None:
        """Writes the entries if the file holds others."""
        entries = self.entries()
        if entries == self._on_file:
            self.unwritten = False
            return
        try:
            self._file.write(entries)
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
            if not self.unwritten:
                logger.warning("%s: no space to write the leader-epoch checkpoint", self._file.path)
            self.unwritten = True
            return
        self._on_file = entries
        self.unwritten = False

    def flush_if_behind(self) -> bool:
        """Write what the file lacks (a truncation of the load, a write a full disk refused);
        True if the file is up to date."""
        self._flush()
        return not self.unwritten
