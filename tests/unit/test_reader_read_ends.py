"""LogReader remembers where a read ended (`_ends`) and starts the next read at that offset there,
without the index lookup; the position is never used once the segment list changed: after a
roll, a truncation and new appends, retention deleting the segment, or compaction replacing it,
every read answers what a reader that never read before answers. Every test runs twice: reading
with `read`, and with `region` (the fetch handler's call, which answers a read that starts at a
remembered end in the active segment and ends at the log end without `read`'s other steps)."""
from __future__ import annotations

import pytest

from kafkafast.protocol.errors import OffsetOutOfRangeError
from kafkafast.records import encode_batch, iter_record_batches
from kafkafast.storage import LogConfig, LogReader
from kafkafast.storage.cleaner import LogCleaner
from kafkafast.storage.log import Log

NOW = 10_000_000


class CountingReader(LogReader):
    """A reader that counts its index lookups and its `read` calls; `via_region`: the tests
    read with `region`."""

    __slots__ = ("lookups", "reads")
    via_region = False

    def __init__(self, log: Log, state=None) -> None:
        super().__init__(log.dir, log.state if state is None else state, topic="t", partition=0)
        self.lookups = 0
        self.reads = 0

    def _start(self, h, offset, limit):
        self.lookups += 1
        return LogReader._start(h, offset, limit)

    def read(self, *args, **kwargs):
        self.reads += 1
        return LogReader.read(self, *args, **kwargs)


class OtherProcessView:
    """The log's published state as a reader in another process sees it (a worker's slot): the
    same fields, not `paired_ends` (a log end and a committed size read together may be two
    appends')."""

    def __init__(self, state) -> None:
        object.__setattr__(self, "_state", state)

    def __getattr__(self, name: str):
        if name == "paired_ends":
            raise AttributeError(name)
        return getattr(self._state, name)


@pytest.fixture(autouse=True, params=["read", "region"])
def via(request, monkeypatch):
    monkeypatch.setattr(CountingReader, "via_region", request.param == "region")
    return request.param


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
        if isinstance(reader, CountingReader) and reader.via_region:
            region = reader.region(offset, max_bytes, upper)
            data = region.read() if region is not None else b""
            return next(iter_record_batches(data))[0].base_offset if data else -1, data
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


def followed(tmp_path, batches: int, records: int, other_process: bool = False) -> tuple[Log, CountingReader, int]:
    """A log of `batches` batches of `records` records, a reader that read it all as a follower
    does (`other_process`: through `OtherProcessView`), and where its last read ended."""
    log = open_log(tmp_path)
    reader = CountingReader(log, OtherProcessView(log.state) if other_process else None)
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


def test_a_caught_up_follower_reads_through_region_alone(tmp_path, via):
    log, reader, offset = followed(tmp_path, 3, 3)
    reads = reader.reads
    for n in range(1, 6):  # a follower keeping up: one batch at a time at the log end
        append(log, n)
        offset = follow(log, reader, offset)
    assert offset == log.log_end_offset
    assert reader.lookups == 1
    assert reader.reads == (reads if via == "region" else reads + 5)
    append(log, 40)  # more than the byte limit: `read` cuts it
    same_as_fresh(log, reader, offset, max_bytes=300)
    assert reader.reads > reads


def test_a_read_that_saw_the_bytes_of_an_append_before_its_log_end(tmp_path):
    """A reader in another process may see an append's committed size before its log end
    (the writer stores them in that order): the read's end is then remembered under an offset
    whose batch lies before that position. A later read at that offset (another follower)
    finds the batch header there not starting at it and looks the offset up."""
    log, reader, offset = followed(tmp_path, 2, 2, other_process=True)
    append(log, 3)
    st = log.state
    st.log_end_offset = offset  # as seen between the two stores
    assert same_as_fresh(log, reader, offset - 2)[0] == offset - 2  # remembered: offset -> after the new batch
    st.log_end_offset = log.log_end_offset
    append(log, 2)
    first, region = same_as_fresh(log, reader, offset)  # the other follower, at the old log end
    assert first == offset and next_offset(region) == log.log_end_offset


def test_a_follower_that_truncates_and_fetches_again(tmp_path):
    log, reader, offset = followed(tmp_path, 4, 2)
    append(log, 2)
    back = offset - 2  # the follower truncated to a batch boundary below its log end
    first, region = same_as_fresh(log, reader, back)
    assert first == back and next_offset(region) == log.log_end_offset
    append(log, 1)
    follow(log, reader, next_offset(region))
    log.truncate_to(back)  # the leader's log truncated below both (a new leader's history)
    append(log, 3, value=b"y" * 5)
    for at in (back, offset, log.log_end_offset):
        same_as_fresh(log, reader, at)
    follow(log, reader, back)


@pytest.mark.parametrize("other_process", [False, True])
def test_a_caught_up_follower_reads_no_batch_header_where_the_state_pairs_its_ends(tmp_path, via, monkeypatch,
                                                                                 other_process):
    """`region` from a remembered end reads no batch header when the state pairs its log end and
    committed size (`PartitionState.paired_ends`: one thread stores and reads it), one per read
    when another process may store into it; the answers are a fresh reader's either way, across
    a roll and a truncation with new appends at the same offsets."""
    from kafkafast.storage import reader as reader_module
    log, reader, offset = followed(tmp_path, 3, 3, other_process=other_process)
    headers = []
    plain = reader_module.read_header_at
    monkeypatch.setattr(reader_module, "read_header_at", lambda fd, pos: headers.append(fd) or plain(fd, pos))
    for n in range(1, 6):  # one batch at a time at the log end
        append(log, n)
        offset = follow(log, reader, offset)
    mine = {h.fd for h in reader._handles}  # (the fresh readers `same_as_fresh` compares with read too)
    if via == "region":
        assert sum(fd in mine for fd in headers) == (5 if other_process else 0)
    for _ in range(40):  # past segment.bytes: a roll on the way
        append(log, 3)
        offset = follow(log, reader, offset)
    back = offset
    append(log, 2, value=b"a" * 30)
    follow(log, reader, back)
    log.truncate_to(back)
    append(log, 2, value=b"b" * 30)  # the same offsets, other bytes
    first, region = same_as_fresh(log, reader, back)
    assert first == back and b"b" * 30 in region and b"a" * 30 not in region
