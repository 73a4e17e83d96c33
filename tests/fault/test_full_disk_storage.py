"""The storage layer on a full disk (a small tmpfs, see conftest.py): recovery needs no
free space, a rewrite that does not fit never costs the file it replaces nor leaves a
tmp file behind, and a clean close skips what does not fit and says so."""
from __future__ import annotations

import os

import pytest

from kafkafast.protocol.errors import KafkaStorageError
from kafkafast.records import decode_batch, encode_batch
from kafkafast.storage import LogConfig, LogManager
from kafkafast.storage.checkpoint import OffsetCheckpointFile
from kafkafast.storage.log import Log
from tests.support.storage_faults import top_up

CONFIG = LogConfig.from_props({"index.interval.bytes": "64", "segment.bytes": "16384"})


def open_log(d, *, needs_recovery=False) -> Log:
    return Log.open(str(d / "t-0"), "t", 0, CONFIG, needs_recovery=needs_recovery, recovery_point=0)


def fill_log(log: Log, n: int, producer_id: int = -1) -> list[bytes]:
    values = []
    for i in range(n):
        v = b"value-%04d-" % i + b"x" * 100
        log.append(bytearray(encode_batch([(i, None, v, ())], producer_id=producer_id,
                                          producer_epoch=0 if producer_id >= 0 else -1,
                                          base_sequence=i if producer_id >= 0 else -1)), 0, now_ms=i)
        values.append(v)
    log.state.high_watermark = log.log_end_offset
    return values


def read_every_offset(log: Log) -> list[bytes]:
    log.state.high_watermark = log.log_end_offset
    out = []
    for offset in range(log.log_end_offset):
        _, records = decode_batch(log.reader.read(offset, 1).region.read())
        out += [r.value for r in records if r.offset == offset]
    return out


def leftovers(d) -> list[str]:
    return [name for _, _, files in os.walk(d) for name in files if name.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["missing", "torn", "prefix"])
def test_recovery_on_a_full_disk_rebuilds_the_index_in_memory(small_fs, damage):
    log = open_log(small_fs)
    values = fill_log(log, 300)
    assert len(log.segments) > 1
    log.close(clean=False)
    index = small_fs / "t-0" / f"{log.segments[-1].base_offset:020d}.index"
    if damage == "missing":
        index.unlink()
    elif damage == "torn":  # half an entry at the end: the index is insane and must be rebuilt
        with open(index, "ab") as f:
            f.write(b"\x00\x00\x00")
    else:  # only the first entries reached the disk (the rest were not flushed)
        os.truncate(index, 5 * 8)
    top_up(small_fs)

    again = open_log(small_fs, needs_recovery=True)
    assert again.load_stats.rebuilt_segments > 0
    assert read_every_offset(again) == values
    assert again.segments[-1].offset_index.entries > 10  # complete, in memory
    assert not index.exists() or index.stat().st_size % 8 == 0  # never a torn or stale file
    if damage == "prefix":  # its entries are right, only fewer: kept
        assert index.stat().st_size == 5 * 8
    assert leftovers(small_fs) == []
    with pytest.raises(KafkaStorageError):
        for _ in range(50):  # the last page of the segment may still take a few
            values += fill_log(again, 1)
    assert read_every_offset(again) == values  # a refused append leaves nothing behind
    again.close(clean=False)

    os.unlink(small_fs / "ballast")
    third = open_log(small_fs, needs_recovery=True)
    assert read_every_offset(third) == values
    more = fill_log(third, 20)
    assert read_every_offset(third) == values + more
    third.close()


def test_a_checkpoint_rewrite_that_does_not_fit_keeps_the_old_file(small_fs):
    cp = OffsetCheckpointFile(str(small_fs / "recovery-point-offset-checkpoint"))
    cp.write({("t", 0): 5})
    top_up(small_fs)
    with pytest.raises(OSError):
        cp.write({("t", p): 10 ** 12 for p in range(500)})  # more than the file's page
    assert cp.read() == {("t", 0): 5}
    assert leftovers(small_fs) == []


def test_clean_close_on_a_full_disk_skips_what_does_not_fit(small_fs):
    mgr = LogManager([str(small_fs / "logs")], CONFIG)
    mgr.load_all()
    log = mgr.create("p", 0)
    values = fill_log(log, 40, producer_id=7)
    top_up(small_fs)
    assert mgr.shutdown() is False  # producer snapshot and checkpoints did not fit
    assert mgr.unwritten_dirs == {str(small_fs / "logs")}
    assert not (small_fs / "logs" / ".kafka_cleanshutdown").exists()  # so the next start recovers
    assert leftovers(small_fs) == []

    again = LogManager([str(small_fs / "logs")], CONFIG)
    again.load_all()
    log = again.get("p", 0)
    assert read_every_offset(log) == values
    assert log.producers.producers[7].last_seq == 39  # rebuilt from the batch headers
    os.unlink(small_fs / "ballast")
    assert again.shutdown() is True
    assert (small_fs / "logs" / ".kafka_cleanshutdown").exists()
