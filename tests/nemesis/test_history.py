"""The nemesis checker classifies each kind of anomaly it is meant to find (a checker that
cannot see a loss would let every run pass)."""
from __future__ import annotations

from tests.nemesis.history import check
from tests.nemesis.load import Ack, ReadBack


def test_checker_counts_each_anomaly_once():
    acks = [Ack("p0-00000000", 0, 0, 1.0), Ack("p0-00000001", 0, 1, 1.1),   # read back as acked
            Ack("p0-00000002", 0, 2, 1.2),                                   # lost: offset 2 holds another value
            Ack("p1-00000000", 0, 2, 1.3),                                   # divergent with the one above
            Ack("p0-00000003", 1, 0, 1.4),                                   # misplaced: read at offset 1
            Ack("p0-00000004", 2, 5, 9.0)]                                   # unreadable: p2 read stopped at 3
    read = ReadBack(records={0: [(0, "p0-00000000"), (1, "p0-00000001"), (2, "p1-00000000"), (3, "p0-00000001")],
                             1: [(0, "p1-00000009"), (1, "p0-00000003"), (2, "p1-00000005")],
                             2: [(0, "p0-00000010")]},
                    high_watermarks={0: 4, 1: 3, 2: 6}, unreadable_from={2: 3})
    v = check(acks, read, load_start=0.0, load_end=10.0, window_s=5.0)
    assert (v.acked, v.lost, v.unreadable, v.divergent, v.misplaced) == (6, 1, 1, 1, 1)
    assert v.duplicates == 1            # p0-00000001 at offsets 1 and 3 of partition 0
    assert v.out_of_order == 1          # p1-00000005 after p1-00000009 in partition 1
    # partition 1: acked at 1.4 only -> 8.6 s without acknowledgement until the load ended;
    # partition 2: nothing until 9.0
    assert v.max_unavailable_s == 9.0
    assert (1, 1.4, 8.6) in v.unavailable_windows and (2, 0.0, 9.0) in v.unavailable_windows


def test_a_clean_history_has_no_anomaly():
    acks = [Ack(f"p0-{i:08d}", i % 2, i // 2, 0.5 * i) for i in range(10)]
    read = ReadBack(records={p: [(i // 2, f"p0-{i:08d}") for i in range(10) if i % 2 == p] for p in (0, 1)},
                    high_watermarks={0: 5, 1: 5})
    v = check(acks, read, load_start=0.0, load_end=5.0)
    assert (v.lost, v.unreadable, v.duplicates, v.divergent, v.misplaced, v.out_of_order) == (0, 0, 0, 0, 0, 0)
    assert v.unavailable_windows == []


def test_an_ack_without_an_offset_is_placed_by_its_partition():
    """librdkafka may report a delivery without an offset (OFFSET_INVALID): read once in its
    partition it is no anomaly; read in another partition it is misplaced; not read, lost."""
    acks = [Ack("p0-00000000", 0, None, 1.0), Ack("p0-00000001", 1, None, 1.1), Ack("p0-00000002", 1, None, 1.2)]
    read = ReadBack(records={0: [(0, "p0-00000000"), (1, "p0-00000001")], 1: []},
                    high_watermarks={0: 2, 1: 0}, unreadable_from={1: 0})
    v = check(acks, read, load_start=0.0, load_end=2.0)
    assert (v.misplaced, v.lost, v.unreadable, v.divergent, v.duplicates) == (1, 1, 0, 0, 0)
