"""A worker process: the broker core as seen by one of N pre-forked workers.

Everything here starts after the fork (`run_worker`): the uvloop event loop, the Broker,
the logs this worker owns, its servers on the inherited listening sockets.

The broker is a `Broker` with its control plane (`broker/control.py:LocalControl`, or cluster
mode's `cluster/zk_control.py:ZkControl`) over this worker's placement (`runtime/placement.py:WorkerPlacement`,
whatever the control plane): where each partition lives, and the
worker paths (owned logs, forwarding, shared append, wake-ups). The command line chooses
both and hands them to `run_worker` (this package imports nothing of kafkafast/cluster).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
from typing import Any, Callable

from kafkafast.broker.broker import Broker
from kafkafast.broker.control import LocalControl
from kafkafast.config import BrokerConfig, ConfigError
from kafkafast.runtime import shm
from kafkafast.runtime.forwarding import InternalConnection
from kafkafast.runtime.listening import serve_listeners
from kafkafast.runtime.loop_watch import LoopWatch
from kafkafast.runtime.placement import WorkerPlacement
from kafkafast.runtime.server import close_loop, new_event_loop, start_profile, stop_profile
from kafkafast.storage.checkpoint import write_atomically

log = logging.getLogger("kafkafast.worker")

SHUTDOWN_GRACE = 6.0
EXIT_STATE_UNWRITTEN = 3
# A first start refused (a ConfigError: ZooKeeper unreachable, ...): the reason is in
# <run dir>/CANNOT_START_FILE and the supervisor stops the broker instead of respawning.
EXIT_CANNOT_START = 4
CANNOT_START_FILE = "cannot-start"
"""Exit status of a worker that stopped cleanly but could not write all its state (a full
disk: a producer snapshot, a checkpoint): its logs are flushed, the next start recovers."""


# -- process entry ------------------------------------------------------------------------

def _install_sendfile_stats(directory: str) -> None:
    """Test hook (KAFKAFAST_SENDFILE_STATS=dir): counts os.sendfile calls and bytes in this
    worker into `<dir>/sendfile-<pid>.json`."""
    real = os.sendfile
    stats = {"pid": os.getpid(), "calls": 0, "bytes": 0}
    path = os.path.join(directory, f"sendfile-{os.getpid()}.json")

    def counting_sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        sent = real(out_fd, in_fd, offset, count)
        stats["calls"] += 1
        stats["bytes"] += sent
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(stats, fh)
        os.replace(tmp, path)
        return sent

    os.sendfile = counting_sendfile  # type: ignore[assignment]


def controlled_shutdown_budget(config: Any) -> float:
    """Seconds a ZooKeeper broker's controlled shutdown may take (Kafka's retries x backoff,
    plus the wait for the LeaderAndIsr and one slow request); 0 when it is off. The control
    plane says whether it has one (`shutdown_budget_s`)."""
    if not config.get_bool("controlled.shutdown.enable"):
        return 0.0
    retries = max(config.get_int("controlled.shutdown.max.retries"), 1)
    return retries * config.get_int("controlled.shutdown.retry.backoff.ms") / 1000.0 + 15.0


def _set_parent_death_signal() -> None:
    """If the supervisor dies (SIGKILL), workers get SIGTERM instead of living on."""
    try:
        import ctypes  # deferred: loads libc only in a worker, after the fork

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - not Linux
        pass


async def _serve(broker: Broker, listen_socks: list[socket.socket], listener_specs: list,
                 internal_sock: socket.socket, wake_r: int, stop: asyncio.Event) -> int:
    loop = asyncio.get_running_loop()
    # Unblocked only now: uvloop loses a signal that arrives before its loop runs, and a
    # SIGTERM sent while this worker starts must still stop it.
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    await broker.start()
    max_req = broker.config.get_int("socket.request.max.bytes")
    external: set = set()
    internal: set = set()
    # listen() happens here, once this worker can serve (the supervisor only bound the sockets);
    # a worker told to stop while it started never listens.
    ext_servers, limits = ([], None) if stop.is_set() else await serve_listeners(
        broker, listener_specs, listen_socks, external)
    int_server = await loop.create_unix_server(lambda: InternalConnection(broker, max_req, tracker=internal),
                                               sock=internal_sock)
    loop.add_reader(wake_r, broker.placement.on_wake_pipe, wake_r)
    table = broker.placement.table
    table.set_worker_word(broker.placement.index, shm.W_READY, 1)
    watch = LoopWatch()
    if not stop.is_set():
        await broker.on_listening()  # cluster mode: worker 0 registers once serving
        watch.start()  # the start-up's objects frozen out of the collector's walks
    await stop.wait()
    # cluster mode: worker 0 asks the controller to move the broker's leaderships (every
    # worker's partitions) while every worker still serves; the others wait for it
    await broker.before_stop()
    # Graceful: stop accepting clients, let their requests finish (forwards to other
    # workers included), then stop taking forwarded requests, then flush and close logs.
    table.set_worker_word(broker.placement.index, shm.W_READY, 0)
    for srv in ext_servers:
        srv.close()
    if limits is not None:
        limits.stop()
    deadline = loop.time() + SHUTDOWN_GRACE

    def idle(conns: set) -> bool:
        return not any(c.busy or c.queue for c in conns)

    while not idle(external) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    for c in list(external):
        c.abort()
    # Other workers may still forward requests of their own clients for a moment.
    quiet_since = loop.time()
    while loop.time() < deadline and loop.time() - quiet_since < 0.2:
        await asyncio.sleep(0.02)
        if not idle(internal):
            quiet_since = loop.time()
    int_server.close()
    for c in list(internal):
        c.abort()
    loop.remove_reader(wake_r)
    await broker.stop()
    watch.stop()
    return EXIT_STATE_UNWRITTEN if broker.log_manager.unwritten_dirs else 0


def run_worker(config: BrokerConfig, control: Callable[[Broker], Any] = LocalControl,
               placement_class: type[WorkerPlacement] = WorkerPlacement, *, index: int,
               incarnation: int, table: shm.PartitionTable,
               listen_socks: list[socket.socket], listener_specs: list, internal_sock: socket.socket,
               wake_r: int, wake_fds: list[int],
               run_dir: str, clean: bool, counters: Any = None) -> int:
    """The worker's main, called in the child right after the fork. `control`: the broker's
    control plane (`LocalControl`, or cluster mode's), over `placement_class` (this worker's
    placement, or cluster mode's), both chosen by the command line."""
    _set_parent_death_signal()
    table.after_fork()
    table.clear_worker_waiters(index)
    table.set_worker_word(index, shm.W_WAKE_PENDING, 0)  # a predecessor's pending wake-up: the pipe is drained on start
    table.set_worker_word(index, shm.W_PID, os.getpid())
    table.set_worker_word(index, shm.W_INCARNATION, incarnation)
    stats_dir = os.environ.get("KAFKAFAST_SENDFILE_STATS")
    if stats_dir:
        _install_sendfile_stats(stats_dir)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    placement = placement_class(index=index, incarnation=incarnation, table=table, wake_fds=wake_fds,
                                run_dir=run_dir, clean=clean)
    broker = Broker(config, placement, control)
    if counters is not None:  # runtime/shared_counters.py: connection limits and quotas, broker-wide
        counters.after_fork()
        broker.counters = counters
        broker.dynamic.share_generation(counters)  # a dynamic config (quota) set on one worker applies on all at once
    profiler = start_profile()  # (KAFKAFAST_PROFILE: each worker's cProfile, written at shutdown)
    try:
        return loop.run_until_complete(_serve(broker, listen_socks, listener_specs, internal_sock, wake_r, stop))
    except ConfigError as exc:  # e.g. ZooKeeper unreachable: the supervisor reports it once
        if incarnation > 1:
            log.error("worker %d cannot start: %s", index, exc)
            return 1
        write_atomically(os.path.join(run_dir, CANNOT_START_FILE), str(exc))
        return EXIT_CANNOT_START
    except Exception:
        log.exception("worker %d failed", index)
        return 1
    finally:
        close_loop(loop)
        stop_profile(profiler, f"worker-{index}")
