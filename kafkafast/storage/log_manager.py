"""LogManager: every partition log of this broker across its `log.dirs`."""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from kafkafast import clock
from kafkafast.protocol.errors import KafkaError, KafkaStorageError
from kafkafast.storage.checkpoint import OffsetCheckpointFile, fsync_dir, is_out_of_space, write_atomically
from kafkafast.storage.config import LogConfig
from kafkafast.storage.log import Log
from kafkafast.storage.partition_state import PartitionState

logger = logging.getLogger("kafkafast.storage")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
MIN_FREE_BYTES_FOR_NEW_PARTITION = 1 << 20  # a dir with less free space gets new partitions last
INITIAL_TASK_DELAY_MS = 30000  # Kafka's LogManager.InitialTaskDelayMs: first run of each periodic task

# Test hook (kafkafast.testing): called with (topic, partition) before a partition's log is
# opened at load; a test holds it there to keep the partition loading.
load_fault: Callable[[str, int], None] | None = None

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


def clean_start(log_dir: str) -> bool:
    """Whether the logs in `log_dir` need no recovery scan: its clean-shutdown marker is there,
    or it holds no partition yet (a new dir has nothing to recover). The supervisor of worker
    processes and a one-process broker decide the same way, so their log lines agree."""
    if os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)):
        return True
    try:
        names = os.listdir(log_dir)
    except OSError:
        return False  # (an unreadable dir goes offline at load)
    return not any(parse_partition_dir(n) is not None and os.path.isdir(os.path.join(log_dir, n)) for n in names)


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

    New partitions go to the log dir holding the fewest partition directories among those
    with at least MIN_FREE_BYTES_FOR_NEW_PARTITION free (then the others; never an offline one).

    Periodic tasks (`periodic`), each first run `min(interval, INITIAL_TASK_DELAY_MS)` after
    the manager was made, as Kafka's scheduler does: retention and producer expiry every
    `log.retention.check.interval.ms`, the recovery-point checkpoint every
    `log.flush.offset.checkpoint.interval.ms`, the log-start checkpoint every
    `log.flush.start.offset.checkpoint.interval.ms`.

    A full disk degrades, never stops: appends answer KAFKA_STORAGE_ERROR, reads go on,
    a checkpoint that does not fit keeps the previous file (retried at the next
    interval), and `shutdown` writes the clean-shutdown marker only in the dirs where
    everything else got written (the others get a recovery scan, which needs no space,
    at the next start). A partition whose log cannot be opened at all (an I/O error) is
    offline (`offline`, published as `state.offline`): it answers KAFKA_STORAGE_ERROR and
    the other partitions and dirs keep serving. A log dir that cannot be created or listed
    is offline, and so is every expected partition found in no online dir (Kafka's
    getOrCreateLog refuses to re-create a log while a dir is offline).
    """

    def __init__(self, log_dirs: list[str], default_config: LogConfig, *, state_factory: StateFactory | None = None,
                 retention_check_interval_ms: int = 300000, checkpoint_interval_ms: int = 60000,
                 log_start_checkpoint_interval_ms: int = 60000, producer_id_expiration_ms: int = 86400000,
                 now_ms: int | None = None, shared_factory: Callable[[str, int], Any] | None = None) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.state_factory: StateFactory = state_factory or (lambda topic, partition: PartitionState())
        self.shared_factory = shared_factory
        """(topic, partition) -> the `SharedAppend` its Log is opened with (worker processes
        appending through shared memory, storage/shared_append.py), or None."""
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.log_start_checkpoint_interval_ms = log_start_checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self.offline: dict[tuple[str, int], OfflineLog] = {}
        """Partitions whose log could not be opened, by key."""
        self.offline_dirs: set[str] = set()
        """Log dirs that could not be created, listed or read at load (nothing is placed there)."""
        self.unwritten_dirs: set[str] = set()
        """Dirs where the last `shutdown` could not write everything (no clean marker)."""
        self._unwritten_files: set[str] = set()
        self.last_load_recovered: dict[tuple[str, int], int] = {}
        """Bytes re-validated by recovery scans per log at the last `load_all` (0: none)."""
        self.last_load_truncated: dict[tuple[str, int], int] = {}
        """Bytes cut off invalid tails per log at the last `load_all`."""
        self.last_load_clean = True
        """Whether the last `load_all` was a clean start (`clean_start` in every dir): no recovery scan."""
        self.expected_partitions: set[tuple[str, int]] = set()
        """Partitions known to exist (the broker's topics at load): one of them that is not
        found while a dir is offline is taken offline in `create`, not re-created empty."""
        start = clock.now_ms() if now_ms is None else now_ms
        self._next_retention_ms = start + min(retention_check_interval_ms, INITIAL_TASK_DELAY_MS)
        self._next_checkpoint_ms = start + min(checkpoint_interval_ms, INITIAL_TASK_DELAY_MS)
        self._next_start_checkpoint_ms = start + min(log_start_checkpoint_interval_ms, INITIAL_TASK_DELAY_MS)
        for d in self.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:
                logger.error("log dir %s is offline: %s", d, exc)
                self.offline_dirs.add(d)

    @property
    def periodic_granularity_ms(self) -> int:
        """How often `periodic` should be called to keep to the shortest interval."""
        return max(min(self.retention_check_interval_ms, self.checkpoint_interval_ms,
                       self.log_start_checkpoint_interval_ms, 200), 10)

    # -- loading -----------------------------------------------------------------------

    def load_all(self, configs: Mapping[str, LogConfig] | Callable[[str], LogConfig] | None = None) -> None:
        """Open every partition directory; `configs` gives topic configs (default otherwise)."""
        self.last_load_clean = True
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            clean = clean_start(log_dir)
            self.last_load_clean &= clean
            self._load_dir(log_dir, configs, clean=clean, owned=lambda topic, partition: True)
            if os.path.exists(marker):
                os.unlink(marker)
                fsync_dir(log_dir)

    def _load_dir(self, log_dir: str, configs: Mapping[str, LogConfig] | Callable[[str], LogConfig] | None, *,
                  clean: bool, owned: Callable[[str, int], bool]) -> None:
        """Open the partitions of one log dir that `owned` selects."""
        if log_dir in self.offline_dirs:
            return
        try:
            names = sorted(os.listdir(log_dir))
            recovery_points = self._read_checkpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT))
            log_starts = self._read_checkpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
        except OSError as exc:
            logger.error("log dir %s is offline: %s", log_dir, exc)
            self.offline_dirs.add(log_dir)
            return
        for name in names:
            path = os.path.join(log_dir, name)
            if name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            key = parse_partition_dir(name)
            if key is None or key in self._logs or key in self.offline or not owned(*key) \
                    or not os.path.isdir(path):
                continue
            topic, partition = key
            state = self.state_factory(topic, partition)
            if load_fault is not None:
                load_fault(topic, partition)
            try:
                log = Log.open(path, topic, partition, self._config_for(topic, configs), state,
                               needs_recovery=not clean, recovery_point=recovery_points.get(key, 0),
                               log_start_offset=log_starts.get(key, 0), shared=self._shared(topic, partition))
            except Exception as exc:  # an I/O error, or anything else: this partition only
                logger.error("%s-%d is offline: its log in %s cannot be opened: %r", topic, partition, log_dir, exc,
                             exc_info=not isinstance(exc, (OSError, KafkaError)))
                self.offline[key] = OfflineLog(topic, partition, path, state, str(exc))
                continue
            self._logs[key] = log
            self._dir_of[key] = log_dir
            self.last_load_recovered[key] = log.load_stats.scanned_bytes
            self.last_load_truncated[key] = log.load_stats.truncated_bytes
            if log.load_stats.scanned_bytes or log.load_stats.rebuilt_segments:
                logger.info("%s-%d: recovered %d bytes, truncated %d", topic, partition,
                            log.load_stats.scanned_bytes, log.load_stats.truncated_bytes)

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

    def get(self, topic: str, partition: int) -> Log | OfflineLog | None:
        key = (topic, partition)
        return self._logs.get(key) or self.offline.get(key)

    def _shared(self, topic: str, partition: int) -> Any:
        return self.shared_factory(topic, partition) if self.shared_factory is not None else None

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log | OfflineLog:
        """The log of (topic, partition), created in the emptiest log dir that can hold it if
        new; an `OfflineLog` when none can (or when it should exist in an offline dir)."""
        key = (topic, partition)
        existing = self._logs.get(key) or self.offline.get(key)
        if existing is not None:
            return existing
        if key in self.expected_partitions and self.offline_dirs:
            logger.error("%s-%d is offline: its log is in none of the online log dirs", topic, partition)
            offline = self.offline[key] = OfflineLog(
                topic, partition, os.path.join(sorted(self.offline_dirs)[0], f"{topic}-{partition}"),
                self.state_factory(topic, partition), "its log dir is offline")
            return offline
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        state = self.state_factory(topic, partition)
        errors = []
        # The emptiest dir with room first (Kafka: the emptiest); one that cannot take it
        # leaves no directory behind (a stray empty one would shadow the real log at the
        # next load) and the next is tried.
        for log_dir in sorted(online, key=lambda d: (not self._has_room(d), self._partitions_in(d),
                                                     self.log_dirs.index(d))):
            path = os.path.join(log_dir, f"{topic}-{partition}")
            existed = os.path.isdir(path)
            try:
                os.makedirs(path, exist_ok=True)
                fsync_dir(log_dir)
                log = Log.open(path, topic, partition, config or self.default_config, state,
                               needs_recovery=False, recovery_point=0, shared=self._shared(topic, partition))
            except OSError as exc:
                errors.append(f"{log_dir}: {exc}")
                if not existed:
                    shutil.rmtree(path, ignore_errors=True)
                continue
            self._logs[key] = log
            self._dir_of[key] = log_dir
            return log
        reason = "; ".join(errors) or "every log dir is offline"
        logger.error("%s-%d is offline: no log dir can hold it (%s)", topic, partition, reason)
        offline = self.offline[key] = OfflineLog(topic, partition, os.path.join(online[0] if online else
                                                 self.log_dirs[0], f"{topic}-{partition}"), state, reason)
        return offline

    @staticmethod
    def _has_room(log_dir: str) -> bool:
        try:
            st = os.statvfs(log_dir)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize >= MIN_FREE_BYTES_FOR_NEW_PARTITION

    @staticmethod
    def _partitions_in(log_dir: str) -> int:
        """Partition directories in `log_dir`, whoever opened them (other workers' too)."""
        try:
            return sum(1 for e in os.scandir(log_dir) if parse_partition_dir(e.name) is not None and e.is_dir())
        except OSError:
            return 1 << 30

    def delete(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory to `<name>.<uuid>-delete`, remove it."""
        key = (topic, partition)
        offline = self.offline.pop(key, None)
        if offline is not None:
            shutil.rmtree(offline.dir, ignore_errors=True)
            return True
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
        """Time-based flushes and file deletions (every call); retention and producer expiry,
        and the two offset checkpoints, each on its own interval (see the class docstring)."""
        now = clock.now_ms() if now_ms is None else now_ms
        flushed = deleted = unlinked = expired = 0
        run_retention = now >= self._next_retention_ms
        for log in list(self._logs.values()):
            if log.maybe_flush(now):
                flushed += 1
            if run_retention:
                deleted += log.apply_retention(now)
                expired += log.expire_producers(now, self.producer_id_expiration_ms)
            unlinked += log.delete_pending_files(now)
        if run_retention:
            self._next_retention_ms = now + self.retention_check_interval_ms
        checkpointed = False
        if now >= self._next_checkpoint_ms:
            self.checkpoint_recovery_points()
            self._next_checkpoint_ms = now + self.checkpoint_interval_ms
            checkpointed = True
        if now >= self._next_start_checkpoint_ms:
            self.checkpoint_log_start_offsets()
            self._next_start_checkpoint_ms = now + self.log_start_checkpoint_interval_ms
            checkpointed = True
        return PeriodicReport(flushed, deleted, unlinked, expired, checkpointed)

    def checkpoint(self) -> set[str]:
        """Write both offset checkpoint files of every log dir; the dirs where one failed."""
        return self.checkpoint_recovery_points() | self.checkpoint_log_start_offsets()

    def checkpoint_recovery_points(self) -> set[str]:
        return self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point)

    def checkpoint_log_start_offsets(self) -> set[str]:
        return self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset)

    def _checkpoint(self, fname: str, value: Callable[[Log], int]) -> set[str]:
        """One checkpoint file in every online log dir. A dir where it cannot be written
        (full disk, I/O error) keeps its previous file; the dirs that failed."""
        failed = set()
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue
            path = os.path.join(log_dir, fname)
            entries = {k: value(self._logs[k]) for k, d in self._dir_of.items() if d == log_dir}
            try:
                self._write_checkpoint(path, entries)
            except OSError as exc:
                failed.add(log_dir)
                if path not in self._unwritten_files:
                    self._unwritten_files.add(path)
                    logger.warning("cannot write %s (%s); the previous one stays until it can",
                                   path, "disk full" if is_out_of_space(exc) else exc)
                continue
            if path in self._unwritten_files:
                self._unwritten_files.discard(path)
                logger.info("%s written again", path)
        return failed

    def _write_checkpoint(self, path: str, entries: dict[tuple[str, int], int]) -> None:
        OffsetCheckpointFile(path).write(entries)

    def shutdown(self) -> bool:
        """Flush and close every log (producer snapshots), checkpoint, mark clean shutdown
        in every dir where all of that got written; True if it did everywhere."""
        unwritten = set(self.offline_dirs)
        for key, log in self._logs.items():
            try:
                complete = log.close(clean=True)
            except OSError as exc:
                logger.error("%s-%d: clean close failed: %r", log.topic, log.partition, exc)
                complete = False
            if not complete:
                unwritten.add(self._dir_of[key])
        unwritten |= self.checkpoint()
        if self.offline:
            unwritten |= {os.path.dirname(o.dir) for o in self.offline.values()}
        self.unwritten_dirs = unwritten
        for log_dir in self.log_dirs:
            if log_dir in unwritten:
                logger.warning("%s: not everything could be written; the next start recovers it", log_dir)
            else:
                self._mark_clean(log_dir)
        self._logs.clear()
        self._dir_of.clear()
        self.offline.clear()
        return not unwritten

    def _mark_clean(self, log_dir: str) -> None:
        try:
            write_atomically(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), "")
        except OSError as exc:
            logger.warning("%s: cannot write %s (%s); the next start recovers it", log_dir, CLEAN_SHUTDOWN_FILE, exc)


class OfflineLog:
    """Stands in for the `Log` of an offline partition (its files could not be opened):
    every read and write raises KafkaStorageError; the published state says offline."""

    __slots__ = ("topic", "partition", "dir", "state", "reason", "config")

    def __init__(self, topic: str, partition: int, dir: str, state: PartitionState, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.dir = dir
        self.state = state
        self.reason = reason
        self.config: LogConfig | None = None
        state.offline = 1

    def _fail(self, *args: object, **kwargs: object) -> NoReturn:
        raise KafkaStorageError(f"{self.topic}-{self.partition} is offline: {self.reason}")

    @property
    def reader(self) -> NoReturn:
        self._fail()

    append = delete_records_before = offset_for_timestamp = max_timestamp_offset = end_offset_for_epoch = _fail

    def close(self, clean: bool = True) -> bool:
        return False
