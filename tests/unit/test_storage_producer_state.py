"""Idempotent-producer checks and their persistence (Kafka's ProducerStateManager rules)."""
from __future__ import annotations

import pytest

from kafkafast.protocol.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log


def pbatch(pid: int, epoch: int, seq: int, n: int = 1) -> bytearray:
    return bytearray(encode_batch([(1000, None, b"v%d" % i, ()) for i in range(n)],
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def open_log(tmp_path, *, needs_recovery: bool = False, **props: str) -> Log:
    cfg = LogConfig.from_props({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(str(tmp_path / "p-0"), "p", 0, cfg, needs_recovery=needs_recovery, recovery_point=0)


def test_duplicate_of_recent_batch_returns_original_offsets(tmp_path):
    log = open_log(tmp_path)
    log.append(bytearray(encode_batch([(1, None, b"x", ())])), 0, now_ms=1)  # offset 0, no producer
    first = log.append(pbatch(7, 0, 0, 3), 0, now_ms=1)
    assert (first.base_offset, first.last_offset, first.duplicate) == (1, 3, False)
    log.append(pbatch(7, 0, 3, 2), 0, now_ms=1)
    again = log.append(pbatch(7, 0, 0, 3), 0, now_ms=1)
    assert (again.base_offset, again.last_offset, again.duplicate) == (1, 3, True)
    assert log.log_end_offset == 6


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = open_log(tmp_path)
    for seq in range(6):
        log.append(pbatch(7, 0, seq), 0, now_ms=1)
    assert log.append(pbatch(7, 0, 1), 0, now_ms=1).duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(pbatch(7, 0, 0), 0, now_ms=1)


def test_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    log.append(pbatch(7, 0, 0, 2), 0, now_ms=1)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(pbatch(7, 0, 3), 0, now_ms=1)
    assert log.append(pbatch(7, 0, 2), 0, now_ms=1).base_offset == 2


def test_older_epoch_is_fenced_and_new_epoch_must_start_at_zero(tmp_path):
    log = open_log(tmp_path)
    log.append(pbatch(7, 3, 0), 0, now_ms=1)
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(7, 2, 1), 0, now_ms=1)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(pbatch(7, 4, 5), 0, now_ms=1)
    assert log.append(pbatch(7, 4, 0), 0, now_ms=1).base_offset == 1


def test_unknown_producer_must_start_at_sequence_zero(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(UnknownProducerIdError):
        log.append(pbatch(9, 0, 5), 0, now_ms=1)
    assert log.log_end_offset == 0


def test_sequence_wraps_after_int32_max(tmp_path):
    log = open_log(tmp_path)
    log.append(pbatch(7, 0, 0), 0, now_ms=1)
    # Pretend the producer reached the top of the sequence space.
    entry = log.producers.producers[7]
    from kafkafast.storage.producer_state import BatchMetadata
    entry.batches[-1] = BatchMetadata(0x7FFFFFFF, 0x7FFFFFFF, 0, 0, 1)
    assert log.append(pbatch(7, 0, 0), 0, now_ms=1).duplicate is False


def test_no_producer_id_means_no_checks(tmp_path):
    log = open_log(tmp_path)
    one = bytearray(encode_batch([(1, None, b"x", ())]))
    assert log.append(one, 0, now_ms=1).base_offset == 0
    assert log.append(bytearray(encode_batch([(1, None, b"x", ())])), 0, now_ms=1).base_offset == 1


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_reopen(tmp_path, clean):
    log = open_log(tmp_path, segment_bytes="300")
    for seq in range(0, 12, 2):
        log.append(pbatch(7, 1, seq, 2), 0, now_ms=1)
    assert len(log.segments) > 1
    log.close(clean=clean)
    again = open_log(tmp_path, segment_bytes="300", needs_recovery=not clean)
    dup = again.append(pbatch(7, 1, 10, 2), 0, now_ms=1)
    assert (dup.base_offset, dup.last_offset, dup.duplicate) == (10, 11, True)
    with pytest.raises(OutOfOrderSequenceNumberError):
        again.append(pbatch(7, 1, 13), 0, now_ms=1)
    with pytest.raises(InvalidProducerEpochError):
        again.append(pbatch(7, 0, 12), 0, now_ms=1)
    assert again.append(pbatch(7, 1, 12), 0, now_ms=1).base_offset == 12


def test_corrupt_snapshot_is_ignored_and_state_replayed(tmp_path):
    log = open_log(tmp_path)
    log.append(pbatch(7, 0, 0, 2), 0, now_ms=1)
    log.close(clean=True)
    snap = tmp_path / "p-0" / f"{2:020d}.snapshot"
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    again = open_log(tmp_path)
    assert again.append(pbatch(7, 0, 0, 2), 0, now_ms=1).duplicate
