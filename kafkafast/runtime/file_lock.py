"""An exclusive POSIX record lock on a file of the run directory, shared by the broker's processes.

A POSIX lock belongs to a process, so each process opens its own descriptor on first use, and
a forked child forgets the parent's (`after_fork`). The kernel drops the lock of a process that
dies, so a killed worker never leaves it held.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager


class ProcessFileLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    @contextmanager
    def locked(self) -> Iterator[None]:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def after_fork(self) -> None:
        self._fd = -1
