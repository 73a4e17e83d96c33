"""Shared append at the storage level (issue 17): `Log`s of one partition in several
processes (here: this one and forked children) append under the slot's append lock, with
both twins of the atomic word; a holder killed mid-write is cut off by the next appender."""
from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from kafkafast import native
from kafkafast.protocol.errors import OutOfOrderSequenceNumberError
from kafkafast.records import batch_crc_ok, encode_batch, scan_valid_prefix
from kafkafast.records.batch import decode_batch
from kafkafast.runtime import shm
from kafkafast.runtime.append_lock import AppendLock
from kafkafast.storage import LogConfig, segment
from kafkafast.storage.log import Log
from kafkafast.storage.offset_index import ENTRY as OFFSET_ENTRY
from kafkafast.storage.reader import LogReader
from kafkafast.storage.segment import read_header_at
from kafkafast.storage.shared_append import SharedAppend

TWINS = ("cython", "pure")


def twin(name: str):
    return native.load_compiled("shm_atomic") if name == "cython" else native.load_pure("shm_atomic")


class Partition:
    """A slot in a fresh table and the partition directory; `shared()` is what a worker's
    Log of it gets."""

    def __init__(self, tmp_path, **props: str) -> None:
        self.table = shm.PartitionTable.create(3, 16, str(tmp_path))
        self.slot = self.table.allocate(uuid.uuid4().bytes, 0, owner=0)
        self.dir = str(tmp_path / "t-0")
        self.config = LogConfig.from_props(props)

    def register(self, worker: int, incarnation: int = 1) -> None:
        self.table.set_worker_word(worker, shm.W_PID, os.getpid())
        self.table.set_worker_word(worker, shm.W_INCARNATION, incarnation)

    def shared(self, flavour: str, incarnation: int = 1) -> SharedAppend:
        t, k = self.table, self.slot
        return SharedAppend(AppendLock(t, k, incarnation, twin(flavour)), t.q,
                            t.slot_word_offset(k, shm.S_APPEND_GEN) // 8, t.slot_word_offset(k, shm.S_SHARED) // 8,
                            t.slot_word_offset(k, shm.S_TAKEOVERS) // 8)

    def open_owner(self, flavour: str) -> Log:
        self.register(0)
        return Log.open(self.dir, "t", 0, self.config, self.table.state(self.slot), needs_recovery=False,
                        recovery_point=0, shared=self.shared(flavour))

    def attach(self, flavour: str) -> Log:
        return Log.attach(self.dir, "t", 0, self.config, self.table.state(self.slot), self.shared(flavour))

    @property
    def takeovers(self) -> int:
        return self.table.q[self.table.slot_word_offset(self.slot, shm.S_TAKEOVERS) // 8]


def batch(tag: bytes, n: int = 3, size: int = 200, **kw) -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(encode_batch([(now, None, tag + b"-%d-" % i + b"x" * size, []) for i in range(n)], **kw))


def check_files(directory: str) -> list[bytes]:
    """Values of every record in the segment files, in offset order, checking that every
    batch's CRC is valid, offsets are contiguous, no byte follows the last whole batch and
    every offset-index entry points at a batch starting at that offset."""
    values: list[bytes] = []
    expect = 0
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        base = int(name[:20])
        data = open(os.path.join(directory, name), "rb").read()
        end, headers = scan_valid_prefix(data, 0)
        assert end == len(data), f"{name}: {len(data) - end} bytes after the last whole batch"
        assert base == expect, f"segment {base} after offset {expect - 1}"
        for pos, h in headers:
            assert batch_crc_ok(data, pos, h.size) and h.base_offset == expect
            values += [bytes(r.value) for r in decode_batch(data, pos, check_crc=True)[1]]
            expect = h.last_offset + 1
        index = open(os.path.join(directory, name[:20] + ".index"), "rb").read()
        starts = {pos: h.base_offset for pos, h in headers}
        for i in range(len(index) // 8):
            rel, pos = OFFSET_ENTRY.unpack_from(index, i * 8)
            assert starts.get(pos) == base + rel, f"{name}: index entry {i} ({rel}, {pos}) points at no batch"
    return values


@pytest.mark.parametrize("owner_twin,other_twin", [("cython", "pure"), ("pure", "cython")])
def test_two_processes_append_roll_and_dedupe_through_one_slot(tmp_path, owner_twin, other_twin):
    p = Partition(tmp_path, **{"segment.bytes": "6000", "index.interval.bytes": "700"})
    owner = p.open_owner(owner_twin)
    pid_a = 1000
    kids = []
    for child in range(2):  # two other processes appending at the same time as this one
        pid = os.fork()
        if pid == 0:
            try:
                p.register(1 + child)
                lg = p.attach(other_twin)
                for n in range(40):
                    lg.append(batch(b"k%d-%02d" % (child, n)), 0, now_ms=int(time.time() * 1000))
                os._exit(0)
            except BaseException:
                import traceback

                traceback.print_exc()
                os._exit(1)
        kids.append(pid)
    seq = 0
    for n in range(40):
        owner.append(batch(b"own-%02d" % n, producer_id=pid_a, producer_epoch=0, base_sequence=seq), 0,
                     now_ms=int(time.time() * 1000))
        seq += 3
    for pid in kids:
        assert os.waitpid(pid, 0)[1] == 0
    st = p.table.state(p.slot)
    assert st.log_end_offset == 3 * 40 * 3 == st.high_watermark
    assert st.segments_version % 2 == 0 and st.active_base_offset > 0  # rolled (by whoever found it full)
    # The idempotent producer's last batch, retried through a freshly attached Log: a duplicate.
    other = p.attach(other_twin)
    retry = other.append(batch(b"own-39", producer_id=pid_a, producer_epoch=0, base_sequence=seq - 3), 0,
                         now_ms=int(time.time() * 1000))
    assert retry.duplicate and retry.last_offset < st.log_end_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        other.append(batch(b"gap", producer_id=pid_a, producer_epoch=0, base_sequence=seq + 5), 0,
                     now_ms=int(time.time() * 1000))
    # ... and the owner, which did not see the other appends, catches up before it writes.
    r = owner.append(batch(b"last"), 0, now_ms=int(time.time() * 1000))
    assert r.base_offset == 360 and st.log_end_offset == 363
    other.close(clean=False)
    owner.close()
    values = check_files(p.dir)
    assert len(values) == 363 and len(set(values)) == 363
    for who in [b"own"] + [b"k%d" % c for c in range(2)]:  # each writer's records in its own order
        mine = [v for v in values if v.startswith(who)]
        assert mine == sorted(mine) and len(mine) == 120
    reopened = Log.open(p.dir, "t", 0, p.config, needs_recovery=True, recovery_point=0)
    assert reopened.log_end_offset == 363 and reopened.load_stats.truncated_bytes == 0
    reopened.close()


@pytest.mark.parametrize("holder_twin,next_twin", [("cython", "pure"), ("pure", "cython")])
def test_a_holder_killed_mid_write_is_cut_off_by_the_next_appender(tmp_path, holder_twin, next_twin):
    p = Partition(tmp_path, **{"index.interval.bytes": "100"})
    owner = p.open_owner(next_twin)
    for n in range(4):
        owner.append(batch(b"before-%d" % n), 0, now_ms=int(time.time() * 1000))
    st = p.table.state(p.slot)
    committed = st.active_committed_size
    pid = os.fork()
    if pid == 0:  # a worker that attaches and dies in the middle of its write, holding the lock
        p.register(1)
        lg = p.attach(holder_twin)

        def die(_dir: str) -> None:
            seg = lg.active_segment
            os.pwrite(seg.fd, b"\x00\x00\x10\x00torn" * 300, seg.size)  # part of a batch (and a claimed length)
            lg.active_segment.offset_index._w._append(OFFSET_ENTRY.pack(99, seg.size))  # an index entry for it
            os.kill(os.getpid(), signal.SIGKILL)

        segment.write_fault = die
        lg.append(batch(b"lost"), 0, now_ms=int(time.time() * 1000))
        os._exit(3)  # not reached
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    lock = AppendLock(p.table, p.slot, 1, twin(next_twin))
    assert lock.held_by() & 0xFFFFFFFF == pid  # it died holding the lock
    log_file = os.path.join(p.dir, "%020d.log" % 0)
    assert os.path.getsize(log_file) > committed  # its torn bytes are in the file
    r = owner.append(batch(b"after"), 0, now_ms=int(time.time() * 1000))
    assert r.base_offset == 12 and p.takeovers == 1 and lock.held_by() == 0
    assert st.log_end_offset == 15 and st.active_committed_size == os.path.getsize(log_file)
    values = check_files(p.dir)
    assert [v[:8] for v in values] == [b"before-%d" % (i // 3) for i in range(12)] + [b"after-0-", b"after-1-",
                                                                                        b"after-2-"]
    owner.close()
    assert read_header_at(os.open(log_file, os.O_RDONLY), committed).base_offset == 12


def test_periodic_flush_skips_the_lock_until_another_process_rolls(tmp_path):
    """`maybe_flush` (every periodic tick, every partition) takes the append lock only when
    something is to do: a roll by another process since this Log last looked (its rolled
    segments must be synced) or flush.ms due. Otherwise it returns at once without catching
    up; the next append still catches up and continues the offsets."""
    p = Partition(tmp_path, **{"segment.bytes": "2000"})
    owner = p.open_owner("cython")
    other = p.attach("cython")
    now = int(time.time() * 1000)
    owner.append(batch(b"a"), 0, now_ms=now)
    assert other.maybe_flush(now) is False
    assert other.log_end_offset == 0  # not caught up: the lock was not taken
    while p.table.state(p.slot).active_base_offset == 0:  # the owner rolls
        owner.append(batch(b"r"), 0, now_ms=now)
    active = p.table.state(p.slot).active_base_offset
    assert other.maybe_flush(now) is False  # the active segment is not due (flush.ms)...
    assert other.log_end_offset == owner.log_end_offset  # ...but it caught up to sync the rolled one
    assert other.recovery_point == active
    end = owner.log_end_offset
    owner.append(batch(b"c"), 0, now_ms=now)  # no roll: the other Log skips again...
    assert other.maybe_flush(now) is False and other.log_end_offset == end
    r = other.append(batch(b"b"), 0, now_ms=now)  # ...and catches up when it appends
    assert r.base_offset == end + 3 and other.log_end_offset == end + 6
    other.close(clean=False)
    owner.close()
    assert len(check_files(p.dir)) == other.log_end_offset


@pytest.mark.parametrize("holder_twin,next_twin", [("cython", "pure"), ("pure", "cython")])
def test_a_holder_killed_while_creating_a_new_segment_leaves_no_segment_behind(tmp_path, holder_twin, next_twin):
    """A roll creates the new segment's files before it publishes the roll (the segments
    version turns odd only after). A holder killed in between leaves them behind an even
    version: the next appender's repair removes them, and a reader that listed them re-lists,
    so the offsets the next appender writes into the old segment are read from there (an
    empty segment left at that base would be taken for theirs: a fetch there would skip to
    the next segment, a gap) and the log's segments stay contiguous."""
    p = Partition(tmp_path, **{"segment.bytes": "3000", "index.interval.bytes": "100"})
    owner = p.open_owner(next_twin)
    now = int(time.time() * 1000)
    for n in range(3):
        owner.append(batch(b"before-%d" % n), 0, now_ms=now)  # offsets 0-8, about 2100 bytes
    st = p.table.state(p.slot)
    version = st.segments_version
    pid = os.fork()
    if pid == 0:  # a worker that attaches and dies right after creating the segment its batch rolls to
        p.register(1)
        lg = p.attach(holder_twin)
        create = segment.LogSegment.create

        def create_then_die(*args, **kwargs):
            create(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)

        segment.LogSegment.create = create_then_die
        lg.append(batch(b"lost", size=500), 0, now_ms=now)  # does not fit: rolls at offset 9
        os._exit(3)  # not reached
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert os.path.exists(os.path.join(p.dir, "%020d.log" % 9))  # the unpublished segment's files
    assert st.segments_version == version and st.active_base_offset == 0 and st.log_end_offset == 9
    reader = LogReader(p.dir, st, topic="t", partition=0)  # a fetching worker's view, listed now
    assert reader.segment_bases() == [0, 9]
    r = owner.append(batch(b"after", size=50), 0, now_ms=now)  # fits the old segment: offsets 9-11
    assert r.base_offset == 9 and p.takeovers == 1 and st.active_base_offset == 0
    assert not [n for n in os.listdir(p.dir) if n.startswith("%020d." % 9)]
    assert reader.read(9, 1 << 20).first_batch_offset == 9
    r = owner.append(batch(b"next", size=500), 0, now_ms=now)  # does not fit: rolls at offset 12
    assert r.base_offset == 12 and st.active_base_offset == 12
    assert reader.segment_bases() == [0, 12]
    assert reader.read(9, 1 << 20).first_batch_offset == 9
    assert reader.read(12, 1 << 20).first_batch_offset == 12
    reader.close()
    owner.close()
    values = check_files(p.dir)  # contiguous segments: none starts inside another's offsets
    assert [v.split(b"-")[0] for v in values] == [b"before"] * 9 + [b"after"] * 3 + [b"next"] * 3
