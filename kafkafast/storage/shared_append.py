"""The shared-append handle of a `Log` (storage/log.py): several processes append to one
partition, one at a time, under a lock word in shared memory.

The runtime (runtime/worker.py) gives each `Log` of a partition -- the owner worker's and
the one any other worker opens to append a client's produce itself -- a `SharedAppend`:
the partition's append lock (runtime/append_lock.py) and the int64 words of its
shared-memory slot that hold what an appender must know of the active segment beyond the
published partition state (`partition_state.FIELDS`):

    gen             +1 at every publish by a lock holder; a Log whose view is older
                    catches up (`Log._sync_shared`) before it changes anything
    words[0..6]     active segment: offset-index entries, time-index entries, bytes since
                    the last offset-index entry, bytes since the last time-index entry,
                    max timestamp, its offset, time of the first append (`SHARED_WORDS`)
    takeovers       how often a holder's death was repaired

This module knows only the word positions it is given (storage does not import runtime).
"""
from __future__ import annotations

import threading
from typing import Any

SHARED_WORDS = ("oi_entries", "ti_entries", "oi_since", "ti_since", "max_ts", "max_ts_offset", "first_append_ms")
W_OI_ENTRIES, W_TI_ENTRIES, W_OI_SINCE, W_TI_SINCE, W_MAX_TS, W_MAX_TS_OFFSET, W_FIRST_APPEND = range(7)


class SharedAppend:
    """Lock and slot words of one partition, as one `Log` (one process) uses them."""

    __slots__ = ("lock", "q", "gen_at", "words_at", "takeovers_at", "seen_gen", "seen_segments_version",
                 "depth", "dirty", "in_sync", "rlock", "hw_follows_end", "guard")

    def __init__(self, lock: Any, q: memoryview, gen_at: int, words_at: int, takeovers_at: int) -> None:
        self.lock = lock  # acquire() -> True when taken over from a dead holder; release()
        self.q = q
        self.gen_at = gen_at
        self.words_at = words_at
        self.takeovers_at = takeovers_at
        self.seen_gen = -1  # the generation this process's Log last saw or published
        self.seen_segments_version = -1
        self.depth = 0  # nesting of `Log._enter` in this process
        self.dirty = False
        self.in_sync = False  # this Log's view matches the slot (it may publish its words)
        self.rlock = threading.RLock()  # threads of one process (the lock word is per process)
        # Single node: the high watermark is the log end, published under the lock. Cluster
        # mode: the leader's replica bookkeeping (the owner worker) publishes it instead.
        self.hw_follows_end = True
        # Called under the lock before a leader append (cluster mode: raises when the
        # partition is no longer led at the appender's epoch); None: no check.
        self.guard: Any = None

    @property
    def gen(self) -> int:
        return self.q[self.gen_at]

    def word(self, i: int) -> int:
        return self.q[self.words_at + i]

    @property
    def takeovers(self) -> int:
        return self.q[self.takeovers_at]
