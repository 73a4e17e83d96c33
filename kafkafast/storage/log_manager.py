"""LogManager: every partition log of this broker across its `log.dirs`."""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafkafast import clock
from kafkafast.protocol.errors import KafkaStorageError
from kafkafast.storage.checkpoint import OffsetCheckpointFile, fsync_dir, write_atomically
from kafkafast.storage.config import LogConfig
from kafkafast.storage.log import Log
from kafkafast.storage.partition_state import PartitionState

logger = logging.getLogger("kafkafast.storage")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"

StateFactory = Callable[[str, int], PartitionState]


@dataclass(frozen=True, slots=True)
class PeriodicReport:
    """What one `LogManager.periodic` call did."""

    flushed: int
    segments_deleted: int
    files_unlinked: int
    producers_expired: int
    checkpointed: bool


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """("my-topic", 3) for "my-topic-3"; None for anything else (e.g. "x-3.abc-delete")."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    """Opens, creates, deletes and maintains the partition logs in `log_dirs`.

    Per log dir (Kafka's files)::

        .kafka_cleanshutdown               written by `shutdown()` after every log is flushed
                                           and checkpointed; its presence at `load_all()`
                                           means no recovery scan; it is then removed so a
                                           later crash is detected
        recovery-point-offset-checkpoint   "0\\n<count>\\n<topic> <partition> <offset>\\n...":
                                           offset below which each log is flushed
        log-start-offset-checkpoint        same format: each log's start offset
        <topic>-<partition>/               one `Log`
        <topic>-<partition>.<uuid>-delete  a deleted partition being removed (also at load)

    New partitions go to the log dir holding the fewest partitions.
    """

    def __init__(self, log_dirs: list[str], default_config: LogConfig, *, state_factory: StateFactory | None = None,
                 retention_check_interval_ms: int = 300000, checkpoint_interval_ms: int = 60000,
                 producer_id_expiration_ms: int = 86400000) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.state_factory: StateFactory = state_factory or (lambda topic, partition: PartitionState())
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self.last_load_recovered: dict[tuple[str, int], int] = {}
        """Bytes re-validated by recovery scans per log at the last `load_all` (0: none)."""
        self.last_load_truncated: dict[tuple[str, int], int] = {}
        """Bytes cut off invalid tails per log at the last `load_all`."""
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)

    # -- loading -----------------------------------------------------------------------

    def load_all(self, configs: Mapping[str, LogConfig] | Callable[[str], LogConfig] | None = None) -> None:
        """Open every partition directory; `configs` gives topic configs (default otherwise)."""
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            recovery_points = self._read_checkpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT))
            log_starts = self._read_checkpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
            for name in sorted(os.listdir(log_dir)):
                path = os.path.join(log_dir, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                key = parse_partition_dir(name)
                if key is None or key in self._logs:
                    continue
                topic, partition = key
                config = self._config_for(topic, configs)
                log = Log.open(path, topic, partition, config, self.state_factory(topic, partition),
                               needs_recovery=not clean, recovery_point=recovery_points.get(key, 0),
                               log_start_offset=log_starts.get(key, 0))
                self._logs[key] = log
                self._dir_of[key] = log_dir
                self.last_load_recovered[key] = log.load_stats.scanned_bytes
                self.last_load_truncated[key] = log.load_stats.truncated_bytes
                if log.load_stats.scanned_bytes or log.load_stats.rebuilt_segments:
                    logger.info("%s-%d: recovered %d bytes, truncated %d", topic, partition,
                                log.load_stats.scanned_bytes, log.load_stats.truncated_bytes)
            if clean:
                os.unlink(marker)
                fsync_dir(log_dir)

    def _config_for(self, topic: str, configs: Mapping[str, LogConfig] | Callable[[str], LogConfig] | None) -> LogConfig:
        if configs is None:
            return self.default_config
        if callable(configs):
            return configs(topic)
        return configs.get(topic, self.default_config)

    @staticmethod
    def _read_checkpoint(path: str) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(path).read()
        except KafkaStorageError:
            logger.warning("ignoring unreadable checkpoint %s", path)
            return {}

    # -- partitions --------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of (topic, partition), created in the emptiest log dir if new."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        log_dir = min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))
        path = os.path.join(log_dir, f"{topic}-{partition}")
        os.makedirs(path, exist_ok=True)
        fsync_dir(log_dir)
        log = Log.open(path, topic, partition, config or self.default_config, self.state_factory(topic, partition),
                       needs_recovery=False, recovery_point=0)
        self._logs[key] = log
        self._dir_of[key] = log_dir
        return log

    def delete(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory to `<name>.<uuid>-delete`, remove it."""
        key = (topic, partition)
        log = self._logs.pop(key, None)
        if log is None:
            return False
        log_dir = self._dir_of.pop(key)
        log.close(clean=False)
        doomed = os.path.join(log_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.rename(log.dir, doomed)
        fsync_dir(log_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        self.last_load_recovered.pop(key, None)
        self.last_load_truncated.pop(key, None)
        return True

    # -- maintenance -------------------------------------------------------------------

    def periodic(self, now_ms: int | None = None) -> PeriodicReport:
        """Time-based flushes, retention (every retention check interval), file deletions,
        producer expiry and checkpoints (every checkpoint interval)."""
        now = clock.now_ms() if now_ms is None else now_ms
        flushed = deleted = unlinked = expired = 0
        run_retention = now - self._last_retention_ms >= self.retention_check_interval_ms
        for log in list(self._logs.values()):
            if log.maybe_flush(now):
                flushed += 1
            if run_retention:
                deleted += log.apply_retention(now)
                expired += log.expire_producers(now, self.producer_id_expiration_ms)
            unlinked += log.delete_pending_files(now)
        if run_retention:
            self._last_retention_ms = now
        checkpointed = now - self._last_checkpoint_ms >= self.checkpoint_interval_ms
        if checkpointed:
            self.checkpoint()
            self._last_checkpoint_ms = now
        return PeriodicReport(flushed, deleted, unlinked, expired, checkpointed)

    def checkpoint(self) -> None:
        """Write both offset checkpoint files of every log dir."""
        for log_dir in self.log_dirs:
            keys = [k for k, d in self._dir_of.items() if d == log_dir]
            OffsetCheckpointFile(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT)).write(
                {k: self._logs[k].recovery_point for k in keys})
            OffsetCheckpointFile(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)).write(
                {k: self._logs[k].log_start_offset for k in keys})

    def shutdown(self) -> None:
        """Flush and close every log (producer snapshots), checkpoint, mark clean shutdown."""
        for log in self._logs.values():
            log.close(clean=True)
        self.checkpoint()
        for log_dir in self.log_dirs:
            write_atomically(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), "")
        self._logs.clear()
        self._dir_of.clear()
