"""Synchronous facade: blocking twins of the low-level and admin calls, and `LoopThread`,
the private event loop in a background thread the sync producer and consumer run on.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, TypeVar

from kafkafast.client.admin import create_topics_sync, delete_topics_sync, describe_configs_sync
from kafkafast.client.consumer import AIOConsumer
from kafkafast.client.producer import AIOProducer, DeliveryFuture
from kafkafast.client.lowlevel import fetch_range_sync, list_offsets_sync, partitions_for_sync, topics_sync
from kafkafast.protocol.errors import RequestTimedOutError

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop when installed) running in a daemon thread."""

    def __init__(self, name: str = "kafkafast-client", *, use_uvloop: bool = True) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        if use_uvloop:
            try:
                import uvloop  # deferred: optional (use_uvloop), asyncio's loop otherwise
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


class KafkaProducer:
    """Blocking producer: appends in the calling thread, sends from a private loop thread.

    Takes the keyword settings of `AIOProducer`."""

    def __init__(self, bootstrap_servers: str | list[str], **settings: Any) -> None:
        # The standard library's loop, not uvloop: its socket writes release the GIL, so the
        # caller goes on appending while a finished batch is copied into the kernel (uvloop
        # copies holding the GIL, which stalls the caller for the length of every write).
        self._lt = LoopThread("kafkafast-producer", use_uvloop=False)
        self._p = AIOProducer(bootstrap_servers, **settings)
        self._lt.run(self._p.start())
        assert self._p.acc is not None
        self._p.acc.threaded = True  # send() appends from the caller's thread
        self._num_partitions = self._p._num_partitions
        self._append = self._p.append

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
             headers: Any = None, partition: int | None = None, timestamp_ms: int | None = None) -> DeliveryFuture:
        n = self._num_partitions.get(topic)
        if n is None:
            n = len(self._lt.run(self._p.partitions_for(topic)))
        res = self._append(topic, value, key, headers, partition, timestamp_ms, n)
        if res is None:  # buffer.memory full: block like the Java producer
            acc = self._p.acc
            assert acc is not None
            deadline = time.monotonic() + self._p.max_block
            while res is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError("buffer.memory full")
                acc.wait_memory_blocking(min(left, 0.1))
                res = self._p.append(topic, value, key, headers, partition, timestamp_ms, n)
        elif res[1] == 0:
            # A new batch: the one before is ready to go, so give the GIL to the loop thread
            # now, instead of letting it wait for the interpreter's switch interval (5 ms).
            time.sleep(0)
        return res

    def partitions_for(self, topic: str) -> list[int]:
        return self._lt.run(self._p.partitions_for(topic))

    def init_transactions(self) -> None:
        self._lt.run(self._p.init_transactions())

    def begin_transaction(self) -> None:
        self._p.begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group_id: str) -> None:
        self._lt.run(self._p.send_offsets_to_transaction(offsets, group_id))

    def commit_transaction(self) -> None:
        self._lt.run(self._p.commit_transaction())

    def abort_transaction(self) -> None:
        self._lt.run(self._p.abort_transaction())

    def flush(self, timeout: float | None = None) -> None:
        self._lt.run(self._p.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        try:
            self._lt.run(self._p.close(timeout))
        finally:
            self._lt.stop()

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KafkaConsumer:
    """Blocking consumer over `AIOConsumer` (same keyword settings) on a private loop thread."""

    def __init__(self, *topics: str, bootstrap_servers: str | list[str], **settings: Any) -> None:
        # The standard library's loop here too: it receives with the GIL released, so the
        # caller works through the last poll's records while the next answer comes in.
        self._lt = LoopThread("kafkafast-consumer", use_uvloop=False)
        self._c = AIOConsumer(*topics, bootstrap_servers=bootstrap_servers, **settings)
        self._lt.run(self._c.start())

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        async def run() -> Any:
            return fn(*args, **kw)
        return self._lt.run(run())

    def assign(self, partitions: Any) -> None:
        self._call(self._c.assign, list(partitions))

    def subscribe(self, topics: Any = None, *, pattern: str | None = None, listener: Any = None) -> None:
        self._call(self._c.subscribe, topics, pattern=pattern, listener=listener)

    def unsubscribe(self) -> None:
        self._call(self._c.unsubscribe)

    def assignment(self) -> set:
        return self._call(self._c.assignment)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        return self._lt.run(self._c.getmany(timeout_ms=timeout_ms, max_records=max_records))

    def __iter__(self) -> Any:
        while True:
            for records in self.poll(1000).values():
                yield from records

    def seek(self, tp: Any, offset: int) -> None:
        self._call(self._c.seek, tp, offset)

    def seek_to_beginning(self, *tps: Any) -> None:
        self._lt.run(self._c.seek_to_beginning(*tps))

    def seek_to_end(self, *tps: Any) -> None:
        self._lt.run(self._c.seek_to_end(*tps))

    def position(self, tp: Any) -> int:
        return self._lt.run(self._c.position(tp))

    def committed(self, tp: Any) -> int | None:
        return self._lt.run(self._c.committed(tp))

    def commit(self, offsets: Any = None) -> None:
        self._lt.run(self._c.commit(offsets))

    def commit_async(self, offsets: Any = None) -> ConcurrentFuture:
        return self._lt.submit(self._c.commit(offsets))

    def offsets_for_times(self, timestamps: dict) -> dict:
        return self._lt.run(self._c.offsets_for_times(timestamps))

    def beginning_offsets(self, tps: Any) -> dict:
        return self._lt.run(self._c.beginning_offsets(list(tps)))

    def end_offsets(self, tps: Any) -> dict:
        return self._lt.run(self._c.end_offsets(list(tps)))

    def pause(self, *tps: Any) -> None:
        self._call(self._c.pause, *tps)

    def resume(self, *tps: Any) -> None:
        self._call(self._c.resume, *tps)

    def paused(self) -> set:
        return self._call(self._c.paused)

    def close(self) -> None:
        try:
            self._lt.run(self._c.close())
        finally:
            self._lt.stop()

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ += ["KafkaConsumer", "KafkaProducer"]
