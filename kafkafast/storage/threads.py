"""The storage layer's helper threads: one single-thread pool per name and process, made on
first use and made again in a forked worker (threads do not survive a fork). `log-flush`
syncs rolled segments, unlinks deleted ones (storage/log.py) and closes a reader's last
descriptor of a deleted segment (storage/reader.py: the kernel frees the file's pages and
blocks in that close), `writeback` starts the disk write of appended data
(storage/writeback.py): disk waits kept off the event loop."""
from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}  # name -> (the process it was made in, the pool)
_lock = threading.Lock()


def process_thread(name: str) -> ThreadPoolExecutor:
    """This process's one thread called `name`."""
    with _lock:
        pool = _pools.get(name)
        if pool is None or pool[0] != os.getpid():
            pool = _pools[name] = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix=name))
        return pool[1]


def off_the_loop(name: str, fn: Callable[..., object], *args: object) -> bool:
    """`fn(*args)` on this process's thread `name` when an event loop runs in the calling
    thread (True: handed over), else at once (False: done; unit code without a loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        fn(*args)
        return False
    process_thread(name).submit(fn, *args)
    return True
