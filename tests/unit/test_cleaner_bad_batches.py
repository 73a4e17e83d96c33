"""The log cleaner facing batches it cannot decode (undecodable payloads, decompression
bombs) that reached a compacted log without produce validation: the partition is marked
uncleanable once, the others keep being compacted, and memory stays bounded."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from kafkafast.records import CODEC_GZIP, CODEC_NONE, CODEC_ZSTD, encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.cleaner import LogCleaner
from kafkafast.storage.log import Log
from tests.support import hostile_batches as hb
from tests.unit.test_cleaner import read_all

NOW = 10_000_000
REPO = Path(__file__).resolve().parents[2]


def open_log(root: Path, topic: str, segment_bytes: int = 2000) -> Log:
    cfg = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
                                "file.delete.delay.ms": "0", "min.cleanable.dirty.ratio": "0.01"})
    return Log.open(str(root / f"{topic}-0"), topic, 0, cfg, needs_recovery=False, recovery_point=0)


def fill(log: Log, rounds: int = 20, codec: int = CODEC_NONE) -> None:
    """Records overwriting ten keys again and again, then a roll: plenty to compact."""
    for r in range(rounds):
        batch = encode_batch([(NOW - 1000, b"k%d" % ((r * 3 + i) % 10), b"v%d-%d" % (r, i), ()) for i in range(3)],
                             codec)
        log.append(bytearray(batch), 0, now_ms=NOW - 1000)
    log.roll()
    log.state.high_watermark = log.state.log_end_offset


def drive(cleaner: LogCleaner, logs: list[Log], now: int, rounds: int) -> None:
    """`rounds` calls of the cleaner's periodic duty, each waiting for the cleaning it started."""
    for _ in range(rounds):
        cleaner.periodic(logs, now)
        if cleaner._job is not None and cleaner._job.thread is not None:
            cleaner._job.thread.join(60)
        cleaner.periodic(logs, now)  # installs the finished cleaning
        now += cleaner.backoff_ms + 1


def record_count(log: Log) -> int:
    return len(read_all(log)[0])


def test_undecodable_batch_marks_its_partition_uncleanable_once_and_others_are_still_compacted(tmp_path, caplog):
    bad = open_log(tmp_path, "bad")
    fill(bad, 10, CODEC_GZIP)
    bad.append(bytearray(hb.garbage(CODEC_GZIP)), 0, now_ms=NOW - 1000)  # Log.append checks headers and CRC only
    fill(bad, 10, CODEC_GZIP)
    good = open_log(tmp_path, "good")
    fill(good, 20, CODEC_ZSTD)
    before = record_count(good)
    bad_segments = [s.base_offset for s in bad.segments]
    cleaner = LogCleaner([str(tmp_path)], backoff_ms=1000)
    with caplog.at_level(logging.INFO, logger="kafkafast.cleaner"):
        drive(cleaner, [bad, good], NOW, rounds=8)
    assert cleaner.uncleanable == {("bad", 0): 30}
    assert cleaner.uncleanable_partitions == 1
    marked = [r for r in caplog.records if "uncleanable" in r.getMessage()]
    assert len(marked) == 1 and marked[0].levelno == logging.ERROR
    assert "offset 30" in marked[0].getMessage()
    attempts = [r for r in caplog.records if "bad-0" in r.getMessage()]
    assert len(attempts) == 1  # never tried again, never logged again
    assert [s.base_offset for s in bad.segments] == bad_segments
    assert record_count(good) < before == 60
    assert cleaner.cleanings >= 1
    # Once the bad batch has left the log (DeleteRecords, retention), the partition is cleaned again.
    bad.state.high_watermark = bad.state.log_end_offset
    bad.delete_records_before(33)
    drive(cleaner, [bad, good], NOW + 100_000, rounds=2)
    assert cleaner.uncleanable == {}
    assert record_count(bad) < 30


_BOMB_CLEANING = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.unit.test_cleaner_bad_batches import open_log, fill, drive
from tests.support import hostile_batches as hb
from kafkafast.storage.cleaner import LogCleaner

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

root, cache = Path(sys.argv[2]), Path(sys.argv[3])
logs = []
for codec in hb.BOMB_SIZES:
    lg = open_log(root, f"bomb{codec}", segment_bytes=4 << 20)
    fill(lg, 5, codec)
    lg.append(bytearray(hb.bomb(codec, cache)), 0, now_ms=hb.TIMESTAMP)
    fill(lg, 5, codec)
    logs.append(lg)
good = open_log(root, "good")
fill(good, 20)
logs.append(good)
cleaner = LogCleaner([str(root)], backoff_ms=1000)
before = status("VmRSS")
drive(cleaner, logs, 10_000_000, rounds=6)
print(json.dumps({"growth_kib": status("VmHWM") - before, "uncleanable": sorted(t for t, _ in cleaner.uncleanable),
                  "cleanings": cleaner.cleanings}))
"""


def test_bombs_in_compacted_logs_are_uncleanable_with_bounded_memory(tmp_path, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "bombs"
    cache.mkdir(exist_ok=True)
    for codec in hb.BOMB_SIZES:  # made here, so the measured process only cleans
        hb.bomb_payload(codec, cache)
    out = subprocess.run([sys.executable, "-c", _BOMB_CLEANING, str(REPO), str(tmp_path), str(cache)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["uncleanable"] == sorted(f"bomb{c}" for c in hb.BOMB_SIZES)
    assert result["cleanings"] >= 1  # the good log was compacted
    assert result["growth_kib"] < 64 * 1024, f"peak RSS grew by {result['growth_kib'] >> 10} MiB"
