"""The placement of a broker over N pre-forked worker processes (see broker/placement.py).

`shm.owner_for(topic, partition, N)` names the one worker that holds a partition's `Log`
writer; the supervisor never changes it, so a replacement worker (a higher incarnation) takes
over exactly its predecessor's partitions. Each partition has a slot in the shared-memory
table (`shm.PartitionTable`) where its owner publishes its state; a worker wakes the requests
parked in another one by a byte on that worker's wake-up pipe; requests travel between
workers over the internal Unix sockets (`forwarding.Forwarder`)."""
from __future__ import annotations

import os

from kafkafast.runtime import shm
from kafkafast.runtime.forwarding import Forwarder


class WorkerPlacement:
    """This worker among the broker's N (the `Placement` interface, and the means to reach
    the others)."""

    def __init__(self, *, index: int, incarnation: int, table: shm.PartitionTable, wake_fds: list[int],
                 run_dir: str) -> None:
        self.index = index
        self.incarnation = incarnation
        self.table = table
        self.workers = table.workers
        self.wake_fds = wake_fds  # write ends, one per worker
        self.forwarder = Forwarder(run_dir, index)
        self.wakeups_sent = 0

    def owner_of(self, topic: str, partition: int) -> int:
        return shm.owner_for(topic, partition, self.workers)

    def owns_key(self, topic: str, partition: int) -> bool:
        return self.owner_of(topic, partition) == self.index

    def poke(self, worker: int) -> None:
        """A byte on the worker's wake-up pipe: it re-checks what its parked requests wait for."""
        self.wakeups_sent += 1
        try:
            os.write(self.wake_fds[worker], b"\x01")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def wake_others_parked_on(self, slot: int) -> None:
        """Pokes every other worker with requests parked on the slot's partition (its waiter byte)."""
        waiters = self.table.waiters(slot)
        if not waiters.count(0) == len(waiters):
            for w, flag in enumerate(waiters):
                if flag and w != self.index:
                    self.poke(w)
