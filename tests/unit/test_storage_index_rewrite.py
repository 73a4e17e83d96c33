"""A reader never uses an index entry from before an index rewrite (issue 28, finding 1).

Truncation, recovery and a dead append-lock holder's repair rewrite a segment's `.index` and
`.timeindex` by renaming a new file over the name. A `LogReader` (the one in the writing
process, or one in another worker) that mapped the old file must not use its entries after
that: they point into batches written since, at other positions. These tests read through a
reader that had mapped the index before the rewrite, for both twins of the index search and
with and without shared append, and compare with what a fresh reader reads."""
from __future__ import annotations

import os

import pytest

from kafkafast import native
from kafkafast.protocol.errors import KafkaError
from kafkafast.records import encode_batch, iter_record_batches
from kafkafast.storage import LogConfig, LogReader, PartitionState, index_file, offset_index, time_index
from kafkafast.storage.log import Log
from tests.integration.test_shared_append_log import Partition

PROPS = {"index.interval.bytes": "1", "segment.bytes": "100000", "file.delete.delay.ms": "0"}


@pytest.fixture(params=["cython", "pure"])
def twin(request, monkeypatch):
    """The index_search twin every index lookup uses."""
    mod = native.load_compiled("index_search") if request.param == "cython" else native.load_pure("index_search")
    for m in (index_file, offset_index, time_index):
        if hasattr(m, "index_search"):
            monkeypatch.setattr(m, "index_search", mod)
    return request.param


class Writer:
    """The partition's writing Log, and another one appending through the same slot when
    `shared` (what another worker does with shared append)."""

    def __init__(self, tmp_path, shared: bool, flavour: str) -> None:
        if shared:
            self.p = Partition(tmp_path, **PROPS)
            self.owner = self.p.open_owner(flavour)
            self.appender = self.p.attach(flavour)
            self.state = self.p.table.state(self.p.slot)
        else:
            cfg = LogConfig.from_props(PROPS)
            self.state = PartitionState()
            self.owner = Log.open(str(tmp_path / "t-0"), "t", 0, cfg, self.state, needs_recovery=False,
                                  recovery_point=0)
            self.appender = self.owner
        self.dir = self.owner.dir

    def append(self, log: Log, values: list[bytes], epoch: int, ts: int) -> None:
        for i, v in enumerate(values):
            log.append(bytearray(encode_batch([(ts + i, None, v, ())])), epoch, now_ms=ts + i)
        self.state.high_watermark = self.state.log_end_offset

    def reader(self) -> LogReader:
        return LogReader(self.dir, self.state, topic="t", partition=0)


def read_every_offset(reader: LogReader, end: int) -> list[bytes]:
    """The value at each offset below `end`, each read on its own (a small max_bytes), as a
    consumer seeking to it would."""
    out = []
    for o in range(end):
        res = reader.read(o, 1)
        values = {r.offset: bytes(r.value) for _, recs in iter_record_batches(res.region.read()) for r in recs}
        assert o in values, f"offset {o}: the batch read holds {sorted(values)}"
        out.append(values[o])
    return out


@pytest.mark.parametrize("shared", [False, True], ids=["owner-only", "shared-append"])
def test_a_reader_that_mapped_the_index_reads_every_offset_after_truncation(tmp_path, twin, shared):
    w = Writer(tmp_path, shared, twin)
    w.append(w.owner, [b"old-%02d-" % i + b"a" * 40 for i in range(20)], 0, 1000)
    old_reader = w.reader()
    assert read_every_offset(old_reader, 20)[15].startswith(b"old-15")  # maps every index entry
    own_reader = w.owner.reader
    read_every_offset(own_reader, 20)
    w.owner.truncate_to(9)  # a follower cut back to its new leader's epoch end
    new = [b"new-%02d-" % i + b"b" * 130 for i in range(30)]  # other sizes: old entries land mid-batch
    w.append(w.appender, new, 1, 5000)
    want = [b"old-%02d-" % i + b"a" * 40 for i in range(9)] + new
    assert read_every_offset(w.reader(), 39) == want  # what a fresh reader reads
    assert read_every_offset(old_reader, 39) == want
    assert read_every_offset(own_reader, 39) == want


@pytest.mark.parametrize("shared", [False, True], ids=["owner-only", "shared-append"])
def test_list_offsets_by_timestamp_after_truncation_uses_the_rewritten_time_index(tmp_path, twin, shared):
    w = Writer(tmp_path, shared, twin)
    w.append(w.owner, [b"old-%d" % i for i in range(20)], 0, 1000)
    reader = w.reader()
    assert reader.offset_for_timestamp(1015) == (15, 1015)  # maps the time index
    w.owner.truncate_to(9)
    w.append(w.appender, [b"new-%d" % i for i in range(30)], 1, 5000)
    # The old time index said 1019 was the newest timestamp, at offset 19; now offset 9 has 5000.
    assert reader.offset_for_timestamp(4000) == (9, 5000)
    assert reader.offset_for_timestamp(5020) == (29, 5020)


def test_a_reader_that_mapped_the_index_reads_every_offset_after_recovery_rebuilt_it(tmp_path, twin):
    """A worker that replaces a dead one recovers the partition (the index is rebuilt and the
    torn tail cut) while the other workers' readers live on."""
    w = Writer(tmp_path, False, twin)
    w.append(w.owner, [b"old-%02d-" % i + b"a" * 40 for i in range(20)], 0, 1000)
    reader = w.reader()
    read_every_offset(reader, 20)
    w.owner.close()
    log_path = os.path.join(w.dir, "%020d.log" % 0)
    size = os.path.getsize(log_path)
    os.truncate(log_path, size - 300)  # the last batches torn off by the crash
    again = Log.open(w.dir, "t", 0, LogConfig.from_props(PROPS), w.state, needs_recovery=True, recovery_point=0)
    end = again.log_end_offset
    assert 10 < end < 20
    new = [b"new-%02d-" % i + b"b" * 130 for i in range(30)]
    w.append(again, new, 1, 5000)
    want = [b"old-%02d-" % i + b"a" * 40 for i in range(end)] + new
    assert read_every_offset(reader, end + 30) == want


def test_an_index_entry_that_points_into_another_batch_is_not_trusted(tmp_path, twin):
    """Even before the reader notices a rewrite (another process mid-change), an entry whose
    position holds no batch starting at its offset is skipped, never a storage error."""
    w = Writer(tmp_path, False, twin)
    w.append(w.owner, [b"v-%02d-" % i + b"a" * 40 for i in range(20)], 0, 1000)
    reader = w.reader()
    read_every_offset(reader, 20)
    index = os.path.join(w.dir, "%020d.index" % 0)
    data = bytearray(open(index, "rb").read())
    assert len(data) >= 8 * 10
    for i in range(len(data) // 8):  # every entry moved 7 bytes into its batch, in place
        pos = int.from_bytes(data[i * 8 + 4:i * 8 + 8], "big") + 7
        data[i * 8 + 4:i * 8 + 8] = pos.to_bytes(4, "big")
    with open(index, "r+b") as f:
        f.write(data)
    try:
        assert read_every_offset(reader, 20) == [b"v-%02d-" % i + b"a" * 40 for i in range(20)]
    except KafkaError as exc:  # pragma: no cover - the failure this test is for
        pytest.fail(f"a stale index entry made a storage error: {exc}")
