"""Connection limits of one broker process, with Kafka's settings.

* `max.connections` (all listeners) and `max.connections.per.ip`, with
  `max.connections.per.ip.overrides` (`host:count,host:count`): a connection over a limit
  is closed as soon as it is accepted. In a multi-worker broker each worker counts its own
  connections (the kernel spreads them evenly over the workers' SO_REUSEPORT sockets), so
  the limits there hold per worker.
* `connections.max.idle.ms` (Kafka's default 10 minutes): a connection that neither sent
  nor received a byte for that long, and has no request in progress, is closed by a sweep
  that runs every tenth of the timeout (at most every 5 s, at least every 50 ms).
* `queued.max.requests` / `queued.max.request.bytes` are applied by the connections
  themselves (`KafkaConnection.queue_limits`).
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

log = logging.getLogger("kafkafast.limits")
INT_MAX = 2147483647


def parse_overrides(text: str | None) -> dict[str, int]:
    out = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: bad entry {item!r} (expected host:count)")
        out[host.strip()] = int(count)
    return out


class ConnectionLimits:
    def __init__(self, config: Any) -> None:
        get = config.get
        self.max_connections = int(get("max.connections") or INT_MAX)
        self.per_ip = int(get("max.connections.per.ip") or INT_MAX)
        self.overrides = parse_overrides(get("max.connections.per.ip.overrides"))
        self.idle_ms = int(get("connections.max.idle.ms") or 600000)
        self.by_ip: Counter = Counter()
        self.conns: set = set()
        self.refused = 0
        self.idle_closed = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task | None = None
        from kafkafast.runtime.connection import KafkaConnection

        KafkaConnection.queue_limits = (int(get("queued.max.requests") or 500),
                                        int(get("queued.max.request.bytes") or -1))

    def now(self) -> float:
        return self._loop.time()  # type: ignore[union-attr]

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.idle_ms > 0:
            self._sweeper = self._loop.create_task(self._sweep())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    def admit(self, conn: Any) -> bool:
        ip = conn.peer[0] if isinstance(conn.peer, tuple) and conn.peer else ""
        cap = self.overrides.get(ip, self.per_ip)
        if len(self.conns) >= self.max_connections or self.by_ip[ip] >= cap:
            self.refused += 1
            log.info("refusing a connection from %s: %d from this address, %d in all (max.connections%s)", ip,
                     self.by_ip[ip], len(self.conns), ".per.ip" if self.by_ip[ip] >= cap else "")
            return False
        self.by_ip[ip] += 1
        self.conns.add(conn)
        conn._limit_ip = ip
        return True

    def release(self, conn: Any) -> None:
        if conn in self.conns:
            self.conns.discard(conn)
            ip = conn._limit_ip
            self.by_ip[ip] -= 1
            if self.by_ip[ip] <= 0:
                del self.by_ip[ip]

    async def _sweep(self) -> None:
        timeout = self.idle_ms / 1000.0
        interval = min(max(timeout / 10, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            cutoff = self.now() - timeout
            for conn in [c for c in self.conns if c.last_active < cutoff and not c.busy and not c.queue]:
                self.idle_closed += 1
                conn.abort()
