"""The single-process server: one event loop, one Broker, the listening socket.

The listeners' addresses are taken at start (`listening.bind_listeners`: refused if another
broker serves one) and listened on only once the broker has loaded, so no connection waits
unserved while the logs are opened.

`run_server(config)` serves until SIGTERM/SIGINT, then shuts down gracefully: it stops
accepting, lets requests in flight finish (up to SHUTDOWN_GRACE seconds), flushes every
log, writes the clean-shutdown markers and returns 0. The multi-process supervisor reuses
`serve()` in each worker.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from typing import Any, Callable

from kafkafast.broker.broker import Broker
from kafkafast.broker.control import LocalControl
from kafkafast.broker.placement import LocalPlacement, Placement
from kafkafast.config import BrokerConfig
from kafkafast.runtime.connection import KafkaConnection
from kafkafast.runtime.listening import ListenerError, bind_listeners, serve_listeners  # noqa: F401
from kafkafast.runtime.loop_watch import LoopWatch

log = logging.getLogger("kafkafast.server")
SHUTDOWN_GRACE = 5.0


class Server:
    def __init__(self, broker: Broker, specs: list, socks: list[socket.socket]) -> None:
        self.broker = broker
        self.specs = specs
        self.socks = socks
        self.connections: set[KafkaConnection] = set()
        self.servers: list[asyncio.AbstractServer] = []
        self.limits: Any = None

    async def start(self) -> None:
        self.servers, self.limits = await serve_listeners(self.broker, self.specs, self.socks, self.connections)

    async def stop(self) -> None:
        for srv in self.servers:
            srv.close()
        if self.limits is not None:
            self.limits.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE
        while any(c.busy or c.queue for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for c in list(self.connections):
            c.abort()
        await self.broker.stop()


async def serve_forever(config: BrokerConfig, control: Callable[[Broker], Any] = LocalControl,
                        placement: Callable[[], Placement] = LocalPlacement, *, ready: Any = None) -> int:
    """`control`: the broker's control plane (`LocalControl`, or cluster mode's `ZkControl`) and
    `placement` its one-process placement, chosen by the command line: the runtime does not
    know the control planes."""
    specs, socks, locks = bind_listeners(config)  # taken now, listened on once started
    stop = asyncio.Event()  # a SIGTERM while the logs load stops the broker cleanly too
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(config, placement(), control)
    await broker.start()
    server = Server(broker, specs, socks[0])
    watch = LoopWatch()
    if not stop.is_set():
        await server.start()
        await broker.on_listening()  # cluster mode: registers in ZooKeeper now
        watch.start()  # the start-up's objects frozen out of the collector's walks
        log.info("kafkafast broker %d listening on %s, data in %s", broker.node_id,
                 ", ".join(f"{s.name} ({s.protocol}) {s.host}:{s.port}" for s in specs), ",".join(config.log_dirs))
        if ready is not None:
            ready(specs[0].port)
        await stop.wait()
    log.info("shutting down")
    await broker.before_stop()  # cluster mode: leaderships move while still serving
    await server.stop()
    watch.stop()
    for lock in locks:
        lock.close()
    return 0


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # deferred: optional, asyncio's loop otherwise

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.new_event_loop()


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancels what still runs (a start that failed half-way leaves tasks behind), lets the
    cancellations finish and closes the loop: no "Task was destroyed but it is pending!"."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def start_profile() -> Any:
    """A cProfile of this process when KAFKAFAST_PROFILE names a directory (None otherwise), for
    `stop_profile` to write there at shutdown: every worker of `--workers N` and the one process
    of `--workers 0` alike (perf/cluster_workers_where.py compares them).
    KAFKAFAST_PROFILE_CPU=1: CPU time (process_time), not wall time, which on a shared machine
    charges other processes' time slices to whatever function was running.
    KAFKAFAST_PROFILE_GATE=1: it starts off; SIGUSR1 turns it on, SIGUSR2 off (a benchmark
    profiles its loads only, not start-up or the idle time between them), and the process
    names itself by an empty file `gate-<pid>` in the directory: the processes to signal."""
    directory = os.environ.get("KAFKAFAST_PROFILE")
    if not directory:
        return None
    import cProfile  # deferred: profiling only

    profiler = cProfile.Profile(time.process_time) if os.environ.get("KAFKAFAST_PROFILE_CPU") else cProfile.Profile()
    if os.environ.get("KAFKAFAST_PROFILE_GATE"):
        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
        signal.signal(signal.SIGUSR2, lambda *_: profiler.disable())
        open(os.path.join(directory, f"gate-{os.getpid()}"), "w").close()
    else:
        profiler.enable()
    return profiler


def stop_profile(profiler: Any, name: str) -> None:
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(os.environ["KAFKAFAST_PROFILE"], f"{name}-{os.getpid()}.prof"))


def run_server(config: BrokerConfig, control: Callable[[Broker], Any] = LocalControl,
               placement: Callable[[], Placement] = LocalPlacement) -> int:
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    profiler = start_profile()
    try:
        return loop.run_until_complete(serve_forever(config, control, placement))
    finally:
        close_loop(loop)
        stop_profile(profiler, "broker")
