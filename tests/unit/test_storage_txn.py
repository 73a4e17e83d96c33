"""Transactions in the log: control batches, the last stable offset, `.txnindex`, snapshots."""
from __future__ import annotations

import os

from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage import txn_index
from kafkafast.storage.log import Log


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
