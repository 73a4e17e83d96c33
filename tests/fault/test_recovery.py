"""Recovery from corrupt segments and indexes, as Kafka's own LogTest corruption tests do."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest

from kafkafast.records import decode_batch, encode_batch
from kafkafast.storage import LogConfig, LogManager
from kafkafast.storage.log import Log

TOPIC_DIR = "c-0"


def make_log(tmp_path, rng: random.Random, n_batches: int, **props: str) -> tuple[Log, list[tuple[int, bytes]]]:
    cfg = LogConfig.from_props({"index.interval.bytes": "64", **{k.replace("_", "."): v for k, v in props.items()}})
    log = Log.open(str(tmp_path / TOPIC_DIR), "c", 0, cfg, needs_recovery=False, recovery_point=0)
    expected = []
    for i in range(n_batches):
        values = [rng.randbytes(rng.randint(0, 80)) for _ in range(rng.randint(1, 4))]
        result = log.append(bytearray(encode_batch([(1000 + i, None, v, ()) for v in values])), 0, now_ms=1)
        expected += [(result.base_offset + j, v) for j, v in enumerate(values)]
    return log, expected


def reopen(tmp_path, *, needs_recovery: bool = True, **props: str) -> Log:
    cfg = LogConfig.from_props({"index.interval.bytes": "64", **{k.replace("_", "."): v for k, v in props.items()}})
    return Log.open(str(tmp_path / TOPIC_DIR), "c", 0, cfg, needs_recovery=needs_recovery, recovery_point=0)


def assert_every_offset(log: Log, expected: list[tuple[int, bytes]]) -> None:
    log.state.high_watermark = log.log_end_offset
    assert log.log_end_offset == len(expected)
    for offset, value in expected:
        res = log.reader.read(offset, 1)
        _, records = decode_batch(res.region.read())
        assert [r.value for r in records if r.offset == offset] == [value], offset


def active_path(log: Log, ext: str) -> str:
    return os.path.join(log.dir, f"{log.active_segment.base_offset:020d}{ext}")


@pytest.mark.parametrize("seed", range(10))
def test_random_bytes_appended_to_active_log_are_truncated(tmp_path, seed):
    rng = random.Random(seed)
    log, expected = make_log(tmp_path, rng, rng.randint(5, 40), segment_bytes="2000")
    path = active_path(log, ".log")
    good_size = os.path.getsize(path)
    log.close(clean=False)
    with open(path, "ab") as f:
        f.write(rng.randbytes(rng.randint(1, 1024)))
    again = reopen(tmp_path, segment_bytes="2000")
    assert os.path.getsize(path) == good_size
    assert again.load_stats.truncated_bytes > 0
    assert_every_offset(again, expected)
    # And the log keeps working after recovery.
    assert again.append(bytearray(encode_batch([(1, None, b"after", ())])), 0, now_ms=1).base_offset == len(expected)


@pytest.mark.parametrize("seed", range(10))
def test_random_bytes_appended_to_index_trigger_rebuild(tmp_path, seed):
    rng = random.Random(seed)
    log, expected = make_log(tmp_path, rng, rng.randint(5, 40))
    path = active_path(log, ".index")
    good = open(path, "rb").read()
    log.close(clean=True)
    with open(path, "ab") as f:
        f.write(rng.randbytes(rng.randint(1, 1024)))
    # Even after a clean shutdown (no recovery scan), an insane index is rebuilt.
    again = reopen(tmp_path, needs_recovery=False)
    assert again.load_stats.rebuilt_segments == 1
    assert open(path, "rb").read() == good
    assert_every_offset(again, expected)


@pytest.mark.parametrize("seed", range(3))
def test_index_overwritten_with_garbage_is_rebuilt(tmp_path, seed):
    rng = random.Random(seed)
    log, expected = make_log(tmp_path, rng, 30)
    index, timeindex = active_path(log, ".index"), active_path(log, ".timeindex")
    good_index, good_time = open(index, "rb").read(), open(timeindex, "rb").read()
    assert len(good_index) >= 16
    log.close(clean=True)
    for path, size in ((index, len(good_index)), (timeindex, len(good_time))):
        with open(path, "wb") as f:
            f.write(rng.randbytes(size))
    again = reopen(tmp_path, needs_recovery=False)
    assert open(index, "rb").read() == good_index
    assert open(timeindex, "rb").read() == good_time
    assert_every_offset(again, expected)


def test_missing_index_is_rebuilt(tmp_path):
    log, expected = make_log(tmp_path, random.Random(1), 20)
    index = active_path(log, ".index")
    good = open(index, "rb").read()
    log.close(clean=True)
    os.unlink(index)
    again = reopen(tmp_path, needs_recovery=False)
    assert open(index, "rb").read() == good
    assert_every_offset(again, expected)


def test_batch_truncated_in_the_middle_ends_the_log_at_the_previous_batch(tmp_path):
    log, expected = make_log(tmp_path, random.Random(2), 10)
    path = active_path(log, ".log")
    positions = []
    pos, size = 0, os.path.getsize(path)
    while pos < size:
        header = decode_batch(open(path, "rb").read(), pos)[0]
        positions.append((pos, header))
        pos += header.size
    cut_pos, cut_header = positions[6]
    log.close(clean=False)
    os.truncate(path, cut_pos + cut_header.size // 2)
    again = reopen(tmp_path)
    assert os.path.getsize(path) == cut_pos
    assert again.log_end_offset == cut_header.base_offset
    assert_every_offset(again, expected[: cut_header.base_offset])


def test_corrupt_batch_in_an_older_segment_drops_everything_after_it(tmp_path):
    log, expected = make_log(tmp_path, random.Random(3), 30, segment_bytes="1000")
    assert len(log.segments) >= 3
    first = log.segments[0]
    first_path = os.path.join(log.dir, f"{first.base_offset:020d}.log")
    second_base = log.segments[1].base_offset
    log.close(clean=False)
    with open(first_path, "r+b") as f:
        f.seek(os.path.getsize(first_path) - 3)
        f.write(b"\xff\xff\xff")  # breaks the CRC of the segment's last batch
    again = reopen(tmp_path, segment_bytes="1000")
    assert len(again.segments) == 1
    assert again.log_end_offset < second_base
    assert_every_offset(again, expected[: again.log_end_offset])


def test_recovery_reads_in_chunks_and_keeps_batches_across_chunk_boundaries(tmp_path, monkeypatch):
    from kafkafast.storage import segment as segment_module

    monkeypatch.setattr(segment_module, "RECOVERY_CHUNK_BYTES", 100)  # smaller than most batches
    log, expected = make_log(tmp_path, random.Random(4), 25)
    path = active_path(log, ".log")
    log.close(clean=False)
    with open(path, "ab") as f:
        # A plausible v2 header claiming ~2 GiB: only a truncated tail, never allocated.
        f.write(b"\x00" * 7 + b"\x63" + b"\x7f\xff\xff\xf0" + b"\x00" * 4 + b"\x02" + b"\x00" * 100)
    again = reopen(tmp_path)
    assert again.load_stats.truncated_bytes == 117
    assert_every_offset(again, expected)


def test_sigkill_mid_stream_loses_nothing_written_and_keeps_producer_state(tmp_path):
    d = str(tmp_path / "logs")
    script = textwrap.dedent(f"""
        import os, signal
        from kafkafast.records import encode_batch
        from kafkafast.storage import LogConfig, LogManager
        mgr = LogManager([{d!r}], LogConfig.from_props({{"segment.bytes": "600"}}))
        mgr.load_all()
        log = mgr.create("k", 0)
        for seq in range(20):
            log.append(bytearray(encode_batch([(1, None, b"v%d" % seq, ())], producer_id=5,
                                              producer_epoch=0, base_sequence=seq)), 0, now_ms=1)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), timeout=60)
    assert proc.returncode == -signal.SIGKILL
    mgr = LogManager([d], LogConfig.from_props({"segment.bytes": "600"}))
    mgr.load_all()
    assert mgr.last_load_recovered[("k", 0)] > 0
    log = mgr.get("k", 0)
    assert log.log_end_offset == 20
    dup = log.append(bytearray(encode_batch([(1, None, b"v19", ())], producer_id=5, producer_epoch=0,
                                            base_sequence=19)), 0, now_ms=1)
    assert (dup.base_offset, dup.duplicate) == (19, True)
    assert log.append(bytearray(encode_batch([(1, None, b"v20", ())], producer_id=5, producer_epoch=0,
                                             base_sequence=20)), 0, now_ms=1).base_offset == 20
    mgr.shutdown()
