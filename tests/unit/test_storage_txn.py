"""Transactions in the log: control batches, the last stable offset, `.txnindex`, snapshots."""
from __future__ import annotations

import os

import pytest

from kafkafast.protocol.errors import TransactionCoordinatorFencedError
from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage import txn_index
from kafkafast.storage.log import Log
from kafkafast.storage.producer_state import ProducerStateManager


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytearray:
    return bytearray(encode_batch([(1000 + i, b"k%d" % i, b"v", ()) for i in range(n)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, is_transactional=True))


def plain(n: int = 1) -> bytearray:
    return bytearray(encode_batch([(1000, b"k", b"p", ())] * n))


def open_log(path, recover: bool = False, **props) -> Log:
    cfg = LogConfig.from_props({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(str(path / "t-0"), "t", 0, cfg, needs_recovery=recover, recovery_point=0)


def test_markers_move_the_lso_and_aborts_go_to_the_txn_index(tmp_path):
    log = open_log(tmp_path)
    log.append(plain(), 0, now_ms=1)                      # 0
    log.append(txn_batch(7, 0), 0, now_ms=1)              # 1-2, pid 7 opens at 1
    log.append(txn_batch(8, 0), 0, now_ms=1)              # 3-4, pid 8 opens at 3
    assert log.last_stable_offset(5) == 1
    log.append(txn_index.control_batch(7, 0, txn_index.ABORT, 0, 2), 0, now_ms=2)  # 5
    assert log.last_stable_offset(6) == 3
    log.append(txn_index.control_batch(8, 0, txn_index.COMMIT, 0, 2), 0, now_ms=2)  # 6
    assert log.last_stable_offset(7) == 7
    assert log.aborted_transactions(0, 7) == [txn_index.AbortedTxn(7, 1, 5, 3)]
    assert log.aborted_transactions(6, 7) == []
    raw = open(txn_index.txn_index_path(log.dir, 0), "rb").read()
    assert len(raw) == 34 and raw[:2] == b"\x00\x00" and int.from_bytes(raw[2:10], "big") == 7
    # An open transaction survives a clean close in the snapshot, and recovery replays markers once.
    log.append(txn_batch(9, 0), 0, now_ms=3)              # 7-8
    log.close()
    log = open_log(tmp_path)
    assert log.producers.ongoing() == {9: 7} and log.state.last_stable_offset == 7
    log.append(txn_index.control_batch(9, 0, txn_index.ABORT, 0, 4), 0, now_ms=4)  # 9
    log.close(clean=False)
    for name in os.listdir(log.dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log.dir, name))
    log = open_log(tmp_path, recover=True)
    assert log.producers.ongoing() == {}
    assert log.aborted_transactions(0, 10) == [txn_index.AbortedTxn(7, 1, 5, 3), txn_index.AbortedTxn(9, 7, 9, 10)]
    # Truncation below a marker removes its entry and re-opens the transaction.
    log.truncate_to(9)
    assert log.aborted_transactions(0, 10) == [txn_index.AbortedTxn(7, 1, 5, 3)]
    assert log.producers.ongoing() == {9: 7}
    log.close()


def test_rolled_segments_keep_their_own_index(tmp_path):
    log = open_log(tmp_path, segment_bytes="400")
    for i in range(6):
        log.append(txn_batch(5, i * 2), 0, now_ms=1)
        log.append(txn_index.control_batch(5, 0, txn_index.ABORT if i % 2 else txn_index.COMMIT, 0, 1), 0, now_ms=1)
    assert len(log.segments) > 1
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert [(a.first_offset, a.last_offset) for a in aborted] == [(3, 5), (9, 11), (15, 17)]
    assert [a.last_offset for a in log.aborted_transactions(10, log.log_end_offset)] == [11, 17]
    log.close()


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path):
    log = open_log(tmp_path)
    assert log.producers.producers.get(7) is None
    log.append(txn_batch(7, 0), 0, now_ms=1)                                         # 0-1
    log.append(txn_index.control_batch(7, 0, txn_index.COMMIT, 5, 2), 0, now_ms=2)   # 2
    assert log.producers.producers[7].coordinator_epoch == 5
    log.append(txn_batch(7, 2), 0, now_ms=3)                                         # 3-4, open at 3
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(txn_index.control_batch(7, 0, txn_index.ABORT, 4, 4), 0, now_ms=4)
    assert log.log_end_offset == 5 and log.producers.ongoing() == {7: 3} and log.last_stable_offset(5) == 3
    assert log.producers.producers[7].coordinator_epoch == 5
    log.append(txn_index.control_batch(7, 0, txn_index.ABORT, 5, 4), 0, now_ms=4)    # 5: the same epoch is fine
    log.append(txn_index.control_batch(8, 0, txn_index.COMMIT, 1, 4), 0, now_ms=4)   # 6: another producer's own
    assert log.log_end_offset == 7 and log.producers.ongoing() == {}
    # From the snapshot (v3) at a clean close.
    log.close()
    log = open_log(tmp_path)
    assert {p: e.coordinator_epoch for p, e in log.producers.producers.items()} == {7: 5, 8: 1}
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(txn_index.control_batch(7, 0, txn_index.COMMIT, 3, 5), 0, now_ms=5)
    log.append(txn_index.control_batch(7, 0, txn_index.COMMIT, 9, 5), 0, now_ms=5)   # 7: a newer coordinator
    # From recovery: the markers replayed (no snapshot left).
    log.close(clean=False)
    for name in os.listdir(log.dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log.dir, name))
    log = open_log(tmp_path, recover=True)
    assert {p: e.coordinator_epoch for p, e in log.producers.producers.items()} == {7: 9, 8: 1}
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(txn_index.control_batch(7, 0, txn_index.COMMIT, 5, 6), 0, now_ms=6)
    assert log.log_end_offset == 8
    log.close()


def test_a_follower_takes_the_coordinator_epoch_from_the_leaders_markers(tmp_path):
    leader = open_log(tmp_path / "l")
    leader.append(txn_batch(3, 0), 0, now_ms=1)
    leader.append(txn_index.control_batch(3, 0, txn_index.COMMIT, 4, 2), 0, now_ms=2)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(bytearray(open(os.path.join(leader.dir, "00000000000000000000.log"), "rb").read()),
                                now_ms=3)
    assert follower.log_end_offset == 3 and follower.producers.producers[3].coordinator_epoch == 4
    with pytest.raises(TransactionCoordinatorFencedError):  # as leader now
        follower.append(txn_index.control_batch(3, 0, txn_index.ABORT, 2, 4), 1, now_ms=4)
    leader.close()
    follower.close()


def test_version_2_snapshots_are_still_read(tmp_path):
    import struct
    import zlib

    d = tmp_path / "t-0"
    d.mkdir()
    body = struct.pack(">qhqB", 11, 2, 1000, 1) + struct.pack(">q", 40) + struct.pack(">iiqqq", 0, 4, 40, 44, 1000)
    (d / "00000000000000000045.snapshot").write_bytes(struct.pack(">4sHII", b"KFPS", 2, zlib.crc32(body), 1) + body)
    producers = ProducerStateManager(str(d))
    assert producers.load_latest(45) == 45
    entry = producers.producers[11]
    assert (entry.epoch, entry.txn_first_offset, entry.coordinator_epoch, entry.last_seq) == (2, 40, -1, 4)
    producers.write_snapshot(46)
    assert (d / "00000000000000000046.snapshot").read_bytes()[4:6] == b"\x00\x03"
    again = ProducerStateManager(str(d))
    assert again.load_latest(46) == 46 and again.producers[11].coordinator_epoch == -1
    again.producers[11].coordinator_epoch = 6
    again.write_snapshot(47)
    third = ProducerStateManager(str(d))
    assert third.load_latest(47) == 47 and third.producers[11].coordinator_epoch == 6
