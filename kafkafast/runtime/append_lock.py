"""The per-partition append lock: one int64 word in the partition's shared-memory slot.

Free is 0; held is `(incarnation << 32) | pid` of the holder, taken with an atomic
compare-and-swap (`kafkafast.native.load("shm_atomic")`: GCC `__atomic` builtins on the
mmap'd word, compiled or through libatomic: both twins interoperate). It is held only
while a `Log` in shared mode (storage/log.py) assigns offsets, writes and publishes, or
changes its segments, so a waiter spins: `sched_yield` first, then sleeps of 10-1000 µs.

A holder that died is detected by its word: every 32 spins the waiter asks the table
whether the word names a live worker (its pid and incarnation are in the header's worker
table and the process exists and is no zombie, `PartitionTable.holder_alive`). If not, the
waiter swaps the dead word for its own and `acquire` returns True: the caller repairs the
log (cuts what lies beyond the slot's committed position) before it writes.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

from kafkafast import native
from kafkafast.runtime import shm

log = logging.getLogger("kafkafast.append_lock")
_atomic = native.load("shm_atomic")

CHECK_EVERY = 32


class AppendLock:
    __slots__ = ("table", "mm", "at", "me", "slot", "atomic")

    def __init__(self, table: shm.PartitionTable, slot: int, incarnation: int, atomic: Any = None) -> None:
        self.atomic = atomic or _atomic  # the twin (tests pass either explicitly)
        self.table = table
        self.mm = table.mm
        self.slot = slot
        self.at = table.slot_word_offset(slot, shm.S_APPEND_LOCK)
        self.me = (incarnation << 32) | os.getpid()

    def acquire(self) -> bool:
        """Takes the lock; True when it was taken over from a dead holder."""
        if self.atomic.compare_and_swap(self.mm, self.at, 0, self.me):
            return False
        return self._contended()

    def _contended(self) -> bool:
        mm, at, me, cas, load = self.mm, self.at, self.me, self.atomic.compare_and_swap, self.atomic.load
        spins = 0
        while True:
            cur = load(mm, at)
            if cur == 0:
                if cas(mm, at, 0, me):
                    return False
                continue
            if cur == me:
                raise RuntimeError("append lock taken twice by one process")
            spins += 1
            if spins % CHECK_EVERY == 0 and not self.table.holder_alive(cur):
                if cas(mm, at, cur, me):
                    log.warning("slot %d: append lock of dead holder pid %d (incarnation %d) taken over",
                                self.slot, cur & 0xFFFFFFFF, cur >> 32)
                    return True
                continue
            if spins < 8:
                os.sched_yield()
            else:
                time.sleep(min(spins, 100) * 1e-5)

    def release(self) -> None:
        if not self.atomic.compare_and_swap(self.mm, self.at, self.me, 0):
            log.error("slot %d: append lock was not held by this process at release", self.slot)

    def held_by(self) -> int:
        return self.atomic.load(self.mm, self.at)
