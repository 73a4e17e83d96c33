"""Producer id allocation for idempotent producers, unique across worker processes and
restarts. `<log dir>/__kafkafast_producer_ids` holds the first id not yet handed to any
process (decimal text); a process reserves a block of BLOCK ids under an exclusive flock,
writes the new high mark (fsync) and then hands ids out of its block from memory."""
from __future__ import annotations

import errno
import fcntl
import os

from kafkafast.protocol.errors import KafkaStorageError

BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, "__kafkafast_producer_ids")
        self._next = 0
        self._end = 0

    def _reserve(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise KafkaStorageError(f"cannot reserve producer ids in {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 64, 0).strip()
            start = int(raw) if raw else 0
            end = start + BLOCK
            data = str(end).encode()
            # Overwrite in place, never truncate first: the mark only grows, so the new text
            # covers the old, and a full disk that refuses the write leaves the old mark.
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(errno.ENOSPC, "short write")
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot reserve producer ids in {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        self._next, self._end = start, end

    def next_id(self) -> int:
        if self._next >= self._end:
            self._reserve()
        pid = self._next
        self._next += 1
        return pid
