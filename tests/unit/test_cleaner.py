"""Log compaction (kafkafast/storage/cleaner.py) on real segment files, no broker."""
from __future__ import annotations

import os

import pytest

from kafkafast.records import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_ZSTD,
    decode_batch,
    encode_batch,
    iter_record_batches,
    read_batch_header,
)
from kafkafast.storage import LogConfig
from kafkafast.storage.cleaner import LogCleaner, rebuild_batch
from kafkafast.storage.log import Log

NOW = 10_000_000


def open_log(tmp_path, **props: str) -> Log:
    base = {"cleanup.policy": "compact", "segment.bytes": "2000", "file.delete.delay.ms": "0"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig.from_props(base), needs_recovery=False,
                    recovery_point=0)


def append(log: Log, records, codec=CODEC_NONE, ts=NOW - 1000, **kw) -> None:
    data = encode_batch([(ts, k, v, ()) for k, v in records], codec, **kw)
    log.append(bytearray(data), 0, now_ms=ts)
    log.state.high_watermark = log.state.log_end_offset


def read_all(log: Log):
    out, headers = [], []
    pos = log.log_start_offset
    while pos < log.log_end_offset:
        res = log.reader.read(pos, 1 << 20)
        if res.region is None:
            break
        for h, records in iter_record_batches(res.region.read()):
            headers.append(h)
            out += [(r.offset, r.key, r.value) for r in records]
            pos = h.next_offset
    return out, headers


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_ZSTD])
def test_cleaning_keeps_latest_value_per_key_at_its_original_offset(tmp_path, codec):
    log = open_log(tmp_path)
    expected = {}
    offset = 0
    for round_ in range(30):
        batch = [(b"k%d" % ((round_ * 3 + i) % 10), b"v%d-%d" % (round_, i)) for i in range(3)]
        append(log, batch, codec)
        for k, v in batch:
            expected[k] = (offset, v)
            offset += 1
    append(log, [(b"tail", b"x")], codec)  # keeps the last data batch out of the active segment
    log.roll()
    before_segments = len(log.segments)
    stats = LogCleaner([str(tmp_path)]).clean_now(log, NOW)
    assert stats.records_in == 91 and stats.records_out == 11
    records, headers = read_all(log)
    got = {k: (o, v) for o, k, v in records if k != b"tail"}
    assert got == expected
    assert [o for o, _, _ in records] == sorted(o for o, _ in expected.values()) + [90]
    assert len(log.segments) < before_segments
    assert all(h.compression == codec for h in headers)
    assert log.log_end_offset == 91
    # The cleaned log reopens (recovery validates every batch and CRC).
    log.close()
    again = open_log(tmp_path)
    assert read_all(again)[0] == records and again.log_end_offset == 91


def test_rebuilt_batch_keeps_identity_and_offset_deltas():
    raw = encode_batch([(1000 + i, b"k%d" % i, b"v", ()) for i in range(5)], CODEC_GZIP, base_offset=100,
                       producer_id=7, producer_epoch=2, base_sequence=40, partition_leader_epoch=3)
    header, records = decode_batch(raw)
    out = rebuild_batch(header, [records[1], records[3]])
    h2, r2 = decode_batch(out)  # checks the CRC
    assert (h2.base_offset, h2.last_offset_delta, h2.producer_id, h2.producer_epoch, h2.base_sequence,
            h2.partition_leader_epoch, h2.compression, h2.records_count) == (100, 4, 7, 2, 40, 3, CODEC_GZIP, 2)
    assert [(r.offset, r.timestamp, r.key) for r in r2] == [(101, 1001, b"k1"), (103, 1003, b"k3")]
    assert h2.max_timestamp == 1003 and h2.last_sequence == 44


def test_tombstones_stay_until_delete_retention_then_go(tmp_path):
    log = open_log(tmp_path, delete_retention_ms="5000")
    for i in range(20):
        append(log, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], ts=NOW - 60_000)
    append(log, [(b"b", None)], ts=NOW - 1000)  # tombstone written 1 s ago
    append(log, [(b"tail", b"x")], ts=NOW - 1000)
    log.roll()
    cleaner = LogCleaner([str(tmp_path)])
    cleaner.clean_now(log, NOW)
    records, _ = read_all(log)
    assert [(k, v) for _, k, v in records] == [(b"a", b"1"), (b"c", b"3"), (b"b", None), (b"tail", b"x")]
    assert cleaner.tombstone_due[("t", 0)] == NOW - 1000 + 5000
    # After delete.retention.ms the tombstone is due: the log is cleanable without new dirt.
    assert cleaner.filthiest([log], NOW + 5000) is log
    stats = cleaner.clean_now(log, NOW + 5000)
    assert stats.tombstones_dropped == 1
    records, _ = read_all(log)
    assert [(k, v) for _, k, v in records] == [(b"a", b"1"), (b"c", b"3"), (b"tail", b"x")]
    assert ("t", 0) not in cleaner.tombstone_due


def test_dirty_ratio_governs_background_cleaning_and_checkpoint_persists(tmp_path):
    log = open_log(tmp_path, min_cleanable_dirty_ratio="0.5")
    for i in range(40):
        append(log, [(b"k%d" % (i % 4), b"v%d" % i)])
    log.roll()
    cleaner = LogCleaner([str(tmp_path)], backoff_ms=0)
    assert cleaner.dirty_ratio(log, NOW)[0] == 1.0
    assert cleaner.periodic([log], NOW) is True
    while cleaner.periodic([log], NOW):
        pass
    assert cleaner.cleanings == 1
    assert cleaner.dirty_ratio(log, NOW) == (0.0, 0)
    assert cleaner.filthiest([log], NOW) is None
    assert "cleaner-offset-checkpoint" in os.listdir(tmp_path)
    assert LogCleaner([str(tmp_path)]).clean_points[("t", 0)] == 40


def test_segments_are_merged_up_to_segment_bytes_and_empty_results_read_through(tmp_path):
    log = open_log(tmp_path, segment_bytes="600")
    for i in range(60):
        append(log, [(b"same", b"v%d" % i)])
    append(log, [(b"other", b"o")])
    log.roll()
    assert len(log.segments) > 5
    LogCleaner([str(tmp_path)]).clean_now(log, NOW)
    records, _ = read_all(log)
    assert records == [(59, b"same", b"v59"), (60, b"other", b"o")]
    assert len(log.segments) <= 3
    for off in range(0, 61):
        res = log.reader.read(off, 1)
        h = read_batch_header(res.region.read(), 0)
        assert h.last_offset >= off


def test_non_compacted_logs_are_never_chosen(tmp_path):
    log = open_log(tmp_path, cleanup_policy="delete")
    for i in range(40):
        append(log, [(b"k", b"v")])
    log.roll()
    assert LogCleaner([str(tmp_path)], backoff_ms=0).filthiest([log], NOW) is None


def test_compaction_removes_aborted_transactions_keeps_committed_and_stops_at_open_ones(tmp_path):
    from kafkafast.storage import txn_index

    log = open_log(tmp_path, delete_retention_ms="5000")
    ts = NOW - 60_000
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}

    def marker(kind: int) -> None:
        log.append(txn_index.control_batch(7, 0, kind, 0, ts), 0, now_ms=ts)
        log.state.high_watermark = log.state.log_end_offset

    append(log, [(b"a", b"committed"), (b"b", b"committed")], ts=ts, base_sequence=0, **txn)  # 0-1
    marker(txn_index.COMMIT)                                                                   # 2
    append(log, [(b"a", b"aborted"), (b"c", b"aborted")], ts=ts, base_sequence=2, **txn)      # 3-4
    marker(txn_index.ABORT)                                                                    # 5
    append(log, [(b"tail", b"x")], ts=ts)                                                      # 6
    log.roll()
    cleaner = LogCleaner([str(tmp_path)])
    stats = cleaner.clean_now(log, NOW)
    assert stats.aborted_dropped == 2
    records, headers = read_all(log)
    # The aborted "a" never displaced the committed one; the ABORT marker is past delete.retention.ms.
    assert [(o, k, v) for o, k, v in records if k is None or k[:1] != b"\x00"] == [
        (0, b"a", b"committed"), (1, b"b", b"committed"), (6, b"tail", b"x")]
    assert [h.base_offset for h in headers if h.is_control] == [2]  # the COMMIT marker stays
    # An open transaction: nothing from its first offset on is cleaned.
    append(log, [(b"d", b"open")], ts=ts, base_sequence=4, **txn)                              # 7
    append(log, [(b"tail", b"y")], ts=ts)
    log.roll()
    assert cleaner._first_uncleanable(log, NOW)[1] <= 7
    log.close()


def test_dedupe_buffer_bounds_the_keys_of_one_cleaning_and_the_next_continues(tmp_path):
    """log.cleaner.dedupe.buffer.size: a map for 9 keys (24 bytes each, filled to 90%) cleans
    48 keys in several cleanings, each up to where its map filled, with the same result as
    one unbounded cleaning; a tombstone beyond the mapped part of its segment is kept until a
    cleaning maps it (else the key's older value, not yet known to be replaced, would return)."""
    log = open_log(tmp_path, delete_retention_ms="0")
    expected = {}
    offset = 0
    for round_ in range(2):
        for i in range(0, 40, 4):
            batch = [(b"k%02d" % j, b"r%d" % round_) for j in range(i, i + 4)]
            append(log, batch, ts=NOW - 60_000)
            for k, v in batch:
                expected[k] = (offset, v)
                offset += 1
    filler = [(b"f%d" % j, b"f") for j in range(8)]  # offsets 80-87: the map fills before them ...
    append(log, filler, ts=NOW - 60_000)
    expected.update((k, (80 + j, v)) for j, (k, v) in enumerate(filler))
    append(log, [(b"k00", None)], ts=NOW - 60_000)  # ... so this tombstone (88) waits until it is mapped
    del expected[b"k00"]
    append(log, [(b"tail", b"x")])
    log.roll()
    cleaner = LogCleaner([str(tmp_path)], dedupe_buffer_size=10 * 24)
    assert cleaner.map_capacity == 9
    stats = cleaner.clean_now(log, NOW)
    assert cleaner.clean_points[("t", 0)] == 8  # two batches of 4 keys mapped, the third would pass 9
    assert stats.tombstones_dropped == 0
    records, _ = read_all(log)
    assert len(records) == 90  # nothing had a later offset within the map's range
    points = [8]
    while cleaner.clean_points[("t", 0)] < log.segments[-1].base_offset:  # up to the active segment
        cleaner.clean_now(log, NOW)
        points.append(cleaner.clean_points[("t", 0)])
        assert points[-1] > points[-2] and len(points) < 20
    records, _ = read_all(log)
    assert {k: (o, v) for o, k, v in records if k != b"tail"} == expected
    cleaner.reconfigure(backoff_ms=0, io_max_bytes_per_second=float("inf"), dedupe_buffer_size=128 << 20)
    assert cleaner.map_capacity == int((128 << 20) // 24 * 0.9)
