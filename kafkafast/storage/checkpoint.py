"""Small text checkpoint files, written atomically (tmp file, fsync, rename, fsync dir)."""
from __future__ import annotations

import errno
import os

from kafkafast.protocol.errors import KafkaStorageError

CHECKPOINT_VERSION = 0


OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_out_of_space(exc: BaseException) -> bool:
    """A write failed because the file system (or the quota) is full, not because it broke."""
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


def write_file_atomically(path: str, data: bytes | bytearray | memoryview, *, tmp: str | None = None,
                          fsync: bool = True) -> None:
    """Write `data` to a tmp file and rename it over `path`. A failure (a full disk) leaves
    `path` as it was and removes the tmp file, so a failed rewrite never costs the old file
    nor leaves space taken."""
    tmp = tmp or f"{path}.{os.getpid()}.tmp"  # several worker processes may write the same file
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_atomically(path: str, text: str) -> None:
    write_file_atomically(path, text.encode())
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 2:
        raise KafkaStorageError(f"malformed checkpoint file {path}: too short")
    try:
        version, count = int(lines[0]), int(lines[1])
    except ValueError:
        raise KafkaStorageError(f"malformed checkpoint file {path}: bad header") from None
    if version != CHECKPOINT_VERSION:
        raise KafkaStorageError(f"unknown checkpoint version {version} in {path}")
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise KafkaStorageError(f"malformed checkpoint file {path}: expected {count} entries, found {len(entries)}")
    return entries


class OffsetCheckpointFile:
    """`recovery-point-offset-checkpoint` / `log-start-offset-checkpoint` in a log dir.

    Format (Kafka's)::

        0                       version
        <count>
        <topic> <partition> <offset>      one line per partition
    """

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        entries = _read_lines(self.path)
        out: dict[tuple[str, int], int] = {}
        for line in entries or ():
            parts = line.split()
            if len(parts) != 3:
                raise KafkaStorageError(f"malformed line {line!r} in {self.path}")
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise KafkaStorageError(f"malformed line {line!r} in {self.path}") from None
        return out

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        write_atomically(self.path, "\n".join(lines) + "\n")


class EpochCheckpointFile:
    """`leader-epoch-checkpoint`: "0\\n<count>\\n<epoch> <start offset>\\n..." (Kafka's)."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        entries = _read_lines(self.path)
        out = []
        for line in entries or ():
            parts = line.split()
            if len(parts) != 2:
                raise KafkaStorageError(f"malformed line {line!r} in {self.path}")
            try:
                out.append((int(parts[0]), int(parts[1])))
            except ValueError:
                raise KafkaStorageError(f"malformed line {line!r} in {self.path}") from None
        return out

    def write(self, entries: list[tuple[int, int]]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
        write_atomically(self.path, "\n".join(lines) + "\n")
