"""The shared-memory partition table: slots by (topic id, partition), published state
seen across a fork, waiter bytes, metadata generation."""
from __future__ import annotations

import os
import uuid

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
