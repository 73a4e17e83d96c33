"""The storage layer's helper threads: one single-thread pool per name and process, made on
first use and made again in a forked worker (threads do not survive a fork). `log-flush`
syncs rolled segments and unlinks deleted ones (storage/log.py), `writeback` starts the disk
write of appended data (storage/writeback.py): disk waits kept off the event loop."""
from __future__ import annotations

import os
import threading
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
