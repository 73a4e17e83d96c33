"""Early writeback of appended segment data: `sync_file_range(SYNC_FILE_RANGE_WRITE)` over
each WRITEBACK_BYTES appended to a segment starts the disk write of those pages and returns
without waiting for it (no durability is promised: flushing stays fdatasync's, storage/log.py).

Why: appends only dirty the page cache, and once a few GB are dirty the kernel throttles the
writing process inside its next write (balance_dirty_pages) for up to 200 ms. A broker's
event loop is that process: every request of every partition waited (produce→ack p99 of
~240 ms under RF3 acks=all, perf/results/cluster.md "Appends that never wait on the page
cache"). Started early, the pages are clean long before that limit; a paced 240 MB/s writer
here went from 112-180 ms stalls to none above 4 ms. Where the call does not exist (not
Linux), nothing is done.

The call is made by the process's `writeback` thread on a duplicate of the descriptor: it
returns at once while the device's queue has room, but waits for room when it is full (one
call took 33 ms on the loop of a broker under RF3 load)."""
from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor

from kafkafast.storage.threads import process_thread

WRITEBACK_BYTES = 8 << 20
SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages in the range, do not wait


def _load():
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load()


def _thread() -> ThreadPoolExecutor:
    return process_thread("writeback")


def _write_back(fd: int, offset: int, nbytes: int) -> bool:
    try:
        return _sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) == 0
    finally:
        os.close(fd)


def start_writeback(fd: int, offset: int, nbytes: int, *, wait: bool = False) -> bool:
    """Starts the disk write of `nbytes` at `offset` of `fd` from the writeback thread; False
    where it could not (only a hint: an error changes nothing that fdatasync would not catch).
    `wait`: the thread's answer (tests), else True once handed over."""
    if _sync_file_range is None:
        return False
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        done = _thread().submit(_write_back, dup, offset, nbytes)
    except RuntimeError:  # the interpreter is shutting down: no thread to hand it to
        os.close(dup)
        return False
    return done.result() if wait else True
