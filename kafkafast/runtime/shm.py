"""The shared-memory partition table: one anonymous `MAP_SHARED` mmap that the supervisor
creates before forking and every worker inherits.

It is how workers agree, without messages, on who appends to a partition, what a reader
may see of it, and which workers have fetches parked on it. All words are native-endian
int64 (x86-64: little-endian), stored and loaded whole through a `memoryview.cast("q")`,
so a reader never sees a torn value.

Layout (`HEADER_BYTES` + `num_slots` * `SLOT_BYTES`)::

    header, 4096 bytes, int64 words
      [0]  magic  0x4B4653484D303031 ("KFSHM001")
      [1]  layout version (4)
      [2]  number of workers N
      [3]  number of partition slots
      [4]  metadata generation: +1 (under the table lock) after every topic change;
           a worker that sees a new value reloads the topic file (`refresh_topics`)
      [5]  supervisor pid
      [6]  shutting down (1 once the supervisor forwarded SIGTERM/SIGINT)
      [7]  cluster mode: broker id + 1 (0 until the worker holding the ZooKeeper
           registration, worker 0, has established it)
      [8]  cluster mode: broker epoch (czxid of `/brokers/ids/<id>`, -1 unregistered)
      [9]  cluster mode: 1 while a replaced worker asks worker 0 to register the broker again
      [10] cluster mode: the session word of worker 0's ZooKeeper session (the broker's
           registration): generation (lost registrations) << 2 | 2 registered in this
           generation | 1 connected (`cluster/node.py`)
      [11] cluster mode: the leadership lease's end, CLOCK_MONOTONIC ms (worker 0 extends it
           when ZooKeeper answers; every worker's appends to led partitions stop after it)
      [12] ACL generation: +1 after every ACL change (CreateAcls, DeleteAcls) made through any
           worker, before it is answered; a worker that sees a new value re-reads the ACLs
           before it handles its next request, so the broker's workers act as one authorizer
      [16 + 6*i ... 16 + 6*i + 5]  worker i (i < MAX_WORKERS):
           pid, incarnation (1 for the first start, +1 per respawn), ready (1 while
           serving), recovered partitions at its last start, loaded (1 once an
           incarnation of it has loaded its partitions since the supervisor started: from
           then on their slots hold state it published; never cleared, a replacement's
           load starts from its predecessor's published state). Until then the other
           workers answer its partitions as not served yet (`placement.SlotResidence.loading`):
           their slots are still zeros. Then wake pending (1 from the wake-up byte a
           worker wrote to its pipe until it drains it: see "Wake-ups" below).

    slot k, 768 bytes at HEADER_BYTES + k * SLOT_BYTES
      int64 [0]      state: 0 free, 1 live, 2 deleted (a tombstone: probing continues)
      int64 [1]      owner worker index (the only process that appends)
      int64 [2]      partition index
      int64 [3..4]   topic id (16 bytes, as two big-endian halves)
      int64 [5..20]  published partition state, `partition_state.FIELDS` in order:
                     log_start_offset, log_end_offset, high_watermark,
                     last_stable_offset, active_base_offset, active_committed_size,
                     segments_version, max_timestamp, max_timestamp_offset,
                     offline (rest spare)
      int64 [21]     owner incarnation that last opened the log
      int64 [22]     append lock (`append_lock.AppendLock`): 0 free, else the holder's
                     (incarnation << 32) | pid; taken with an atomic compare-and-swap
      int64 [23]     append generation: +1 each time a holder published a change of the
                     log (an append, a roll, retention, a load); an appender whose view is
                     of an older generation catches up before it writes
      bytes [192..255]  waiters: byte i is non-zero while worker i has a fetch parked on
                     this partition. One byte per worker (not one bit) so every worker
                     only ever stores its own byte: no read-modify-write across processes.
      written by the owner while this broker leads the partition (`placement.WorkerPlacement`,
      in every mode: a single node's partitions lead alone, ISR [this broker]):
      int64 [32]     ISR size (as the owner last learnt it: LeaderAndIsr, AlterPartition answer)
      int64 [33..41] ISR broker ids (the first [32] of them)
      int64 [42 + 5*j .. 46 + 5*j], j < 8: follower j's fetch state (`SlotFollower`, cluster mode):
                     broker id + 1 (0: entry free), log end offset (its last fetch offset),
                     time of its last fetch (ms), leader's log end offset at that fetch,
                     when it last was caught up (ms). Entries are claimed by the owner when
                     it becomes leader; whichever worker serves the follower's Fetch
                     updates them and pokes the owner's wake-up pipe, and the owner then
                     recomputes the high watermark and the ISR from them.
      int64 [82..88] shared-append state of the active segment (written under the append
                     lock, `storage/log.py` SharedLog): offset-index entries, time-index
                     entries, bytes since the last offset-index entry, bytes since the last
                     time-index entry, the segment's max timestamp and its offset, the time
                     of its first append
      int64 [89]     appends taken over from a dead lock holder (the log repaired first)
      int64 [90]     the leader epoch + 1 while the owner leads the partition, else 0 (every
                     mode; read with shared append, `kafkafast.produce.shared.append`); another
                     worker appends a client's produce itself only while it matches its own
                     view, checked under the append lock (the owner clears it before it
                     becomes a follower and truncates, which takes the lock)
      bytes [728..767] spare

Slots are found by open addressing on (topic id, partition): lookups are lock-free
(a slot's key is written before its state becomes live); allocation and deletion take
an `fcntl.lockf` on `<run dir>/table.lock`.

Wake-ups: after an append the owner stores the new high watermark into the slot, then
reads the waiter bytes and writes one byte to the wake-up pipe of every other worker
whose byte is set. A woken worker drains its pipe and compares the high watermark of
each partition it has fetches parked on with the value it parked at. A fetch sets its
waiter byte before it re-reads the high watermark, so an append either sees the byte or
happened before the re-read. (The store->load ordering across processes is not fenced
explicitly; the interpreter runs thousands of instructions between the two, far longer
than a store buffer holds a store, and `max_wait_ms` bounds any miss.)
Wake-ups coalesce: a worker writes the byte only when its compare-and-swap of the woken
worker's wake-pending word from 0 to 1 succeeds; the woken worker drains its pipe, then
stores 0 there (atomic, sequentially consistent), then re-checks, so a wake-up either finds
the word 0 and writes (a byte the drain has passed), or finds the 1 that the woken worker
clears before its re-check reads what the waker published. (Cleared before the drain, the
drain could swallow a byte written just after the clear and leave the word 1 for good.) Several appends before the woken worker runs cost one byte,
one pipe read and one re-check.
"""
from __future__ import annotations

import mmap
import os
import zlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Iterator

from kafkafast import native
from kafkafast.broker.follower_state import FollowerState
from kafkafast.runtime.file_lock import ProcessFileLock

from kafkafast.storage.partition_state import FIELDS

MAGIC = 0x4B4653484D303031
LAYOUT_VERSION = 5
HEADER_BYTES = 4096
SLOT_BYTES = 768
SLOT_WORDS = SLOT_BYTES // 8
MAX_WORKERS = 64
WAITERS_AT = 192  # byte offset of the waiter bytes inside a slot

H_MAGIC, H_VERSION, H_WORKERS, H_SLOTS, H_METADATA_GEN, H_SUPERVISOR_PID, H_SHUTTING_DOWN = range(7)
H_WORKER_TABLE = 16
WORKER_WORDS = 6
W_PID, W_INCARNATION, W_READY, W_RECOVERED, W_LOADED, W_WAKE_PENDING = range(WORKER_WORDS)

S_STATE, S_OWNER, S_PARTITION, S_TOPIC_HI, S_TOPIC_LO = range(5)
S_FIELDS = 5
S_INCARNATION = 21
S_APPEND_LOCK = 22
S_APPEND_GEN = 23
S_SHARED = 82  # SharedLog's active-segment words (see storage/log.py SHARED_WORDS), 7 of them
S_TAKEOVERS = 89
S_LEADING = 90
H_BROKER_ID, H_BROKER_EPOCH, H_REREGISTER, H_SESSION, H_LEASE_END = 7, 8, 9, 10, 11
H_ACL_GEN = 12
S_ISR = 32
MAX_ISR = 9
S_FOLLOWERS = 42
FOLLOWER_WORDS = 5
MAX_FOLLOWERS = 8
F_ID, F_LEO, F_LAST_FETCH_MS, F_LEO_AT_LAST_FETCH, F_LAST_CAUGHT_UP_MS = range(FOLLOWER_WORDS)
FREE, LIVE, DELETED = 0, 1, 2

assert len(FIELDS) <= 16, "published state outgrew its slot"
assert H_WORKER_TABLE + WORKER_WORDS * MAX_WORKERS <= HEADER_BYTES // 8, "worker table outgrew the header"


def process_running(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (Linux: /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    return state not in (b"Z", b"X", b"x")


def owner_for(topic: str, partition: int, workers: int) -> int:
    """The worker that appends to a partition: consecutive partitions of a topic go to
    consecutive workers, starting at a worker chosen by the topic name."""
    return (zlib.crc32(topic.encode()) + partition) % workers


_slots = native.load("shm_slots")  # the words as attributes: compiled, no Python frame per access
assert _slots.STATE_FIELDS == FIELDS, "the slot state twins' field order is not partition_state.FIELDS"
assert _slots.FOLLOWER_FIELDS == ("leo", "last_fetch_ms", "leo_at_last_fetch", "last_caught_up_ms")
if TYPE_CHECKING:  # (the twins' types: kafkafast/_native/shm_slots.pyi)
    from kafkafast._native.shm_slots import SlotFollowerWords, SlotStateWords
else:
    SlotStateWords, SlotFollowerWords = _slots.SlotStateWords, _slots.SlotFollowerWords


class SlotState(SlotStateWords):
    """A partition's published state living in a slot: the same attributes as
    `storage.partition_state.PartitionState`, so the `Log` publishes into shared memory
    and a `LogReader` in any worker reads from it."""

    __slots__ = ()

    def __init__(self, words: memoryview, base_word: int) -> None:
        super().__init__(words, base_word + S_FIELDS)

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in FIELDS}

    def __repr__(self) -> str:
        return "SlotState(" + ", ".join(f"{k}={v}" for k, v in self.snapshot().items()) + ")"


class SlotFollower(SlotFollowerWords):
    """A follower's fetch state in a slot (`broker.follower_state.FollowerState`'s attributes), so
    the worker that serves the follower's Fetch records it and the owner reads it."""

    __slots__ = ()

    def __init__(self, words: memoryview, base_word: int) -> None:
        super().__init__(words, base_word + F_LEO)  # the words after the entry's broker id

    def reset(self, now_ms: int) -> None:
        self.leo = -1
        self.last_fetch_ms = now_ms
        self.leo_at_last_fetch = -1
        self.last_caught_up_ms = now_ms

    def on_fetch(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        FollowerState.on_fetch(self, fetch_offset, leader_leo, now_ms)  # type: ignore[arg-type]


class PartitionTable:
    """The mapping; see the module docstring for the layout."""

    def __init__(self, mm: mmap.mmap, run_dir: str) -> None:
        self.mm = mm
        self.q = memoryview(mm).cast("q")
        self.b = memoryview(mm)
        self.run_dir = run_dir
        self.num_slots = self.q[H_SLOTS]
        self.workers = self.q[H_WORKERS]
        self._file_lock = ProcessFileLock(os.path.join(run_dir, "table.lock"))

    @classmethod
    def create(cls, workers: int, num_slots: int, run_dir: str) -> "PartitionTable":
        if not 0 < workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in [1, {MAX_WORKERS}]")
        size = HEADER_BYTES + num_slots * SLOT_BYTES
        mm = mmap.mmap(-1, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        q = memoryview(mm).cast("q")
        q[H_MAGIC] = MAGIC
        q[H_VERSION] = LAYOUT_VERSION
        q[H_WORKERS] = workers
        q[H_SLOTS] = num_slots
        q[H_SUPERVISOR_PID] = os.getpid()
        q.release()
        open(os.path.join(run_dir, "table.lock"), "a").close()
        return cls(mm, run_dir)

    # -- lock (per process: opened lazily after the fork) -------------------------------
    def locked(self) -> AbstractContextManager[None]:
        return self._file_lock.locked()

    def after_fork(self) -> None:
        self._file_lock.after_fork()  # a POSIX lock belongs to a process; never share the parent's fd

    # -- header -------------------------------------------------------------------------
    @property
    def metadata_generation(self) -> int:
        return self.q[H_METADATA_GEN]

    def bump_metadata_generation(self) -> int:
        return self._bump(H_METADATA_GEN)

    @property
    def acl_generation(self) -> int:
        return self.q[H_ACL_GEN]

    def bump_acl_generation(self) -> int:
        return self._bump(H_ACL_GEN)

    def _bump(self, word: int) -> int:
        with self.locked():
            gen = self.q[word] + 1
            self.q[word] = gen
            return gen

    @property
    def shutting_down(self) -> bool:
        return self.q[H_SHUTTING_DOWN] != 0

    def set_shutting_down(self) -> None:
        self.q[H_SHUTTING_DOWN] = 1

    def worker_word(self, worker: int, field: int) -> int:
        return self.q[H_WORKER_TABLE + WORKER_WORDS * worker + field]

    def worker_word_offset(self, worker: int, field: int) -> int:
        """Byte offset of a worker word in the mapping (for the atomic operations)."""
        return (H_WORKER_TABLE + WORKER_WORDS * worker + field) * 8

    def set_worker_word(self, worker: int, field: int, value: int) -> None:
        self.q[H_WORKER_TABLE + WORKER_WORDS * worker + field] = value

    # -- slots --------------------------------------------------------------------------
    def _home(self, hi: int, lo: int, partition: int) -> int:
        return ((lo ^ hi) * 31 + partition * 0x9E3779B1) % self.num_slots

    @staticmethod
    def _key(topic_id: bytes) -> tuple[int, int]:
        return int.from_bytes(topic_id[:8], "big", signed=True), int.from_bytes(topic_id[8:], "big", signed=True)

    def find(self, topic_id: bytes, partition: int) -> int:
        """The slot of a live partition, or -1."""
        hi, lo = self._key(topic_id)
        q, n = self.q, self.num_slots
        k = self._home(hi, lo, partition)
        for _ in range(n):
            base = k * SLOT_WORDS + HEADER_BYTES // 8
            st = q[base + S_STATE]
            if st == FREE:
                return -1
            if st == LIVE and q[base + S_TOPIC_HI] == hi and q[base + S_TOPIC_LO] == lo \
                    and q[base + S_PARTITION] == partition:
                return k
            k = (k + 1) % n
        return -1

    def allocate(self, topic_id: bytes, partition: int, owner: int) -> int:
        """The partition's slot, created (owner recorded, state zeroed) if missing."""
        k = self.find(topic_id, partition)
        if k >= 0:
            return k
        hi, lo = self._key(topic_id)
        with self.locked():
            k = self.find(topic_id, partition)
            if k >= 0:
                return k
            q, n = self.q, self.num_slots
            k = self._home(hi, lo, partition)
            for _ in range(n):
                base = k * SLOT_WORDS + HEADER_BYTES // 8
                if q[base + S_STATE] != LIVE:
                    for w in range(1, SLOT_WORDS):
                        q[base + w] = 0
                    q[base + S_OWNER] = owner
                    q[base + S_PARTITION] = partition
                    q[base + S_TOPIC_HI] = hi
                    q[base + S_TOPIC_LO] = lo
                    q[base + S_FIELDS + FIELDS.index("max_timestamp")] = -1
                    q[base + S_FIELDS + FIELDS.index("max_timestamp_offset")] = -1
                    q[base + S_STATE] = LIVE  # last: the key is complete before lookups match
                    return k
                k = (k + 1) % n
        raise RuntimeError(f"partition table full ({self.num_slots} slots); raise kafkafast.shm.partition.slots")

    def release(self, slot: int) -> None:
        with self.locked():
            self.q[self._base(slot) + S_STATE] = DELETED

    def _base(self, slot: int) -> int:
        return slot * SLOT_WORDS + HEADER_BYTES // 8

    def owner(self, slot: int) -> int:
        return self.q[self._base(slot) + S_OWNER]

    def state(self, slot: int) -> SlotState:
        return SlotState(self.q, self._base(slot))

    def set_incarnation(self, slot: int, value: int) -> None:
        self.q[self._base(slot) + S_INCARNATION] = value

    def slot_word_offset(self, slot: int, word: int) -> int:
        """Byte offset of a slot word in the mapping (for the atomic operations)."""
        return (self._base(slot) + word) * 8

    def holder_alive(self, word: int) -> bool:
        """Whether the append-lock word `word` ((incarnation << 32) | pid) names a live
        worker: a worker of the table has that pid and incarnation and the process exists
        and is not a zombie. A worker that died (its replacement has a new pid, or the
        supervisor has not reaped it yet) or any other process is not."""
        pid, incarnation = word & 0xFFFFFFFF, word >> 32
        q = self.q
        for i in range(self.workers):
            at = H_WORKER_TABLE + WORKER_WORDS * i
            if q[at + W_PID] == pid:
                return q[at + W_INCARNATION] == incarnation and process_running(pid)
        return False

    def high_watermark(self, slot: int) -> int:
        return self.q[self._base(slot) + S_FIELDS + 2]

    # waiters
    def _waiter_at(self, slot: int) -> int:
        return HEADER_BYTES + slot * SLOT_BYTES + WAITERS_AT

    def set_waiting(self, slot: int, worker: int, waiting: bool) -> None:
        self.b[self._waiter_at(slot) + worker] = 1 if waiting else 0

    def waiters(self, slot: int) -> bytes:
        at = self._waiter_at(slot)
        return self.b[at:at + self.workers].tobytes()

    def clear_worker_waiters(self, worker: int) -> None:
        """Forgets a dead worker's parked fetches (its replacement starts with none)."""
        b = self.b
        at = HEADER_BYTES + WAITERS_AT + worker
        for k in range(self.num_slots):
            b[at + k * SLOT_BYTES] = 0

    # cluster mode: broker identity, ISR and follower positions
    def header_word(self, word: int) -> int:
        return self.q[word]

    def set_header_word(self, word: int, value: int) -> None:
        self.q[word] = value

    def leading_epoch(self, slot: int) -> int:
        """The leader epoch the owner leads the partition at, or -1 (word [90])."""
        return self.q[self._base(slot) + S_LEADING] - 1

    def set_leading_epoch(self, slot: int, epoch: int) -> None:
        self.q[self._base(slot) + S_LEADING] = epoch + 1

    def isr(self, slot: int) -> list[int]:
        base = self._base(slot) + S_ISR
        n = min(self.q[base], MAX_ISR)
        return [self.q[base + 1 + i] for i in range(n)]

    def set_isr(self, slot: int, members: list[int]) -> None:
        base = self._base(slot) + S_ISR
        members = list(members)[:MAX_ISR]
        for i, r in enumerate(members):
            self.q[base + 1 + i] = r
        self.q[base] = len(members)  # last: a reader never sees more members than were written

    def follower(self, slot: int, replica_id: int, *, claim_keeping: set[int] | None = None) -> SlotFollower | None:
        """The follower entry of `replica_id`; with `claim_keeping` (the partition's current
        followers) an entry is claimed for it if it has none: a free one or one of a broker
        no longer in that set. None when there is none (or no room)."""
        first = self._base(slot) + S_FOLLOWERS
        q = self.q
        for j in range(MAX_FOLLOWERS):
            b = first + j * FOLLOWER_WORDS
            if q[b + F_ID] == replica_id + 1:
                return SlotFollower(q, b)
        if claim_keeping is None:
            return None
        for j in range(MAX_FOLLOWERS):
            b = first + j * FOLLOWER_WORDS
            if q[b + F_ID] == 0 or q[b + F_ID] - 1 not in claim_keeping:
                q[b + F_ID] = replica_id + 1
                return SlotFollower(q, b)
        return None

    def live_slots(self) -> Iterator[int]:
        q = self.q
        for k in range(self.num_slots):
            if q[self._base(k) + S_STATE] == LIVE:
                yield k
