"""Synchronous facade: blocking twins of the low-level and admin calls, and `LoopThread`,
the private event loop in a background thread the sync producer and consumer run on.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, TypeVar

from kafkafast.client.admin import create_topics_sync, delete_topics_sync, describe_configs_sync
from kafkafast.client.lowlevel import fetch_range_sync, list_offsets_sync, partitions_for_sync, topics_sync

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop when installed) running in a daemon thread."""

    def __init__(self, name: str = "kafkafast-client", *, use_uvloop: bool = True) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        if use_uvloop:
            try:
                import uvloop
                loop = uvloop.new_event_loop()
            except ImportError:
                loop = None
        self.loop = loop or asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> ConcurrentFuture[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the loop and blocks until it is done."""
        return self.submit(coro).result(timeout)

    def call(self, fn: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


__all__ = [
    "LoopThread", "create_topics_sync", "delete_topics_sync", "describe_configs_sync", "fetch_range_sync",
    "list_offsets_sync", "partitions_for_sync", "topics_sync",
]
