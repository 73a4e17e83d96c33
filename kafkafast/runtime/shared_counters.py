"""Broker-wide counters shared by all worker processes: connection counts (for
`max.connections`, `listener.name.<l>.max.connections`, `max.connections.per.ip` and the
cap on connections still in their TLS handshake or SASL exchange) and the sampled rates of
client quotas (`broker/quotas.py`).

A separate anonymous `MAP_SHARED` mapping, created by the supervisor before the fork (or by
the single-process server) next to the partition table (`shm.py`), whose layout it leaves
alone. All words are native int64 stored and loaded whole through `memoryview.cast("q")`.

Layout (`SharedCounters.size`)::

    header, 64 words
      [0] magic 0x4B46434E54303031 ("KFCNT001")   [1] layout version (1)
      [2] workers N   [3] per-IP entries   [4] quota entries   [5] quota samples S
      [6] generation of the dynamic configs file (`broker/dynamic_configs.py`): a process that
          rewrote it adds 1, so every worker re-reads it before its next request
    per worker w (N blocks of 2 + MAX_LISTENERS words, from word 64):
      [0] connections held by w (all listeners)
      [1] connections of w still in their TLS handshake / SASL authentication ("pending")
      [2 + l] connections held by w on listener l (its index in `listeners`)
    per-IP table (`ip_entries` entries of 2 + N words):
      [0..1] the address as 16 bytes (IPv4 mapped into ::ffff:0:0/96; 0,0 = never used)
      [2 + w] connections from it held by worker w
    quota table (`quota_entries` entries of 3 + 2*S words):
      [0] hash of (quota key, entity) (0 = never used)   [1] last record (monotonic ms)
      [2] index of the current sample
      [3 + 2*i], [4 + 2*i] sample i: start (monotonic ms), total (value * 1000)

Every worker only ever adds to or subtracts from its own columns (connection counts), so a
release needs no lock; decisions that read the sum of all columns and then add to it
(admitting a connection, inserting an address, a quota sample) take an `fcntl.lockf` on
`<run dir>/counters.lock`, which the kernel releases if a holder dies. When a worker dies
the supervisor zeroes its columns (`clear_worker`): its connections died with it.

Full tables: an address that finds no entry within MAX_PROBE places of its home (every
one held by another address with connections open) is counted by each worker on its own,
against its share of the limit, the limit divided by N rounded up (`ConnectionLimits`); a
quota entity that finds none (all taken by entities that recorded within the last
S windows) is measured per worker, as before this table existed (`QuotaManager`).
"""
from __future__ import annotations

import hashlib
import ipaddress
import mmap
import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from kafkafast.runtime.file_lock import ProcessFileLock

MAGIC = 0x4B46434E54303031
LAYOUT_VERSION = 2
HEADER_WORDS = 64
H_CONFIGS_GENERATION = 6
MAX_LISTENERS = 16
WORKER_WORDS = 2 + MAX_LISTENERS
C_TOTAL, C_PENDING = 0, 1
MAX_PROBE = 32
DEFAULT_IP_ENTRIES = 8192
DEFAULT_QUOTA_ENTRIES = 1024

# results of SharedCounters.reserve
ADMITTED, WAIT, IP_REFUSED, IP_UNTRACKED = 0, 1, 2, 3


def ip_key(ip: str) -> tuple[int, int]:
    """The address as two int64 halves (IPv4 mapped into IPv6); (0, 0) for no address."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return 0, 0
    if addr.version == 4:
        addr = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + addr.packed)
    raw = addr.packed
    return int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)


def entity_hash(key: object) -> int:
    h = int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big", signed=True)
    return h or 1


class SharedCounters:
    def __init__(self, mm: mmap.mmap, lock_path: str | None) -> None:
        self._mm = mm
        self._q = memoryview(mm).cast("q")
        q = self._q
        if q[0] != MAGIC or q[1] != LAYOUT_VERSION:
            raise ValueError("not a kafkafast counters area")
        self.workers, self.ip_entries, self.quota_entries, self.samples = int(q[2]), int(q[3]), int(q[4]), int(q[5])
        self._ip_words = 2 + self.workers
        self._ip_base = HEADER_WORDS + self.workers * WORKER_WORDS
        self._quota_words = 3 + 2 * self.samples
        self._quota_base = self._ip_base + self.ip_entries * self._ip_words
        self.lock_path = lock_path
        self._file_lock = ProcessFileLock(lock_path) if lock_path is not None else None

    @staticmethod
    def size(workers: int, ip_entries: int, quota_entries: int, samples: int) -> int:
        words = HEADER_WORDS + workers * WORKER_WORDS + ip_entries * (2 + workers) + quota_entries * (3 + 2 * samples)
        return (words * 8 + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE

    @classmethod
    def create(cls, workers: int, run_dir: str | None, *, ip_entries: int = DEFAULT_IP_ENTRIES,
               quota_entries: int = DEFAULT_QUOTA_ENTRIES, samples: int = 11) -> "SharedCounters":
        """A zeroed area for `workers` processes (1 for the single-process server, which
        needs no lock: run_dir None)."""
        workers, ip_entries, quota_entries, samples = (max(1, workers), max(1, ip_entries), max(1, quota_entries),
                                                       max(1, samples))
        mm = mmap.mmap(-1, cls.size(workers, ip_entries, quota_entries, samples), flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
        q = memoryview(mm).cast("q")
        q[0], q[1], q[2], q[3], q[4], q[5] = MAGIC, LAYOUT_VERSION, workers, ip_entries, quota_entries, samples
        q.release()
        lock_path = None
        if run_dir is not None:
            lock_path = os.path.join(run_dir, "counters.lock")
            open(lock_path, "a").close()
        return cls(mm, lock_path)

    @classmethod
    def for_config(cls, config: Any, workers: int, run_dir: str | None) -> "SharedCounters":
        props = config.props
        return cls.create(workers, run_dir,
                          ip_entries=int(props.get("kafkafast.shm.ip.entries") or DEFAULT_IP_ENTRIES),
                          quota_entries=int(props.get("kafkafast.shm.quota.entities") or DEFAULT_QUOTA_ENTRIES),
                          samples=int(props.get("quota.window.num") or 11))

    def locked(self) -> AbstractContextManager[None]:
        if self._file_lock is None:
            return nullcontext()
        return self._file_lock.locked()

    def after_fork(self) -> None:
        if self._file_lock is not None:
            self._file_lock.after_fork()

    # -- dynamic configs ------------------------------------------------------------------
    def configs_generation(self) -> int:
        return int(self._q[H_CONFIGS_GENERATION])

    def configs_changed(self) -> None:
        """The dynamic configs file was rewritten (called after the rename, under its flock,
        so two writers never lose an increment)."""
        self._q[H_CONFIGS_GENERATION] += 1

    # -- connections ----------------------------------------------------------------------
    def _col(self, worker: int) -> int:
        return HEADER_WORDS + worker * WORKER_WORDS

    def _sum(self, word: int) -> int:
        q = self._q
        return sum(q[HEADER_WORDS + w * WORKER_WORDS + word] for w in range(self.workers))

    def total(self) -> int:
        return self._sum(C_TOTAL)

    def pending(self) -> int:
        return self._sum(C_PENDING)

    def listener_total(self, listener: int) -> int:
        return self._sum(2 + listener)

    def _ip_entry(self, key: tuple[int, int], insert: bool) -> int:
        """Index of the address's entry (inserted if `insert` and there is room), else -1."""
        q, n, words, base = self._q, self.ip_entries, self._ip_words, self._ip_base
        home = (key[0] * 31 + key[1]) % n
        reusable = -1
        for i in range(min(MAX_PROBE, n)):
            e = (home + i) % n
            at = base + e * words
            hi, lo = q[at], q[at + 1]
            if hi == key[0] and lo == key[1]:
                return e
            if hi == 0 and lo == 0:
                if reusable < 0:
                    reusable = e
                break  # never used: the address is not further along
            if reusable < 0 and not any(q[at + 2:at + 2 + self.workers]):
                reusable = e
        if not insert or reusable < 0:
            return -1
        at = base + reusable * words
        q[at], q[at + 1] = key
        return reusable

    def ip_count(self, entry: int) -> int:
        at = self._ip_base + entry * self._ip_words + 2
        return sum(self._q[at:at + self.workers])

    def ip_connections(self, ip: str) -> int:
        e = self._ip_entry(ip_key(ip), False)
        return self.ip_count(e) if e >= 0 else 0

    def reserve(self, worker: int, listener: int, *, max_total: int, listener_max: int, protected: bool,
                ip: tuple[int, int] | None, ip_cap: int, pending: bool) -> tuple[int, int]:
        """Admits one connection of `worker` on `listener` if the broker-wide limits allow:
        (ADMITTED, ip entry or -1), (WAIT, -1) when max.connections or the listener's cap is
        reached (the caller stops accepting), (IP_REFUSED, -1) when the address has ip_cap
        connections already, (IP_UNTRACKED, -1): admitted, but the per-IP table has no room
        for the address (the caller counts it per worker)."""
        q = self._q
        col = self._col(worker)
        with self.locked():
            if self.listener_total(listener) >= listener_max:
                return WAIT, -1
            if not protected and self.total() >= max_total:
                return WAIT, -1
            entry, result = -1, ADMITTED
            if ip is not None:
                entry = self._ip_entry(ip, True)
                if entry < 0:
                    result = IP_UNTRACKED
                elif self.ip_count(entry) >= ip_cap:
                    return IP_REFUSED, -1
                else:
                    q[self._ip_base + entry * self._ip_words + 2 + worker] += 1
            q[col + C_TOTAL] += 1
            q[col + 2 + listener] += 1
            if pending:
                q[col + C_PENDING] += 1
            return result, entry

    def release(self, worker: int, listener: int, entry: int, pending: bool) -> None:
        """Gives back what `reserve` took (own columns only: no lock)."""
        q = self._q
        col = self._col(worker)
        q[col + C_TOTAL] -= 1
        q[col + 2 + listener] -= 1
        if pending:
            q[col + C_PENDING] -= 1
        if entry >= 0:
            q[self._ip_base + entry * self._ip_words + 2 + worker] -= 1

    def setup_done(self, worker: int) -> None:
        """One of the worker's pending connections finished its handshake / authentication."""
        self._q[self._col(worker) + C_PENDING] -= 1

    def clear_worker(self, worker: int) -> None:
        """A dead worker's connections died with it (called by the supervisor)."""
        q = self._q
        with self.locked():
            col = self._col(worker)
            for i in range(WORKER_WORDS):
                q[col + i] = 0
            for e in range(self.ip_entries):
                q[self._ip_base + e * self._ip_words + 2 + worker] = 0

    # -- quota rates ----------------------------------------------------------------------
    def _quota_entry(self, h: int, now_ms: int, stale_ms: int) -> int:
        q, n, words, base = self._q, self.quota_entries, self._quota_words, self._quota_base
        home = h % n
        reusable = -1
        for i in range(min(MAX_PROBE, n)):
            e = (home + i) % n
            at = base + e * words
            if q[at] == h:
                return e
            if q[at] == 0:
                if reusable < 0:
                    reusable = e
                break
            if reusable < 0 and q[at + 1] < now_ms - stale_ms:
                reusable = e
        if reusable < 0:
            return -1
        at = base + reusable * words
        q[at:at + words] = memoryview(bytes(words * 8)).cast("q")
        q[at] = h
        return reusable

    def record_rate(self, sensor: object, value: float, now_ms: int, window_ms: int) -> tuple[float, float] | None:
        """Adds `value` to the current sample of `sensor` (a quota key and entity), Kafka's SampledStat way (a sample
        covers window_ms from its start; samples older than S windows do not count); returns
        (the total of the live samples, the span they cover in seconds: from the oldest
        live sample's start to now, at least one window), or None when the table is full."""
        q, words, samples = self._q, self._quota_words, self.samples
        h = entity_hash(sensor)
        with self.locked():
            e = self._quota_entry(h, now_ms, samples * window_ms)
            if e < 0:
                return None
            at = self._quota_base + e * words
            q[at + 1] = now_ms
            cur = q[at + 2]
            s = at + 3 + 2 * cur
            if q[s] == 0 and q[s + 1] == 0:  # first record
                q[s] = now_ms
            elif now_ms >= q[s] + window_ms:  # the current sample is complete: next one
                cur = (cur + 1) % samples
                q[at + 2] = cur
                s = at + 3 + 2 * cur
                q[s], q[s + 1] = now_ms, 0
            q[s + 1] += int(value * 1000)
            horizon = now_ms - samples * window_ms
            total, oldest = 0, now_ms
            for i in range(samples):
                start, amount = q[at + 3 + 2 * i], q[at + 4 + 2 * i]
                if amount and start > horizon:
                    total += amount
                    oldest = min(oldest, start)
            return total / 1000.0, max(now_ms - oldest, window_ms) / 1000.0
