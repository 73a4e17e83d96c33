"""LogManager: placement, checkpoints, clean-shutdown marker; leader-epoch checkpoint."""
from __future__ import annotations

import os

import pytest

from kafkafast.protocol.errors import KafkaStorageError
from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig, LogManager
from kafkafast.storage.leader_epoch import LeaderEpochCache
from kafkafast.storage.log_manager import CLEAN_SHUTDOWN_FILE


def batch(n: int = 1) -> bytearray:
    return bytearray(encode_batch([(1000 + i, None, b"value", ()) for i in range(n)]))


def test_clean_shutdown_marker_skips_recovery_and_is_removed(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager([d], LogConfig())
    mgr.load_all()
    log = mgr.create("a", 0)
    for _ in range(5):
        log.append(batch(2), 0, now_ms=1)
    mgr.shutdown()
    assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert open(os.path.join(d, "recovery-point-offset-checkpoint")).read() == "0\n1\na 0 10\n"
    assert open(os.path.join(d, "log-start-offset-checkpoint")).read() == "0\n1\na 0 0\n"

    mgr = LogManager([d], LogConfig())
    mgr.load_all()
    assert mgr.last_load_recovered == {("a", 0): 0}
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert mgr.get("a", 0).log_end_offset == 10
    # No shutdown this time: the next load must scan.
    mgr.get("a", 0).append(batch(1), 0, now_ms=1)
    mgr.get("a", 0).close(clean=False)
    mgr = LogManager([d], LogConfig())
    mgr.load_all()
    assert mgr.last_load_recovered[("a", 0)] == os.path.getsize(os.path.join(d, "a-0", f"{0:020d}.log")) > 0
    assert mgr.get("a", 0).log_end_offset == 11


def test_new_partitions_go_to_the_emptiest_dir_and_delete_removes_them(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    mgr = LogManager(dirs, LogConfig())
    mgr.load_all()
    logs = [mgr.create("t", p) for p in range(4)]
    assert [os.path.dirname(lg.dir) for lg in logs] == [dirs[0], dirs[1], dirs[0], dirs[1]]
    assert mgr.create("t", 0) is logs[0]
    assert mgr.delete("t", 1)
    assert mgr.get("t", 1) is None and os.listdir(dirs[1]) == ["t-3"]
    assert sorted((lg.topic, lg.partition) for lg in mgr.all_logs()) == [("t", 0), ("t", 2), ("t", 3)]


def manager_with_expired_segments(d: str, retention: int, checkpoint: int, start_checkpoint: int):
    """A LogManager started at time 0 holding log r-0 of 6 one-batch segments past retention."""
    cfg = LogConfig.from_props({"segment.bytes": "200", "retention.ms": "100", "file.delete.delay.ms": "0"})
    mgr = LogManager([d], cfg, retention_check_interval_ms=retention, checkpoint_interval_ms=checkpoint,
                     log_start_checkpoint_interval_ms=start_checkpoint, now_ms=0)
    mgr.load_all()
    log = mgr.create("r", 0)
    for _ in range(6):
        log.append(bytearray(encode_batch([(0, None, b"value", ())])), 0, now_ms=1)
    log.state.high_watermark = log.log_end_offset
    return mgr, log


def test_periodic_runs_retention_flush_and_checkpoints(tmp_path):
    d = str(tmp_path / "logs")
    mgr, log = manager_with_expired_segments(d, 1000, 1000, 1000)
    n_segments = len(log.segments)
    report = mgr.periodic(now_ms=10_000)
    assert report.segments_deleted == n_segments - 1 and report.checkpointed
    assert log.log_start_offset == log.segments[0].base_offset
    assert open(os.path.join(d, "log-start-offset-checkpoint")).read() == f"0\n1\nr 0 {log.log_start_offset}\n"
    assert mgr.periodic(now_ms=10_500).checkpointed is False


def test_periodic_tasks_keep_their_own_intervals(tmp_path):
    d = str(tmp_path / "logs")
    mgr, log = manager_with_expired_segments(d, 5000, 2000, 3000)
    rp = os.path.join(d, "recovery-point-offset-checkpoint")
    ls = os.path.join(d, "log-start-offset-checkpoint")
    # Nothing runs before its first interval (min(interval, 30 s) after start).
    assert mgr.periodic(now_ms=1999).segments_deleted == 0 and not os.path.exists(rp)
    assert mgr.periodic(now_ms=2000).checkpointed and os.path.exists(rp) and not os.path.exists(ls)
    assert mgr.periodic(now_ms=3000).checkpointed and os.path.exists(ls)
    assert mgr.periodic(now_ms=4999).segments_deleted == 0
    assert mgr.periodic(now_ms=5000).segments_deleted > 0
    log.append(bytearray(encode_batch([(0, None, b"value" * 20, ())])), 0, now_ms=1)
    log.append(bytearray(encode_batch([(0, None, b"value" * 20, ())])), 0, now_ms=1)
    log.state.high_watermark = log.log_end_offset
    assert mgr.periodic(now_ms=9999).segments_deleted == 0
    assert mgr.periodic(now_ms=10000).segments_deleted > 0


def test_leader_epoch_checkpoint_format_and_lookups(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.assign(2, 15)  # same epoch: no change
    cache.assign(5, 30)
    assert open(path).read() == "0\n3\n0 0\n2 10\n5 30\n"
    assert LeaderEpochCache(path).entries() == [(0, 0), (2, 10), (5, 30)]
    assert cache.end_offset_for(5, 42) == (5, 42)
    assert cache.end_offset_for(2, 42) == (2, 30)
    assert cache.end_offset_for(3, 42) == (2, 30)  # unknown epoch: the floor epoch's end
    assert cache.end_offset_for(9, 42) == (-1, -1)
    cache.truncate_from_end(30)
    assert cache.entries() == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert LeaderEpochCache(path).entries() == [(2, 12)]


def test_log_records_leader_epochs_of_appends(tmp_path):
    mgr = LogManager([str(tmp_path)], LogConfig())
    mgr.load_all()
    log = mgr.create("e", 0)
    log.append(batch(3), 1, now_ms=1)
    log.append(batch(2), 1, now_ms=1)
    log.append(batch(1), 4, now_ms=1)
    assert log.leader_epochs.entries() == [(1, 0), (4, 5)]
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert log.end_offset_for_epoch(4) == (4, 6)
    mgr.shutdown()
    assert open(os.path.join(str(tmp_path), "e-0", "leader-epoch-checkpoint")).read() == "0\n2\n1 0\n4 5\n"


def test_a_dir_that_cannot_hold_a_new_partition_is_skipped(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    mgr = LogManager(dirs, LogConfig())
    mgr.load_all()
    open(os.path.join(dirs[0], "t-0"), "w").close()  # the emptiest dir cannot make the partition dir
    log = mgr.create("t", 0)
    assert os.path.dirname(log.dir) == dirs[1] and log.append(batch(2), 0, now_ms=1).base_offset == 0
    open(os.path.join(dirs[1], "t-1"), "w").close()
    open(os.path.join(dirs[0], "t-1"), "w").close()
    offline = mgr.create("t", 1)  # no dir can: offline, not a crash
    assert offline.state.offline == 1 and mgr.get("t", 1) is offline
    with pytest.raises(KafkaStorageError):
        offline.append(batch(1), 0, now_ms=1)
    mgr.shutdown()
    assert os.path.exists(os.path.join(dirs[1], CLEAN_SHUTDOWN_FILE))  # t-0's dir stopped cleanly
