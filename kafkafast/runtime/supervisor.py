"""The supervisor: owns the sockets and the shared memory, forks the workers, replaces
dead ones, and shuts everything down gracefully.

Before forking it
* makes sure no other broker serves a listener's address (`listening.bind_listeners`:
  SO_REUSEPORT would otherwise let two kafkafast brokers share a port), then binds one
  socket per worker and listener with `SO_REUSEPORT` - bound, not listening: a worker
  calls listen() on its sockets only when it is ready to serve (`worker._serve`), so the
  kernel refuses connections until some worker serves and then spreads them only over the
  workers that do; none waits in the backlog of a worker that is still loading at start.
  The socket of a worker that dies stays open and listening here: connections the kernel
  hands it meanwhile wait in its backlog and are answered by the replacement (closing it
  instead would reset them);
* creates the run directory (`$TMPDIR/kafkafast-<pid>-*/`) with one listening Unix socket
  per worker for forwarding (`worker-<i>.sock`) and `table.lock`;
* creates the shared-memory partition table (`shm.PartitionTable`, anonymous MAP_SHARED)
  and one non-blocking wake-up pipe per worker;
* decides whether the last shutdown was clean (`.kafka_cleanshutdown` in every log dir)
  and removes the markers, so a crash from now on is detected. Recovery itself is done by
  the owners, in parallel: each worker opens (and, after an unclean stop, scans) only the
  partitions it owns, and so does the replacement of a worker that was killed;
* imports everything a worker needs, so a fork starts serving quickly.

Then it forks N workers (`worker.run_worker`; the event loop is created in the child)
and waits for signals. A worker that dies is forked again at once with the same index
(so the same partitions and sockets) and `clean=False`; one that keeps dying (more than
CRASH_LOOP_LIMIT times in CRASH_LOOP_WINDOW) is forked again after a growing delay while
the others keep serving; the supervisor gives up only when every worker keeps dying.
A worker whose first start is refused (`EXIT_CANNOT_START`: a ConfigError such as no
ZooKeeper session) is not replaced: the supervisor stops the others and raises that
ConfigError, which `kafkafast broker` prints as its one `cannot start` line.
SIGTERM/SIGINT: forwarded to every worker; each stops accepting, finishes what is in
flight, flushes and checkpoints; when all exited 0 within `SHUTDOWN_TIMEOUT` the
supervisor writes the clean-shutdown markers and exits 0 (a worker still running then is
killed, no marker, exit 1). A worker that stopped but could not write all its state (a
full disk) exits `EXIT_STATE_UNWRITTEN`: the supervisor still exits 0 but writes no
marker, so the next start recovers (a scan that needs no free space); so does a stop
while a crash-looping worker waits for its delayed restart.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any, Callable

from kafkafast.broker.broker import Broker
from kafkafast.broker.control import LocalControl
from kafkafast.broker.registry import load_handlers
from kafkafast.config import BrokerConfig, ConfigError
from kafkafast.metrics import recorder as request_metrics
from kafkafast.runtime import shm
from kafkafast.runtime.shared_counters import SharedCounters
from kafkafast.runtime.placement import WorkerPlacement
from kafkafast.runtime.worker import (CANNOT_START_FILE, EXIT_CANNOT_START, EXIT_STATE_UNWRITTEN,
                                      run_worker)
from kafkafast.runtime.listening import bind_listeners
from kafkafast.storage.checkpoint import fsync_dir, write_atomically
from kafkafast.storage.log_manager import CLEAN_SHUTDOWN_FILE, DELETE_DIR_SUFFIX, clean_start

log = logging.getLogger("kafkafast.supervisor")

SHUTDOWN_TIMEOUT = 8.5
DEFAULT_SLOTS = 16384
CRASH_LOOP_LIMIT = 10  # deaths of one worker within CRASH_LOOP_WINDOW seconds before its restarts back off
CRASH_LOOP_WINDOW = 30.0
RESPAWN_BACKOFF_MAX = 30.0


class Supervisor:
    def __init__(self, config: BrokerConfig, workers: int, control: Callable[[Broker], Any] = LocalControl,
                 placement_class: type[WorkerPlacement] = WorkerPlacement) -> None:
        self.config = config
        self.control = control  # each worker's broker's control plane (the command line's choice)
        self.placement_class = placement_class  # and its placement in the worker (the command line's too)
        self.n = workers
        self.pids: dict[int, int] = {}  # pid -> worker index
        self.incarnation = [0] * workers
        self.deaths: list[list[float]] = [[] for _ in range(workers)]  # per worker, within the window
        self.respawn_at: dict[int, float] = {}  # worker index -> monotonic time of a delayed respawn
        self.listen_socks: list[list[socket.socket]] = []  # [worker][listener]
        self.listener_specs: list = []
        self.listener_locks: list[socket.socket] = []
        self.internal_socks: list[socket.socket] = []
        self.pipes: list[tuple[int, int]] = []
        self.run_dir = ""
        self.table: shm.PartitionTable | None = None
        self.counters: SharedCounters | None = None
        self.clean_start = False
        self.port = 0

    def _controlled_shutdown_budget(self) -> float:
        """Cluster mode: the workers first wait for the controlled shutdown (leaderships moved)."""
        return self.control.shutdown_budget_s(self.config)

    # -- set-up -------------------------------------------------------------------------
    def prepare(self) -> None:
        # one SO_REUSEPORT socket per listener for each worker, bound but not listening
        self.listener_specs, self.listen_socks, self.listener_locks = bind_listeners(self.config, self.n,
                                                                                     reuse_port=True)
        self.port = self.listener_specs[0].port
        self.run_dir = tempfile.mkdtemp(prefix=f"kafkafast-{os.getpid()}-")
        for i in range(self.n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(os.path.join(self.run_dir, f"worker-{i}.sock"))
            s.listen(1024)
            s.setblocking(False)
            self.internal_socks.append(s)
        slots = int(self.config.get("kafkafast.shm.partition.slots") or DEFAULT_SLOTS)
        self.table = shm.PartitionTable.create(self.n, slots, self.run_dir)
        self.counters = SharedCounters.for_config(self.config, self.n, self.run_dir)  # limits, quotas
        for _ in range(self.n):
            r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self.pipes.append((r, w))
        self.clean_start = self._take_clean_markers()
        if self.control.cluster_id_in_log_dir:  # not when the cluster id is ZooKeeper's
            self._ensure_cluster_id()
        # Everything a worker imports, imported once here: forks start serving at once (the
        # control plane, cluster mode's too, came imported from the command line).
        load_handlers()
        try:
            import uvloop  # noqa: F401  (optional: the workers run on it; loaded before the fork)
        except ImportError:  # pragma: no cover
            pass

    def _ensure_cluster_id(self) -> None:
        """meta.properties (cluster id) is written once here, not raced by N workers."""
        Broker._load_cluster_id(SimpleNamespace(log_dirs=self.config.log_dirs, config=self.config,  # type: ignore[arg-type]
                                                node_id=self.config.node_id))

    def _take_clean_markers(self) -> bool:
        clean = True
        for d in self.config.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
                for name in os.listdir(d):
                    if name.endswith(DELETE_DIR_SUFFIX):
                        shutil.rmtree(os.path.join(d, name), ignore_errors=True)
                clean &= clean_start(d)  # the marker, or a new dir: what a one-process broker decides
                marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
                if os.path.exists(marker):
                    os.unlink(marker)
                    fsync_dir(d)
            except OSError as exc:  # the workers take this dir offline; the others serve
                log.error("log dir %s failed: %s", d, exc)
                clean = False
        return clean

    # -- workers ------------------------------------------------------------------------
    def spawn(self, i: int, clean: bool) -> None:
        self.incarnation[i] += 1
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                for j, s in enumerate(self.internal_socks):
                    if j != i:
                        s.close()
                for j, socks in enumerate(self.listen_socks):
                    if j != i:
                        for s in socks:
                            s.close()
                for j, (r, _) in enumerate(self.pipes):
                    if j != i:
                        os.close(r)
                request_metrics.in_worker(i)
                code = run_worker(self.config, self.control, self.placement_class, index=i,
                                  incarnation=self.incarnation[i], table=self.table,
                                  listen_socks=self.listen_socks[i], listener_specs=self.listener_specs,
                                  internal_sock=self.internal_socks[i],
                                  wake_r=self.pipes[i][0], wake_fds=[w for _, w in self.pipes],
                                  run_dir=self.run_dir, clean=clean, counters=self.counters)
            except BaseException:
                log.exception("worker %d crashed", i)
            finally:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pids[pid] = i
        request_metrics.spawned(pid, i)
        log.info("worker %d started: pid %d (incarnation %d)", i, pid, self.incarnation[i])

    def reap(self) -> list[tuple[int, int]]:
        """(worker index, exit status) of every child that ended."""
        out = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            i = self.pids.pop(pid, None)
            if i is not None:
                out.append((i, status))
        return out

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> int:
        sigs = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        self.prepare()
        log.info("kafkafast supervisor %d: %d workers on %s:%d, data in %s, %s, run dir %s", os.getpid(),
                 self.n, self.config.listeners()[0].host, self.port, ",".join(self.config.log_dirs),
                 "clean start" if self.clean_start else "unclean start (the workers recover their partitions)",
                 self.run_dir)
        try:
            for i in range(self.n):
                self.spawn(i, self.clean_start)
            while True:
                wait = min([1.0] + [max(t - time.monotonic(), 0.0) for t in self.respawn_at.values()])
                info = signal.sigtimedwait(sigs, wait)
                if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
                    return self.shutdown()
                for i, status in self.reap():
                    code = os.waitstatus_to_exitcode(status)
                    self.table.clear_worker_waiters(i)  # type: ignore[union-attr]
                    self.counters.clear_worker(i)  # type: ignore[union-attr]
                    if code == EXIT_CANNOT_START:  # its first start refused: so would every other's
                        self.shutdown()
                        with open(os.path.join(self.run_dir, CANNOT_START_FILE), encoding="utf-8") as fh:
                            raise ConfigError(fh.read())
                    if not self.schedule_replacement(i, code):
                        self.shutdown()
                        return 1
                now = time.monotonic()
                for i in [i for i, t in self.respawn_at.items() if t <= now]:
                    del self.respawn_at[i]
                    self.spawn(i, False)
        finally:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def schedule_replacement(self, i: int, code: int) -> bool:
        """Replace dead worker `i`: at once, or after a growing delay (up to
        RESPAWN_BACKOFF_MAX) when it died more than CRASH_LOOP_LIMIT times within
        CRASH_LOOP_WINDOW, so that one crash-looping worker (its partitions) does not take
        the others down. False (give up) only when every worker is crash-looping."""
        now = time.monotonic()
        deaths = self.deaths[i] = [t for t in self.deaths[i] if now - t < CRASH_LOOP_WINDOW] + [now]
        how = f"signal {-code}" if code < 0 else f"code {code}"
        excess = len(deaths) - CRASH_LOOP_LIMIT
        if excess <= 0:
            log.warning("worker %d exited (%s); starting a replacement", i, how)
            self.respawn_at[i] = now
            return True
        looping = sum(1 for d in self.deaths if len([t for t in d if now - t < CRASH_LOOP_WINDOW]) > CRASH_LOOP_LIMIT)
        if looping == self.n:
            log.error("every worker keeps dying (%d times in %.0fs); giving up", len(deaths), CRASH_LOOP_WINDOW)
            return False
        delay = min(0.5 * 2 ** excess, RESPAWN_BACKOFF_MAX)
        log.error("worker %d keeps dying (%s, %d times in %.0fs); next start in %.1fs, the other workers keep "
                  "serving", i, how, len(deaths), CRASH_LOOP_WINDOW, delay)
        self.respawn_at[i] = now + delay
        return True

    def shutdown(self) -> int:
        log.info("shutting down %d workers", len(self.pids))
        self.table.set_shutting_down()  # type: ignore[union-attr]
        for pid in list(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT + self._controlled_shutdown_budget()
        ok = True
        # every worker wrote all its state (none is dead awaiting a delayed respawn, with
        # its partitions unrecovered): the logs need no recovery scan
        complete = not self.respawn_at
        while self.pids and time.monotonic() < deadline:
            for i, status in self.reap():
                code = os.waitstatus_to_exitcode(status)
                if code == EXIT_STATE_UNWRITTEN:
                    complete = False
                    log.warning("worker %d stopped without writing all its state (disk full?); "
                                "the next start recovers its partitions", i)
                elif code != 0:
                    ok = False
                    if code != EXIT_CANNOT_START:  # that one is reported by the caller
                        log.warning("worker %d exited with %s during shutdown", i, code)
            if self.pids:
                signal.sigtimedwait({signal.SIGCHLD}, 0.05)
        if self.pids:
            ok = False
            for pid, i in list(self.pids.items()):
                log.error("worker %d (pid %d) did not stop in time; killing it", i, pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            while self.pids:
                self.reap()
                time.sleep(0.01)
        if not ok:
            return 1
        if complete:
            for d in self.config.log_dirs:
                try:
                    write_atomically(os.path.join(d, CLEAN_SHUTDOWN_FILE), "")
                except OSError as exc:
                    log.warning("%s: cannot write %s (%s); the next start recovers it", d, CLEAN_SHUTDOWN_FILE, exc)
        log.info("clean shutdown%s", "" if complete else " (without the clean-shutdown markers)")
        return 0


def run_supervisor(config: BrokerConfig, workers: int, control: Callable[[Broker], Any] = LocalControl,
                   placement_class: type[WorkerPlacement] = WorkerPlacement) -> int:
    return Supervisor(config, workers, control, placement_class).run()
