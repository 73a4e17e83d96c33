"""Index binary search twins against a bisect reference (offset index and time index)."""
from __future__ import annotations

import bisect
import mmap
import struct
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkafast import native


@pytest.fixture(params=["cython", "pure"])
def search(request: pytest.FixtureRequest) -> ModuleType:
    """The index_search twin under test: compiled, then pure."""
    if request.param == "pure":
        return native.load_pure("index_search")
    try:
        return native.load_compiled("index_search")
    except ImportError:
        pytest.skip("compiled twin not built")


def offset_index(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def time_index(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


OFFSETS = [(0, 0), (10, 4096), (25, 8192), (40, 12288)]
TIMES = [(1000, 0), (2000, 10), (2000, 11), (3000, 25)]


@pytest.mark.parametrize(("target", "slot"), [(-1, -1), (0, 0), (9, 0), (10, 1), (24, 1), (25, 2), (40, 3), (2**31, 3)])
def test_offset_index_lookup_finds_floor_entry(search: ModuleType, target: int, slot: int) -> None:
    assert search.offset_index_lookup(offset_index(OFFSETS), len(OFFSETS), target) == slot


@pytest.mark.parametrize(("target", "floor", "ceil"), [(999, -1, 0), (1000, 0, 0), (1500, 0, 1), (2000, 2, 1), (2001, 2, 3), (3000, 3, 3), (3001, 3, -1)])
def test_time_index_lookups(search: ModuleType, target: int, floor: int, ceil: int) -> None:
    buf = time_index(TIMES)
    assert search.time_index_lookup(buf, len(TIMES), target) == floor
    assert search.time_index_lookup_ceil(buf, len(TIMES), target) == ceil


def test_empty_index_has_no_slot(search: ModuleType) -> None:
    assert search.offset_index_lookup(b"", 0, 5) == -1
    assert search.time_index_lookup(b"", 0, 5) == -1
    assert search.time_index_lookup_ceil(b"", 0, 5) == -1


def test_only_the_first_n_entries_are_searched(search: ModuleType) -> None:
    # Preallocated index files are zero-filled past the last entry.
    buf = offset_index(OFFSETS) + b"\x00" * 80
    assert search.offset_index_lookup(buf, 2, 100) == 1


def test_entry_count_beyond_buffer_is_rejected(search: ModuleType) -> None:
    with pytest.raises(ValueError):
        search.offset_index_lookup(offset_index(OFFSETS), 5, 0)
    with pytest.raises(ValueError):
        search.time_index_lookup(time_index(TIMES)[:-1], 4, 0)
    with pytest.raises(ValueError):
        search.time_index_lookup_ceil(b"", -1, 0)


def test_accepts_every_buffer_type(search: ModuleType, tmp_path) -> None:  # type: ignore[no-untyped-def]
    raw = offset_index(OFFSETS)
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(raw)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for buf in (raw, bytearray(raw), memoryview(raw), memoryview(b"x" + raw)[1:], mm):
            assert search.offset_index_lookup(buf, 4, 30) == 2


sorted_ints32 = st.lists(st.integers(0, 2**31 - 1), max_size=200).map(sorted)
sorted_ints64 = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200).map(sorted)


@settings(max_examples=200, deadline=None)
@given(rels=sorted_ints32, target=st.integers(-(2**31), 2**31 + 5))
def test_offset_index_lookup_matches_bisect(rels: list[int], target: int) -> None:
    buf = offset_index([(r, i) for i, r in enumerate(rels)])
    expected = bisect.bisect_right(rels, target) - 1
    for name in ("pure", "cython"):
        module = _twin(name)
        if module is not None:
            assert module.offset_index_lookup(buf, len(rels), target) == expected


@settings(max_examples=200, deadline=None)
@given(stamps=sorted_ints64, target=st.integers(-(2**63), 2**63 - 1))
def test_time_index_lookups_match_bisect(stamps: list[int], target: int) -> None:
    buf = time_index([(t, i) for i, t in enumerate(stamps)])
    floor = bisect.bisect_right(stamps, target) - 1
    ceil = bisect.bisect_left(stamps, target)
    ceil = ceil if ceil < len(stamps) else -1
    for name in ("pure", "cython"):
        module = _twin(name)
        if module is not None:
            assert module.time_index_lookup(buf, len(stamps), target) == floor
            assert module.time_index_lookup_ceil(buf, len(stamps), target) == ceil


def _twin(name: str) -> ModuleType | None:
    if name == "pure":
        return native.load_pure("index_search")
    try:
        return native.load_compiled("index_search")
    except ImportError:
        return None
