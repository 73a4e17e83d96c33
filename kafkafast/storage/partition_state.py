"""Published state of one partition: what a reader (in any process) may see.

The `Log` writer is the only one that stores into these attributes. The runtime supplies a
shared-memory-backed object with the same attribute names (`FIELDS`, every one an int64)
so readers in other workers see them; `PartitionState` is the in-process version.

Publication order (the writer keeps it; readers rely on it):

* append: `active_committed_size` is stored before `log_end_offset`, so a reader that sees
  a log end offset also sees the bytes that hold it.
* roll / segment deletion / truncation / segment replacement: `segments_version` works as
  a sequence lock. The writer makes it odd, changes `active_base_offset`,
  `active_committed_size`, `log_start_offset` and the files, then makes it even again.
  A reader that sees an odd value, or a different value before and after reading the
  segment fields, retries; a reader that sees a new even value re-lists the directory.
* `log_start_offset` moves forward before segment files are renamed away.
* `PartitionState.paired_ends` (True; absent elsewhere): the object is stored and read by one
  thread only (the event loop that owns the log: appends, truncations, segment swaps), so
  fields read together with nothing awaited between are one change's, e.g. a log end offset
  and the committed size that holds exactly it (`LogReader.region` relies on that). A state
  in shared memory, which another process may store into, does not pair them: its readers
  check the batch header instead.
* `offline` is 1 while the partition's log could not be opened (an I/O error at load):
  every request for it answers KAFKA_STORAGE_ERROR; 0 once a load succeeded.
"""
from __future__ import annotations

FIELDS: tuple[str, ...] = (
    "log_start_offset",
    "log_end_offset",
    "high_watermark",
    "last_stable_offset",
    "active_base_offset",
    "active_committed_size",
    "segments_version",
    "max_timestamp",
    "max_timestamp_offset",
    "offline",
)


class PartitionState:
    """In-process published partition state; see the module docstring for the protocol."""

    __slots__ = FIELDS
    paired_ends = True  # see the module docstring

    def __init__(self) -> None:
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.last_stable_offset = 0
        self.active_base_offset = 0
        self.active_committed_size = 0
        self.segments_version = 0
        self.max_timestamp = -1
        self.max_timestamp_offset = -1
        self.offline = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in FIELDS}

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)}" for name in FIELDS)
        return f"PartitionState({inner})"
