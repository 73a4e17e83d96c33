"""The slot words as attributes (cython_ext/shm_slots.pyx and its pure twin
kafkafast/runtime/_pure_shm_slots.py): each field is the layout's word, both twins read
what either wrote (also from another process), words outside the mapping are refused, and
the table's `SlotState`/`SlotFollower` built on them keep `PartitionState`'s names and
`FollowerState`'s rule."""
from __future__ import annotations

import importlib
import mmap
import os

import pytest

from kafkafast import native
from kafkafast.broker.follower_state import FollowerState
from kafkafast.runtime import shm
from kafkafast.storage.partition_state import FIELDS

FOLLOWER_FIELDS = ("leo", "last_fetch_ms", "leo_at_last_fetch", "last_caught_up_ms")


def twin(flavour: str):
    if flavour == "pure":
        return importlib.import_module(native.PURE_MODULES["shm_slots"])
    try:
        return native.load_compiled("shm_slots")
    except ImportError:
        if os.environ.get("KAFKAFAST_REQUIRE_NATIVE") == "1":
            raise
        pytest.skip("compiled twin not built")


FLAVOURS = pytest.mark.parametrize("flavour", ["cython", "pure"])


def words(n: int = 64) -> memoryview:
    return memoryview(mmap.mmap(-1, n * 8)).cast("q")


@FLAVOURS
def test_every_field_is_its_word_in_layout_order(flavour):
    t = twin(flavour)
    assert t.STATE_FIELDS == FIELDS and t.FOLLOWER_FIELDS == FOLLOWER_FIELDS
    for cls, names in ((t.SlotStateWords, FIELDS), (t.SlotFollowerWords, FOLLOWER_FIELDS)):
        q = words()
        o = cls(q, 7)
        for i, name in enumerate(names):
            value = (-1) ** i * (2**62 + i)
            setattr(o, name, value)
            assert q[7 + i] == value and getattr(o, name) == value
        assert q[6] == 0 and q[7 + len(names)] == 0, "a store outside the fields"
        q[7 + len(names) - 1] = 2**63 - 1
        assert getattr(o, names[-1]) == 2**63 - 1


def test_the_twins_read_what_the_other_wrote_across_a_fork():
    compiled, pure = twin("cython"), twin("pure")
    q = memoryview(mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)).cast("q")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            c = compiled.SlotStateWords(q, 5)
            c.high_watermark, c.offline = 123456789, 1
            compiled.SlotFollowerWords(q, 40).last_caught_up_ms = -5
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    p = pure.SlotStateWords(q, 5)
    assert (p.high_watermark, p.offline, p.log_end_offset) == (123456789, 1, 0)
    assert pure.SlotFollowerWords(q, 40).last_caught_up_ms == -5
    p.log_start_offset = 42
    assert compiled.SlotStateWords(q, 5).log_start_offset == 42


@FLAVOURS
def test_words_outside_the_mapping_are_refused(flavour):
    t = twin(flavour)
    q = words(16)
    t.SlotStateWords(q, 16 - len(FIELDS))  # the last fields end at the mapping's end
    for first in (16 - len(FIELDS) + 1, -1, 1000):
        with pytest.raises(ValueError):
            t.SlotStateWords(q, first)
    with pytest.raises(ValueError):
        t.SlotFollowerWords(q, 13)


@FLAVOURS
def test_the_mapping_stays_open_while_a_slot_uses_it(flavour):
    t = twin(flavour)
    mm = mmap.mmap(-1, 4096)
    o = t.SlotStateWords(memoryview(mm).cast("q"), 0)
    with pytest.raises(BufferError):
        mm.close()  # (the compiled twin's pointer would dangle)
    o.high_watermark = 3
    assert o.high_watermark == 3


def test_table_state_and_follower_use_the_slot_layout(tmp_path):
    table = shm.PartitionTable.create(2, 8, str(tmp_path))
    slot = table.allocate(b"\x01" * 16, 3, 1)
    st = table.state(slot)
    st.high_watermark = 77
    base = table.slot_word_offset(slot, 0) // 8
    assert table.q[base + shm.S_FIELDS + FIELDS.index("high_watermark")] == 77
    assert st.snapshot()["high_watermark"] == 77 and "high_watermark=77" in repr(st)
    assert table.follower(slot, 2) is None
    f = table.follower(slot, 2, claim_keeping={2})
    assert f is not None
    f.reset(1000)
    ref = FollowerState(1000)
    for fetch_offset, leader_leo, now in ((5, 10, 1100), (10, 12, 1200), (12, 20, 1300), (20, 20, 1400)):
        f.on_fetch(fetch_offset, leader_leo, now)
        ref.on_fetch(fetch_offset, leader_leo, now)
        assert [getattr(f, n) for n in FOLLOWER_FIELDS] == [getattr(ref, n) for n in FOLLOWER_FIELDS]
    assert table.follower(slot, 2).leo == 20  # another view of the same entry
