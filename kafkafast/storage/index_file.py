"""The append-only index file shared by the offset index and the time index.

An index file is a packed array of fixed-size big-endian entries and nothing else: no
header, no preallocation (file size == entries * entry size), so a reader in another
process learns the entry count with `fstat` and maps exactly that.

The writer never shrinks an index file in place: truncation and rebuilds write the new
entries to `<name>.tmp` and rename it over the old name. A reader's `mmap` of the old
inode therefore stays valid (a mapping of a file truncated under it would raise SIGBUS);
it is only stale: the reader drops a view whose name leads to another inode once it sees
the partition's segments version move (`LogReader.refresh`), and until then checks the
batch an entry points at before trusting it.

A full disk never costs an index, nor the partition: the file only has to be a sorted
subset of the entries (a sparser index is still a correct one), so an entry that cannot
be written is kept in memory only (a torn one is cut off again), a rewrite that does not
fit keeps the file if it holds the first entries, else leaves an empty file (or none:
readers then scan from the segment start), and a rewrite of the bytes the file already
holds is skipped. The writer always looks up in
its complete in-memory copy.

Lookups use `kafkafast.native.load("index_search")` (compiled twin, or its pure twin).
"""
from __future__ import annotations

import logging
import mmap
import os

from kafkafast import native
from kafkafast.storage.checkpoint import is_out_of_space, write_file_atomically

logger = logging.getLogger("kafkafast.storage")

Buffer = bytes | bytearray | memoryview | mmap.mmap

_MAX_INDEX_FILE = 1 << 30  # never read an index bigger than this; such a file is corrupt


index_search = native.load("index_search")


def read_index_file(path: str) -> bytearray | None:
    """The whole file, or None when it is missing or too large to be an index."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > _MAX_INDEX_FILE:
            return None
        out = bytearray()
        while len(out) < size:
            chunk = os.pread(fd, size - len(out), len(out))
            if not chunk:
                break
            out += chunk
        return out
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes | bytearray | memoryview) -> None:
    """Write `data` to `path.tmp` and rename it over `path` (never shrinks in place); a
    failure leaves `path` untouched."""
    write_file_atomically(path, data, tmp=path + ".tmp", fsync=False)


def replace_file_or_empty(path: str, data: bytes | bytearray | memoryview) -> bool:
    """`replace_file`, or on a full disk the file as it is when it holds the first entries
    of `data`, else an empty file (or no file) in place of `path`: never a stale index.
    True if `data` got written (or was there already)."""
    existing = read_index_file(path)
    if existing is not None and existing == data:
        return True
    try:
        replace_file(path, data)
        return True
    except OSError as exc:
        if not is_out_of_space(exc):
            raise
    logger.warning("%s: no space to write the index; it is kept in memory until space is freed", path)
    if existing is not None and memoryview(data)[:len(existing)] == existing:
        return False  # the file holds the first entries: a correct, sparser index
    try:
        replace_file(path, b"")
    except OSError:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return False


class IndexWriter:
    """Writer side of one index file: entries in memory plus an O_APPEND fd on the file."""

    __slots__ = ("path", "entry_size", "max_entries", "buf", "entries", "_fd", "_deferred")

    def __init__(self, path: str, entry_size: int, max_index_bytes: int, initial: bytearray | None) -> None:
        self.path = path
        self.entry_size = entry_size
        self.max_entries = max(max_index_bytes // entry_size, 0)
        self.buf = initial if initial is not None else bytearray()
        self.entries = len(self.buf) // entry_size
        if initial is None or len(initial) % entry_size:
            self.buf = bytearray()
            self.entries = 0
            replace_file_or_empty(path, b"")
        self._fd = -1
        self._open_for_append()
        self._deferred = False

    def _open_for_append(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
            self._fd = -1  # no room even for an empty file: entries live in memory

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return len(self.buf)

    def _append(self, entry: bytes, count: int = 1) -> None:
        """`count` entries (`entry` holds them all: one write)."""
        self.buf += entry
        self.entries += count
        if not self._deferred and self._fd >= 0:
            self._write(entry)

    def _write(self, data: bytes | bytearray) -> None:
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
            written = 0
        if written != len(data):
            self._cut_torn_entry()

    def _cut_torn_entry(self) -> None:
        """A full disk took part of an entry: cut the file back to whole entries (only
        bytes no reader maps, so the shrink is safe); the entry stays in memory."""
        size = os.fstat(self._fd).st_size
        os.ftruncate(self._fd, size - size % self.entry_size)

    def begin_rebuild(self) -> None:
        """Collect entries in memory only, until `end_rebuild` writes them all at once."""
        self.buf = bytearray()
        self.entries = 0
        self._deferred = True

    def end_rebuild(self) -> None:
        self._deferred = False
        self.reset(self.buf)

    def reset(self, data: bytes | bytearray) -> None:
        """Replace every entry (rebuild or truncation), by rename (see the module docstring
        for a full disk)."""
        self.close()
        replace_file_or_empty(self.path, data)
        self.buf = bytearray(data)
        self.entries = len(self.buf) // self.entry_size
        self._open_for_append()

    def flush(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)

    def rename(self, new_path: str) -> None:
        try:
            os.rename(self.path, new_path)
        except FileNotFoundError:  # a full disk left no file (see the module docstring)
            pass
        self.path = new_path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SparseIndex:
    """What the offset and time indexes share: an IndexWriter holding the entries, the
    bytes appended since the last entry, and rebuild/flush/rename/close. Subclasses define
    the entry format, `maybe_track`, lookups and `_reload_last` (cache of the last entry)."""

    __slots__ = ("base_offset", "interval_bytes", "_w", "_bytes_since")

    def _reload_last(self) -> None:
        raise TypeError(f"{type(self).__name__} must define _reload_last")

    @property
    def path(self) -> str:
        return self._w.path

    @property
    def entries(self) -> int:
        return self._w.entries

    @property
    def is_full(self) -> bool:
        return self._w.is_full

    @property
    def buffer(self) -> bytearray:
        return self._w.buf

    def reset(self, data: bytes | bytearray = b"") -> None:
        self._w.reset(data)
        self._reload_last()
        self._bytes_since = 0

    def set_bytes_since(self, n: int) -> None:
        self._bytes_since = n

    @property
    def bytes_since(self) -> int:
        return self._bytes_since

    def adopt(self, entries: int, bytes_since: int) -> None:
        """Shared append (storage/log.py): the file's first `entries` entries, as another
        process published them, become this writer's."""
        w = self._w
        if entries > w.entries:  # read only the entries added since (a replaced file reopens the segment)
            esz = w.entry_size
            want = (entries - w.entries) * esz
            try:
                fd = os.open(w.path, os.O_RDONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    tail = os.pread(fd, want, w.entries * esz)
                finally:
                    os.close(fd)
                tail = tail[:len(tail) // esz * esz]
                w.buf += tail
                w.entries += len(tail) // esz
            self._reload_last()
        elif entries < w.entries:
            del w.buf[entries * w.entry_size:]
            w.entries = entries
            self._reload_last()
        self._bytes_since = bytes_since

    def begin_rebuild(self) -> None:
        self._w.begin_rebuild()
        self._reload_last()
        self._bytes_since = 0

    def end_rebuild(self) -> None:
        self._w.end_rebuild()

    def flush(self) -> None:
        self._w.flush()

    @property
    def writer_fd(self) -> int:
        """The file's descriptor (-1 once closed): duplicated for a sync off the loop (storage/log.py)."""
        return self._w._fd

    def rename(self, new_path: str) -> None:
        self._w.rename(new_path)

    def close(self) -> None:
        self._w.close()


class IndexView:
    """Reader side of one index file: a read-only mmap re-made when the file has grown.

    The view holds the inode it opened. A rewrite of the index (truncation, recovery, a
    dead append-lock holder's repair) renames a new file over the name; the old inode stays
    readable but never changes again, so its entries can point past a truncation point.
    `replaced()` tells the reader, which then drops the view (see `LogReader.refresh`)."""

    __slots__ = ("path", "entry_size", "_fd", "_map", "_n", "ino")

    def __init__(self, path: str, entry_size: int) -> None:
        self.path = path
        self.entry_size = entry_size
        self._map: mmap.mmap | None = None
        self._n = 0
        self.ino = -1
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._fd = -1
        else:
            self.ino = os.fstat(self._fd).st_ino

    def replaced(self) -> bool:
        """True when the name no longer leads to the inode this view reads (or now leads to a
        file where there was none)."""
        try:
            return os.stat(self.path).st_ino != self.ino
        except FileNotFoundError:
            return self.ino != -1

    def entries(self, refresh: bool = False) -> tuple[Buffer, int]:
        """(buffer, entry count); `refresh` re-maps if the file grew since the last map."""
        if self._fd < 0:
            return b"", 0
        if refresh or self._map is None:
            size = os.fstat(self._fd).st_size
            size = min(size, _MAX_INDEX_FILE) // self.entry_size * self.entry_size
            if size // self.entry_size != self._n or self._map is None:
                if self._map is not None:
                    self._map.close()
                    self._map = None
                self._n = 0
                if size:
                    self._map = mmap.mmap(self._fd, size, prot=mmap.PROT_READ)
                    self._n = size // self.entry_size
        return (self._map if self._map is not None else b""), self._n

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
