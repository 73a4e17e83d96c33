"""The shared-memory partition table: slots by (topic id, partition), published state
seen across a fork, waiter bytes, metadata generation."""
from __future__ import annotations

import os
import uuid

import pytest

from kafkafast.runtime import shm
from kafkafast.storage.partition_state import FIELDS


def table(tmp_path, workers: int = 3, slots: int = 64) -> shm.PartitionTable:
    return shm.PartitionTable.create(workers, slots, str(tmp_path))


def test_slots_are_found_by_topic_id_and_partition_and_tombstones_keep_probing(tmp_path):
    t = table(tmp_path, slots=8)
    a, b = uuid.uuid4().bytes, uuid.uuid4().bytes
    slots = {(tid, p): t.allocate(tid, p, owner=p % 3) for tid in (a, b) for p in range(3)}
    assert len(set(slots.values())) == 6
    for (tid, p), k in slots.items():
        assert t.find(tid, p) == k and t.owner(k) == p % 3
    assert t.allocate(a, 1, owner=0) == slots[(a, 1)]  # idempotent, owner unchanged
    t.release(slots[(a, 0)])
    assert t.find(a, 0) == -1
    assert all(t.find(tid, p) == k for (tid, p), k in slots.items() if (tid, p) != (a, 0))
    again = t.allocate(a, 0, owner=2)
    assert t.find(a, 0) == again and t.owner(again) == 2 and t.state(again).log_end_offset == 0


def test_published_state_written_in_a_child_is_read_by_the_parent(tmp_path):
    t = table(tmp_path)
    k = t.allocate(uuid.uuid4().bytes, 0, owner=1)
    st = t.state(k)
    assert st.max_timestamp == -1 and st.high_watermark == 0
    pid = os.fork()
    if pid == 0:
        child = t.state(k)
        for i, name in enumerate(FIELDS):
            setattr(child, name, 1000 + i)
        t.set_waiting(k, 2, True)
        os._exit(0)
    os.waitpid(pid, 0)
    assert st.snapshot() == {name: 1000 + i for i, name in enumerate(FIELDS)}
    assert t.high_watermark(k) == 1000 + FIELDS.index("high_watermark")
    assert t.waiters(k) == b"\x00\x00\x01"
    t.clear_worker_waiters(2)
    assert t.waiters(k) == b"\x00\x00\x00"


def test_metadata_generation_only_moves_forward(tmp_path):
    t = table(tmp_path)
    assert t.metadata_generation == 0
    assert [t.bump_metadata_generation() for _ in range(3)] == [1, 2, 3]
    assert t.metadata_generation == 3


def test_owner_spreads_consecutive_partitions_over_workers():
    owners = [shm.owner_for("orders", p, 4) for p in range(8)]
    assert sorted(owners[:4]) == [0, 1, 2, 3] and owners[:4] == owners[4:]


def test_follower_positions_and_isr_written_in_a_child_are_read_by_the_owner(tmp_path):
    """Cluster mode: the worker that serves a follower's Fetch records its position in the
    slot; the owner reads it (and the ISR it publishes) without any message."""
    t = table(tmp_path)
    k = t.allocate(uuid.uuid4().bytes, 0, owner=0)
    owner_view = {r: t.follower(k, r, claim_keeping={2, 3}) for r in (2, 3)}
    for f in owner_view.values():
        f.reset(1000)
    t.set_isr(k, [1, 2, 3])
    pid = os.fork()
    if pid == 0:
        f = t.follower(k, 3)  # no claim: an existing entry only
        ok = f is not None and t.follower(k, 9) is None and t.isr(k) == [1, 2, 3]
        f.on_fetch(40, 50, 2000)  # behind the leader's log end: not caught up at this fetch
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    f3 = owner_view[3]
    assert (f3.leo, f3.last_fetch_ms, f3.leo_at_last_fetch, f3.last_caught_up_ms) == (40, 2000, 50, 1000)
    assert owner_view[2].leo == -1
    # a broker no longer among the followers gives its entry up to a new one
    f4 = t.follower(k, 4, claim_keeping={2, 4})
    assert f4 is not None and t.follower(k, 3) is None and t.follower(k, 2) is not None
    t.set_isr(k, [1, 2])
    assert t.isr(k) == [1, 2]


def _placements(tmp_path):
    from kafkafast.runtime.placement import WorkerPlacement

    t = table(tmp_path, workers=2)
    pipes = [os.pipe2(os.O_NONBLOCK) for _ in range(2)]
    ws = [WorkerPlacement(index=i, incarnation=1, table=t, wake_fds=[w for _, w in pipes], run_dir=str(tmp_path),
                          clean=True) for i in range(2)]
    return t, pipes, ws


def _pending_bytes(fd: int) -> int:
    import fcntl
    import struct
    import termios

    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_wake_ups_before_the_woken_worker_drains_its_pipe_cost_one_byte(tmp_path):
    t, pipes, (w0, w1) = _placements(tmp_path)
    for _ in range(5):
        w0.poke(1)
    assert (w0.wakeups_sent, w0.wakeups_coalesced, _pending_bytes(pipes[1][0])) == (1, 4, 1)
    assert t.worker_word(1, shm.W_WAKE_PENDING) == 1
    w1.on_wake_pipe(pipes[1][0])
    assert (_pending_bytes(pipes[1][0]), t.worker_word(1, shm.W_WAKE_PENDING)) == (0, 0)
    w0.poke(1)  # after the drain: a byte again
    assert (w0.wakeups_sent, _pending_bytes(pipes[1][0])) == (2, 1)


def test_a_wake_up_drains_more_bytes_than_one_read_takes(tmp_path):
    """One read takes what a wake-up left (a byte, coalesced); more than one read's worth (bytes
    written past the pending word, e.g. by a replaced incarnation) is drained all the same, and
    the pipe is quiet afterwards (no byte left to wake the loop again for nothing)."""
    t, pipes, (w0, w1) = _placements(tmp_path)
    os.write(pipes[1][1], b"\x01" * 5000)
    w0.poke(1)
    w1.on_wake_pipe(pipes[1][0])
    assert (_pending_bytes(pipes[1][0]), t.worker_word(1, shm.W_WAKE_PENDING)) == (0, 0)
    w1.on_wake_pipe(pipes[1][0])  # woken with nothing there (EAGAIN): nothing changes
    assert (_pending_bytes(pipes[1][0]), t.worker_word(1, shm.W_WAKE_PENDING)) == (0, 0)
    w0.poke(1)
    assert (w0.wakeups_sent, _pending_bytes(pipes[1][0])) == (2, 1)


def test_a_wake_up_racing_the_woken_workers_drain_is_never_lost(tmp_path):
    """A child pokes worker 1 as fast as it can while worker 1 drains: a pending word (1)
    always has its byte in the pipe or about to be written, so a wake-up is coalesced into a
    pending one, never into none (the word left 1 with no byte to come would swallow every
    later wake-up of the worker)."""
    import time

    t, pipes, (w0, w1) = _placements(tmp_path)
    stop = t.slot_word_offset(0, shm.S_STATE) // 8  # slot 0 is free: its state word is the test's stop flag
    pid = os.fork()
    if pid == 0:
        try:
            while t.q[stop] == 0:
                w0.poke(1)
        finally:
            os._exit(0)
    lost = 0
    try:
        for _ in range(20000):
            w1.on_wake_pipe(pipes[1][0])
            if t.worker_word(1, shm.W_WAKE_PENDING) == 1 and _pending_bytes(pipes[1][0]) == 0:
                time.sleep(0.05)  # a poke between its compare-and-swap and its write
                if t.worker_word(1, shm.W_WAKE_PENDING) == 1 and _pending_bytes(pipes[1][0]) == 0:
                    lost += 1
                    break
    finally:
        t.q[stop] = 1
        os.waitpid(pid, 0)
    assert lost == 0


def _remote_led_partition(t, w1, owner: int = 0):
    """Partition t-0 as worker 1 sees it while worker `owner` keeps it and this broker leads it:
    its state is the slot's (what the owner publishes)."""
    from types import SimpleNamespace

    from kafkafast.broker.partition import Partition
    from kafkafast.runtime.placement import SlotResidence

    slot = t.allocate(uuid.uuid4().bytes, 0, owner)
    part = Partition("t", 0, SimpleNamespace(state=t.state(slot)), home=SlotResidence(slot, owner, w1, False))
    part.is_leader = True
    return slot, part


def _owner_publishes(t, slot: int, pipes, w0, w1, hw: int) -> None:
    """Worker 0, the owner, publishes high watermark `hw` in the slot and wakes the workers
    parked on it; worker 1 runs its wake-up."""
    t.state(slot).high_watermark = hw
    w0.wake_others_parked_on(slot)
    w1.on_wake_pipe(pipes[1][0])


def test_an_acks_all_wait_on_another_workers_partition_is_answered_by_the_wake_up_that_passes_it(tmp_path):
    """A non-owner's parked acks=all produce waits on the slot without a task: its callback runs
    on the wake-up that finds the owner's published high watermark past its batch, and the
    worker's waiter byte is set exactly while a wait is left."""
    t, pipes, (w0, w1) = _placements(tmp_path)
    slot, part = _remote_led_partition(t, w1)
    t.state(slot).high_watermark = 5
    answers = []
    part.on_hw(10, answers.append)
    part.on_hw(7, answers.append)
    assert answers == [] and t.waiters(slot) == b"\x00\x01"
    _owner_publishes(t, slot, pipes, w0, w1, 8)  # past the second wait only
    assert answers == [0] and t.waiters(slot) == b"\x00\x01"
    _owner_publishes(t, slot, pipes, w0, w1, 12)
    assert answers == [0, 0] and t.waiters(slot) == b"\x00\x00"
    w0.wake_others_parked_on(slot)  # nothing parked any more: no wake-up is sent
    assert _pending_bytes(pipes[1][0]) == 0
    part.on_hw(12, answers.append)  # already passed: answered at once, nothing stays parked
    assert answers == [0, 0, 0] and t.waiters(slot) == b"\x00\x00"


def test_an_acks_all_wait_on_another_workers_partition_fails_when_leadership_is_lost(tmp_path):
    t, pipes, (w0, w1) = _placements(tmp_path)
    slot, part = _remote_led_partition(t, w1)
    answers = []
    part.on_hw(3, answers.append)
    part.is_leader = False  # this worker applied a LeaderAndIsr that moved the leadership
    _owner_publishes(t, slot, pipes, w0, w1, 3)  # (as a follower now: the new leader's high watermark)
    assert answers == [6] and t.waiters(slot) == b"\x00\x00"  # NOT_LEADER_OR_FOLLOWER, not a false success


@pytest.mark.parametrize("passed_at_once", [False, True], ids=["later", "at-once"])
def test_an_acks_all_wait_registered_by_an_answer_of_the_same_partition_stays_parked(tmp_path, passed_at_once):
    """An answer's callback may park another wait on the same partition (the connection's
    next produce) while a third one is still waiting. That wait is answered on a later
    wake-up, or at once when the high watermark already passed it; either way the third one
    stays parked (its waiter byte set) until a wake-up passes it."""
    t, pipes, (w0, w1) = _placements(tmp_path)
    slot, part = _remote_led_partition(t, w1)
    answers = []

    def first(code: int) -> None:
        answers.append(code)
        part.on_hw(11 if passed_at_once else 20, answers.append)

    part.on_hw(10, first)
    part.on_hw(15, answers.append)
    _owner_publishes(t, slot, pipes, w0, w1, 12)
    assert answers == ([0, 0] if passed_at_once else [0]) and t.waiters(slot) == b"\x00\x01"
    _owner_publishes(t, slot, pipes, w0, w1, 20)
    assert answers == [0, 0, 0] and t.waiters(slot) == b"\x00\x00"
