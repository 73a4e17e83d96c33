"""Log writer + LogReader: appends, rolls, sparse indexes, reads, retention, DeleteRecords."""
from __future__ import annotations

import os

import pytest

from kafkafast.protocol.errors import OffsetOutOfRangeError, RecordListTooLargeError
from kafkafast.records import BatchBuilder, decode_batch, encode_batch, iter_record_batches
from kafkafast.storage import LogConfig, LogReader, PartitionState
from kafkafast.storage.log import Log
from kafkafast.storage.offset_index import ENTRY as OFFSET_ENTRY
from kafkafast.storage.segment import LogSegment


def batch(n: int = 1, ts: int = 1000, value: bytes = b"v" * 20) -> bytearray:
    return bytearray(encode_batch([(ts + i, b"k%d" % i, value, ()) for i in range(n)]))


def open_log(tmp_path, **props: str) -> Log:
    cfg = LogConfig.from_props({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(str(tmp_path / "t-0"), "t", 0, cfg, needs_recovery=False, recovery_point=0)


def publish_hw(log: Log) -> None:
    log.state.high_watermark = log.state.log_end_offset


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for _, records in iter_record_batches(data) for r in records]


def test_append_assigns_offsets_and_rolls_at_segment_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes="500")
    size = len(batch(2))
    results = [log.append(batch(2), 7, now_ms=1) for _ in range(12)]
    assert [(r.base_offset, r.last_offset, r.record_count) for r in results[:3]] == [(0, 1, 2), (2, 3, 2), (4, 5, 2)]
    per_segment = 500 // size
    assert [s.base_offset for s in log.segments] == [i * 2 * per_segment for i in range((11 // per_segment) + 1)]
    assert all(s.size <= 500 for s in log.segments)
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    assert log.state.log_end_offset == 24 and log.state.active_base_offset == log.segments[-1].base_offset
    # The leader epoch is written into every batch, offsets in place.
    publish_hw(log)
    header, records = decode_batch(log.reader.read(22, 100).region.read())
    assert (header.base_offset, header.partition_leader_epoch, [r.offset for r in records]) == (22, 7, [22, 23])


def test_every_offset_reads_the_batch_containing_it_across_rolls(tmp_path):
    log = open_log(tmp_path, segment_bytes="700", index_interval_bytes="150")
    for i in range(40):
        log.append(batch(1 + i % 3), 0, now_ms=1)
    publish_hw(log)
    assert len(log.segments) > 3
    reader = LogReader(log.dir, log.state, topic="t", partition=0)
    for off in range(log.log_end_offset):
        res = reader.read(off, 1)  # min one batch: exactly the batch containing `off`
        header, records = decode_batch(res.region.read())
        assert header.base_offset <= off <= header.last_offset
        assert res.first_batch_offset == header.base_offset
        assert res.region.length == header.size
    reader.close()


def test_offset_index_entry_every_index_interval_bytes(tmp_path):
    b = batch(1)
    size = len(b)
    log = open_log(tmp_path, index_interval_bytes=str(size * 3))
    for _ in range(20):
        log.append(batch(1), 0, now_ms=1)
    index = log.active_segment.offset_index
    entries = [OFFSET_ENTRY.unpack_from(index.buffer, i * 8) for i in range(index.entries)]
    # Kafka's rule: an entry once more than interval bytes were written since the last one.
    assert entries == [(4, 4 * size), (8, 8 * size), (12, 12 * size), (16, 16 * size)]
    assert os.path.getsize(index.path) == 4 * 8  # not preallocated
    for off in range(20):
        base, pos = index.find_nearest(off)
        assert base == (off // 4) * 4 if off >= 4 else base == 0
        assert pos == base * size


def test_read_cuts_on_batch_boundaries_and_respects_upper_bound(tmp_path):
    log = open_log(tmp_path, index_interval_bytes="0")
    size = len(batch(1))
    for _ in range(10):
        log.append(batch(1), 0, now_ms=1)
    publish_hw(log)
    res = log.reader.read(0, size * 3 + size // 2)
    assert res.region.length == size * 3 and offsets_in(res.region.read()) == [0, 1, 2]
    res = log.reader.read(2, 10_000, upper_bound_offset=6)
    assert offsets_in(res.region.read()) == [2, 3, 4, 5]
    # KIP-74: the first batch whole even when larger than max_bytes, unless not min_one.
    assert log.reader.read(5, 10).region.length == size
    assert log.reader.read(5, 10, min_one_batch=False).region is None
    assert log.reader.read(10, 100).region is None  # at the log end: empty
    with pytest.raises(OffsetOutOfRangeError):
        log.reader.read(11, 100)


def test_reader_sees_only_published_state(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2), 0, now_ms=1)
    publish_hw(log)
    theirs = PartitionState()
    for name in ("log_start_offset", "log_end_offset", "high_watermark", "active_base_offset",
                 "active_committed_size", "segments_version"):
        setattr(theirs, name, getattr(log.state, name))
    reader = LogReader(log.dir, theirs, topic="t", partition=0)
    log.append(batch(3), 0, now_ms=1)  # written to the file, not published to `theirs`
    res = reader.read(0, 1 << 20)
    assert offsets_in(res.region.read()) == [0, 1]
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(3, 100)
    theirs.active_committed_size = log.state.active_committed_size
    theirs.log_end_offset = theirs.high_watermark = log.state.log_end_offset
    assert offsets_in(reader.read(0, 1 << 20).region.read()) == [0, 1, 2, 3, 4]
    reader.close()


def test_record_set_larger_than_segment_bytes_is_rejected(tmp_path):
    log = open_log(tmp_path, segment_bytes="100")
    with pytest.raises(RecordListTooLargeError):
        log.append(batch(5), 0, now_ms=1)
    assert log.log_end_offset == 0


def test_time_and_size_retention_delete_whole_oldest_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes="300", retention_ms="1000", file_delete_delay_ms="0")
    for i in range(12):
        log.append(batch(1, ts=10_000 + i * 100), 0, now_ms=1)
    publish_hw(log)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    # A reader holding the first segment's fd keeps reading it after deletion.
    reader = LogReader(log.dir, log.state, topic="t", partition=0)
    held = reader.read(0, 1 << 20)
    first_segment_bytes = held.region.read()
    # Time: segments whose max timestamp is older than retention.ms; stop at the first young one.
    newest_of_second = max(10_000 + o * 100 for o in range(bases[1], bases[2]))
    assert log.apply_retention(newest_of_second + 1001) == 2
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.log_start_offset == bases[2] == log.state.log_start_offset
    assert not os.path.exists(os.path.join(log.dir, f"{bases[0]:020d}.log"))
    assert held.region.read() == first_segment_bytes
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(0, 100)
    assert reader.read(bases[2], 100).first_batch_offset == bases[2]
    # Size: oldest whole segments while the rest still exceeds retention.bytes.
    sizes = [s.size for s in log.segments]
    log.config = LogConfig.from_props({"retention.bytes": str(sum(sizes[1:])), "retention.ms": "-1",
                                       "file.delete.delay.ms": "0"})
    assert log.apply_retention(0) == 1
    assert [s.size for s in log.segments] == sizes[1:]
    # Never the active segment.
    log.config = LogConfig.from_props({"retention.bytes": "0", "file.delete.delay.ms": "0"})
    log.apply_retention(0)
    assert len(log.segments) == 1 and log.log_end_offset == 12
    reader.close()


def test_deleted_files_wait_for_file_delete_delay(tmp_path):
    log = open_log(tmp_path, segment_bytes="200", retention_ms="0", file_delete_delay_ms="60000")
    for i in range(6):
        log.append(batch(1, ts=0), 0, now_ms=1)
    publish_hw(log)
    deleted = log.apply_retention(now_ms=1000)
    assert deleted >= 1
    leftovers = [n for n in os.listdir(log.dir) if n.endswith(".deleted")]
    assert len(leftovers) == 3 * deleted
    assert log.delete_pending_files(1000 + 59_999) == 0
    assert log.delete_pending_files(1000 + 60_000) == 3 * deleted
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]


def test_delete_records_moves_log_start_and_drops_segments_below(tmp_path):
    log = open_log(tmp_path, segment_bytes="300", file_delete_delay_ms="0")
    for _ in range(12):
        log.append(batch(1), 0, now_ms=1)
    log.state.high_watermark = 10
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(11)
    second = log.segments[1].base_offset
    assert log.delete_records_before(second + 1) == second + 1
    assert log.segments[0].base_offset == second
    assert log.state.log_start_offset == second + 1
    with pytest.raises(OffsetOutOfRangeError):
        log.reader.read(second, 100)
    res = log.reader.read(second + 1, 100)
    assert res.first_batch_offset == second + 1 and res.log_start_offset == second + 1
    assert log.delete_records_before(3) == second + 1  # never backwards
    assert log.delete_records_before(-1) == 10  # -1: the high watermark


def test_truncate_to_removes_tail_and_later_appends_continue(tmp_path):
    log = open_log(tmp_path, segment_bytes="300", file_delete_delay_ms="0")
    for _ in range(12):
        log.append(batch(1), 3, now_ms=1)
    publish_hw(log)
    log.truncate_to(5)
    assert log.log_end_offset == 5 == log.state.log_end_offset
    assert log.state.high_watermark == 5
    assert all(s.base_offset < 5 for s in log.segments)
    assert log.append(batch(2), 4, now_ms=1).base_offset == 5
    publish_hw(log)
    assert offsets_in(log.reader.read(5, 1 << 20).region.read()) == [5, 6]
    assert decode_batch(log.reader.read(4, 1).region.read())[1][0].offset == 4
    assert log.leader_epochs.entries() == [(3, 0), (4, 5)]


def test_a_log_start_moved_by_retention_keeps_its_epochs_in_memory_until_close_and_a_crash_loses_nothing(tmp_path):
    log = open_log(tmp_path, segment_bytes="300", file_delete_delay_ms="0", retention_bytes="0")
    for epoch in (1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3):
        log.append(batch(1), epoch, now_ms=1)
    publish_hw(log)
    path = os.path.join(log.dir, "leader-epoch-checkpoint")
    on_file = open(path).read()
    assert on_file == "0\n3\n1 0\n2 4\n3 8\n"
    assert log.apply_retention(now_ms=2) >= 1
    start = log.log_start_offset
    assert start > 4
    assert log.leader_epochs.entries()[0] == (2 if start < 8 else 3, start)
    assert open(path).read() == on_file  # no write (two fsyncs) on the retention's path
    # A crash now: the load drops the file's entries below the log start.
    again = Log.open(log.dir, "t", 0, log.config, needs_recovery=True, recovery_point=0,
                     log_start_offset=start)
    assert again.leader_epochs.entries() == log.leader_epochs.entries()
    assert again.leader_epochs.end_offset_for(1, again.log_end_offset)[1] == log.leader_epochs.end_offset_for(
        1, log.log_end_offset)[1]
    again.close()
    log.close()  # a clean close writes what is pending
    assert open(path).read().splitlines()[2] == f"{log.leader_epochs.entries()[0][0]} {start}"


def test_offset_for_timestamp_and_max_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes="400", index_interval_bytes="0")
    # batch k holds records with timestamps 100k, 100k+10, 100k+20
    for k in range(10):
        log.append(bytearray(encode_batch([(100 * k + 10 * i, None, b"x", ()) for i in range(3)])), 0, now_ms=1)
    publish_hw(log)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(415) == (14, 420)  # batch 4: offsets 12,13,14 at 400,410,420
    assert log.offset_for_timestamp(421) == (15, 500)
    assert log.offset_for_timestamp(921) is None
    assert log.max_timestamp_offset() == (920, 29)


def test_log_append_time_rewrites_timestamps(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    r = log.append(batch(2, ts=5), 0, now_ms=123456)
    assert r.log_append_time == 123456
    publish_hw(log)
    header, records = decode_batch(log.reader.read(0, 100).region.read())
    assert header.max_timestamp == 123456 and [x.timestamp for x in records] == [123456, 123456]


def test_flush_messages_policy_fdatasyncs_every_n_messages(tmp_path, monkeypatch):
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    log = open_log(tmp_path, flush_messages="3")
    for _ in range(10):
        log.append(batch(1), 0, now_ms=1)
    assert len(calls) == 3 and log.recovery_point == 9
    calls.clear()
    log.config = LogConfig.from_props({"flush.ms": "1000"})
    assert log.maybe_flush(now_ms=0 + log._last_flush_ms + 999) is False
    assert log.maybe_flush(now_ms=log._last_flush_ms + 1000) is True
    assert len(calls) == 1 and log.recovery_point == 10


def test_segment_ms_rolls_old_segment(tmp_path):
    log = open_log(tmp_path, segment_ms="1000")
    log.append(batch(1), 0, now_ms=10_000)
    log.append(batch(1), 0, now_ms=11_000)
    assert len(log.segments) == 1
    log.append(batch(1), 0, now_ms=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_replace_segments_swaps_in_cleaned_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes="300", file_delete_delay_ms="0")
    for _ in range(10):
        log.append(batch(1), 0, now_ms=1)
    publish_hw(log)
    old = log.segments[:2]
    cleaned = LogSegment.create(log.dir, 0, log.config, suffix=".cleaned")
    b = BatchBuilder(base_offset=old[1].next_offset - 1)
    b.append(1, b"k", b"compacted")
    data = bytearray(b.build())
    cleaned.append(data, [(old[1].next_offset - 1, old[1].next_offset, 1, len(data))], now_ms=1)
    log.replace_segments(old, [cleaned])
    assert [s.base_offset for s in log.segments][0] == 0
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    res = log.reader.read(0, 1 << 20)
    header, records = decode_batch(res.region.read())
    assert [(r.offset, r.value) for r in records] == [(old[1].next_offset - 1, b"compacted")]
    log.close()
    again = open_log(tmp_path)
    assert again.log_end_offset == 10


def test_reads_from_where_the_last_read_ended_follow_appends_and_truncations(tmp_path):
    """A reader keeping up (each read from the offset after its last answer, as a follower
    fetches) starts at the batch where its last read ended (`LogReader._ends`) and gets every
    record once, in order, across index entries and segment rolls; after a truncation and
    appends of other batch sizes at the same offsets, it reads the new batches, not the old
    positions."""
    log = open_log(tmp_path, segment_bytes="4000", index_interval_bytes="400", file_delete_delay_ms="0")
    reader = log.reader
    seen, next_offset = [], 0
    for i in range(120):
        log.append(batch(1 + i % 3), 1, now_ms=1)
        publish_hw(log)
        res = reader.read(next_offset, 1 << 20)
        got = offsets_in(res.region.read())
        seen += got
        next_offset = got[-1] + 1
        if i % 7 == 0:  # a reader with a small byte limit: its read ends mid-log
            part = reader.read(max(next_offset - 2, 0), 1, upper_bound_offset=next_offset)
            assert offsets_in(part.region.read())[0] <= max(next_offset - 2, 0)
    assert seen == list(range(log.log_end_offset))
    assert len(log.segments) > 2
    end = log.log_end_offset
    log.truncate_to(end - 5)
    log.append(batch(5, value=b"w" * 50), 2, now_ms=1)  # offsets end-5 .. end-1 again, other positions
    log.append(batch(1, value=b"x"), 2, now_ms=1)
    publish_hw(log)
    res = reader.read(end - 5, 1 << 20)
    header, records = decode_batch(res.region.read()[:res.region.length])
    assert header.base_offset == end - 5 and [r.value for r in records] == [b"w" * 50] * 5
    after = reader.read(end, 1 << 20)
    assert offsets_in(after.region.read()) == [end]
    assert decode_batch(after.region.read())[1][0].value == b"x"


def test_index_entries_follow_the_per_batch_rule_whatever_the_appends(tmp_path):
    """An append's index entries are made over its batches at once (`track_run`): they are
    Kafka's per-batch rule's (an entry once more than index.interval.bytes were written since
    the last; the time index's the max timestamp so far, when it grew), and the files the same
    whether the batches come one per append or many, with timestamps that go back and forth.
    (One segment: where a log rolls depends on the appends.)"""
    import random

    from kafkafast.records import assign_offsets
    from kafkafast.storage.time_index import ENTRY as TIME_ENTRY

    rnd = random.Random(7)
    batches, offset = [], 0
    for i in range(300):
        n = rnd.randint(1, 6)
        ts = 1_000_000 + i * 10 + rnd.randint(-40, 40)
        b = batch(n, ts=ts, value=rnd.randbytes(rnd.randint(5, 900)))
        assign_offsets(b, offset, 1)
        batches.append((offset, ts + n - 1, b))
        offset += n
    interval = 1500
    want_offsets, want_times = [], []
    since = pos = 0
    max_ts = last_ts = -1
    for base, batch_max_ts, b in batches:  # the rule, batch by batch
        if batch_max_ts > max_ts:
            max_ts, offset_of_max = batch_max_ts, base
        if since > interval:
            want_offsets.append((base, pos))
            if max_ts > last_ts:
                want_times.append((max_ts, offset_of_max))
                last_ts = max_ts
            since = 0
        since += len(b)
        pos += len(b)

    props = dict(index_interval_bytes=str(interval), segment_bytes=str(8 << 20))
    one = open_log(tmp_path / "one", **props)
    for _, _, b in batches:
        one.append_as_follower(b, now_ms=1)
    many = open_log(tmp_path / "many", **props)
    i = 0
    while i < len(batches):
        k = rnd.choice([1, 2, 3, 7, 20])
        many.append_as_follower(b"".join(b for _, _, b in batches[i:i + k]), now_ms=1)
        i += k
    for log in (one, many):
        oi, ti = log.active_segment.offset_index, log.active_segment.time_index
        assert [(r, p) for r, p in (OFFSET_ENTRY.unpack_from(oi.buffer, j * 8) for j in range(oi.entries))] == want_offsets
        assert [TIME_ENTRY.unpack_from(ti.buffer, j * 12) for j in range(ti.entries)] == want_times
        log.close()
    assert len(want_offsets) > 50 and len(want_times) > 50

    def files(log_dir):
        return {name: (log_dir / name).read_bytes() for name in sorted(os.listdir(log_dir))
                if name.endswith((".log", ".index", ".timeindex"))}

    assert files(tmp_path / "many" / "t-0") == files(tmp_path / "one" / "t-0")
