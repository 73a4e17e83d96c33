"""LogReader remembers where a read ended (`_ends`) and starts the next read at that offset there,
without the index lookup; the position is never used once the segment list changed: after a
roll, a truncation and new appends, retention deleting the segment, or compaction replacing it,
every read answers what a reader that never read before answers."""
from __future__ import annotations

import pytest

from kafkafast.protocol.errors import OffsetOutOfRangeError
from kafkafast.records import encode_batch, iter_record_batches
from kafkafast.storage import LogConfig, LogReader
from kafkafast.storage.cleaner import LogCleaner
from kafkafast.storage.log import Log

NOW = 10_000_000


class CountingReader(LogReader):
    """A reader that counts its index lookups."""

    __slots__ = ("lookups",)

    def __init__(self, log: Log) -> None:
        super().__init__(log.dir, log.state, topic="t", partition=0)
        self.lookups = 0

    def _start(self, h, offset, limit):
        self.lookups += 1
        return LogReader._start(h, offset, limit)


def open_log(tmp_path, **props: str) -> Log:
    base = {"segment.bytes": "4000", "index.interval.bytes": "100", "file.delete.delay.ms": "0"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig.from_props(base), needs_recovery=False, recovery_point=0)


def append(log: Log, n: int = 1, key: bytes | None = None, value: bytes = b"v" * 30) -> None:
    data = encode_batch([(NOW - 1000 + i, key if key is not None else b"k%d" % i, value, ()) for i in range(n)])
    log.append(bytearray(data), 0, now_ms=NOW - 1000)
    log.state.high_watermark = log.state.log_end_offset


def answer(reader: LogReader, offset: int, max_bytes: int, upper: int | None = None):
    """(first batch offset, region bytes) of a read, or the error's type."""
    try:
        res = reader.read(offset, max_bytes, upper_bound_offset=upper)
    except OffsetOutOfRangeError as exc:
        return type(exc)
    return res.first_batch_offset, res.region.read() if res.region is not None else b""


def same_as_fresh(log: Log, reader: LogReader, offset: int, max_bytes: int = 1 << 20, upper: int | None = None):
    got = answer(reader, offset, max_bytes, upper)
    fresh = LogReader(log.dir, log.state, topic="t", partition=0)
    try:
        assert got == answer(fresh, offset, max_bytes, upper)
    finally:
        fresh.close()
    return got


def next_offset(region: bytes) -> int:
    return [h.next_offset for h, _ in iter_record_batches(region)][-1]


def follow(log: Log, reader: LogReader, offset: int, max_bytes: int = 1 << 20) -> int:
    """Reads from `offset` to the log end as a follower does (each read where the last ended)."""
    while offset < log.log_end_offset:
        first, region = same_as_fresh(log, reader, offset, max_bytes)
        assert region
        offset = next_offset(region)
    return offset


def followed(tmp_path, batches: int, records: int) -> tuple[Log, CountingReader, int]:
    """A log of `batches` batches of `records` records, a reader that read it all as a follower
    does, and where its last read ended."""
    log = open_log(tmp_path)
    reader = CountingReader(log)
    for _ in range(batches):
        append(log, records)
    return log, reader, follow(log, reader, 0)


def test_a_read_where_the_last_ended_skips_the_lookup(tmp_path):
    log, reader, offset = followed(tmp_path, 3, 3)
    assert reader.lookups == 1
    for _ in range(5):  # a follower keeping up: one batch at a time at the log end
        append(log, 2)
        offset = follow(log, reader, offset)
    assert reader.lookups == 1
    follow(log, reader, 0, max_bytes=200)  # cut by max_bytes: the next read starts at the cut
    assert reader.lookups == 2
    hw = offset  # where the follower's last read ended
    append(log, 2)
    append(log, 2)
    first, region = same_as_fresh(log, reader, 0, upper=hw)  # a consumer: up to the high watermark
    assert first == 0 and next_offset(region) == hw
    assert reader.lookups == 3  # its start only: the bound is where the follower's read ended
    same_as_fresh(log, reader, hw, upper=hw + 2)
    assert reader.lookups == 4  # the bound hw + 2 is looked up
    same_as_fresh(log, reader, hw + 2)
    assert reader.lookups == 4
    same_as_fresh(log, reader, 1)  # inside a batch: looked up
    assert reader.lookups == 5


def test_after_a_roll(tmp_path):
    log = open_log(tmp_path, segment_bytes="600")
    reader = CountingReader(log)
    append(log, 3)
    offset = follow(log, reader, 0)
    segments = len(log.segments)
    while len(log.segments) == segments:
        append(log, 3)
    assert log.segments[-1].base_offset == log.log_end_offset - 3
    follow(log, reader, offset)
    log.roll()
    append(log, 1)
    follow(log, reader, offset)


def test_after_truncation_and_new_appends(tmp_path):
    log, reader, end = followed(tmp_path, 4, 1)
    assert end == 4
    size = len(same_as_fresh(log, reader, 0, max_bytes=1)[1])
    _, region = same_as_fresh(log, reader, 0, max_bytes=2 * size + 10)  # ends before offset 2
    assert next_offset(region) == 2
    log.truncate_to(1)
    append(log, 4, value=b"w" * 7)  # offsets 1-4 in one batch: 2 and 4 are inside it now
    append(log, 2, value=b"x")
    for offset in (2, 4, end, 1, 0):
        same_as_fresh(log, reader, offset)
    follow(log, reader, 0)


def test_after_retention_deletes_the_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes="600", retention_bytes="700")
    reader = CountingReader(log)
    append(log, 2)
    _, region = same_as_fresh(log, reader, 0, max_bytes=100)
    cached = next_offset(region)
    while len(log.segments) < 4:
        append(log, 2)
    assert log.apply_retention(NOW) > 0
    assert log.log_start_offset > cached
    assert same_as_fresh(log, reader, cached) is OffsetOutOfRangeError
    follow(log, reader, log.log_start_offset)


def test_after_compaction_replaces_the_segment(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact", segment_bytes="2000")
    reader = CountingReader(log)
    for i in range(30):
        append(log, 1, key=b"k%d" % (i % 4), value=b"v%d" % i)
    append(log, 1, key=b"tail")
    log.roll()
    starts = []  # a read ending at every batch of the first segments
    offset = 0
    while offset < log.log_end_offset:
        first, region = same_as_fresh(log, reader, offset, max_bytes=1)
        starts.append(offset)
        offset = next_offset(region)
    stats = LogCleaner([str(tmp_path)]).clean_now(log, NOW)
    assert stats.records_out < stats.records_in
    for offset in starts:
        same_as_fresh(log, reader, offset)
    follow(log, reader, 0)


@pytest.mark.parametrize("upper_gap", [0, 1])
def test_a_remembered_end_past_the_bound_reads_nothing_beyond_it(tmp_path, upper_gap):
    log, reader, end = followed(tmp_path, 4, 2)
    append(log, 2)
    append(log, 2)
    upper = log.log_end_offset - 2 * upper_gap
    first, region = same_as_fresh(log, reader, end, upper=upper)
    assert region and next_offset(region) <= upper
