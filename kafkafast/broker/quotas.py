"""Client quotas enforced by throttling, as Kafka's ClientQuotaManager does.

Three quotas, set with AlterClientQuotas (`dynamic_configs.py`): `producer_byte_rate`
(bytes/s of Produce requests), `consumer_byte_rate` (bytes/s of the responses to consumers'
Fetch requests and to ShareFetch requests, which Kafka's fetch quota manager counts alike)
and `request_percentage` (handler time of any request, ShareAcknowledge's too, in percent of
one thread: 100 = one second per second; the wait of a Fetch or ShareFetch for data is not
counted). The quota of a request is the most specific entry that sets the key,
in Kafka's order: user+client-id, user+default client-id, user, default user+client-id,
default user+default client-id, default user, client-id, default client-id. The user is
the authenticated principal's name (ANONYMOUS without authentication).

Each (quota key, entity) has a rate over `quota.window.num` (11) samples of
`quota.window.size.seconds` (1 s); the entity is the one whose quota applies, with the
request's own user / client-id where that quota is a default (so every client-id under a
default client-id quota has its own rate, as Kafka's quota metric tags make it). The rate
divides the bytes (or ms) in the samples by the time they span, at least one sample window
(so a new client may burst one window's worth, not ten as Kafka's windowing allows at
start). The samples are broker-wide: kept in the shared counters area
(`runtime/shared_counters.py`) that every worker process records into under its lock, so
connections of one client spread over several workers share one rate; only if that table
is full (entities that recorded within the last quota.window.num windows hold every place
an entity may take) is an entity measured per worker. A request that takes the rate above the
quota is answered at once, with throttle_time_ms = (rate - quota) / quota * window, and the
connection then reads no further request for that long (the channel is muted, KIP-219);
the throttle is at most the whole window. With `--workers N` a ShareFetch forwarded to the
group's worker is counted by the worker holding the client's connection (its response bytes;
the owner sees an internal request, so forwarded requests count for no handler time). No
quota configured: nothing is measured.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from kafkafast.security.context import identity

PRODUCE, FETCH, SHARE_FETCH = 0, 1, 78
LOCAL_SENSORS = 4096  # entities measured per worker at most (when the shared table is full)
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE = "producer_byte_rate", "consumer_byte_rate", \
    "request_percentage"


# Seconds the current request spent parked (a Fetch waiting for data): not handler time.
_PARKED: ContextVar[list[float] | None] = ContextVar("kafkafast_parked", default=None)


@contextmanager
def parked() -> Iterator[None]:
    """Marks a wait (a long-poll Fetch) that request_percentage must not count."""
    started = time.monotonic()
    try:
        yield
    finally:
        acc = _PARKED.get()
        if acc is not None:
            acc[0] += time.monotonic() - started


@contextmanager
def measured_handler_time(out: list[float]) -> Iterator[None]:
    """out[0] = the handler's time in ms, without the time it was `parked`."""
    acc = [0.0]
    token = _PARKED.set(acc)
    started = time.monotonic()
    try:
        yield
    finally:
        _PARKED.reset(token)
        out[0] = max(time.monotonic() - started - acc[0], 0.0) * 1000.0


class Rate:
    """A windowed rate: `samples` buckets of `window` seconds."""

    __slots__ = ("window", "samples", "buckets")

    def __init__(self, samples: int, window: float) -> None:
        self.window = window
        self.samples = samples
        self.buckets: list[list[float]] = []  # [start, total]

    def record(self, value: float, now: float) -> tuple[float, float]:
        """Adds `value`; returns the total of the live samples and the span they cover
        (as `SharedCounters.record_rate`)."""
        if not self.buckets or now - self.buckets[-1][0] >= self.window:
            self.buckets.append([now, 0.0])
        self.buckets[-1][1] += value
        horizon = now - self.samples * self.window
        while self.buckets and self.buckets[0][0] <= horizon:
            self.buckets.pop(0)
        return sum(b[1] for b in self.buckets), self.span(now)

    def span(self, now: float) -> float:
        return max(now - self.buckets[0][0], self.window) if self.buckets else self.window


def _user(ctx: Any) -> str:
    who = identity(ctx)
    if who is None:
        return "ANONYMOUS"
    principal = who[0]
    return principal.split(":", 1)[1] if principal.startswith("User:") else principal


class QuotaManager:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.samples = int(broker.config.props.get("quota.window.num") or 11)
        self.window = float(broker.config.props.get("quota.window.size.seconds") or 1)
        self._stamp: object = ()
        self._quotas: dict = {}
        self._rates: dict[tuple, Rate] = {}  # entities measured in this worker (shared table full)

    def _current(self) -> dict:
        dynamic = self.broker.dynamic
        stamp = dynamic.quota_stamp()
        if stamp != self._stamp:
            self._quotas = {tuple(sorted(e)): v for e, v in dynamic.quotas().items()}
            self._stamp = stamp
        return self._quotas

    def active(self) -> bool:
        """Whether any client quota is configured (else nothing is measured)."""
        return bool(self._current())

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[tuple, float] | None:
        quotas = self._current()
        if not quotas:
            return None
        for entity in ((("client-id", client_id), ("user", user)), (("client-id", None), ("user", user)),
                       (("user", user),), (("client-id", client_id), ("user", None)),
                       (("client-id", None), ("user", None)), (("user", None),),
                       (("client-id", client_id),), (("client-id", None),)):
            values = quotas.get(entity)
            if values is not None and key in values:
                return entity, float(values[key])
        return None

    def record(self, key: str, ctx: Any, value: float) -> int:
        """Records `value` against the request's quota for `key`; the throttle time in ms."""
        if not self._current():
            return 0
        found = self.quota_for(key, _user(ctx), ctx.client_id or "")
        if found is None:
            return 0
        entity, quota = found
        if key == REQUEST_PERCENTAGE:
            quota = quota * 10.0  # percent of a thread -> ms of handler time per second
        user, client_id = _user(ctx), ctx.client_id or ""
        sensor = (key, tuple((kind, name if name is not None else (user if kind == "user" else client_id))
                             for kind, name in entity))
        total, span = self._measure(sensor, value)
        observed = total / span
        if observed <= quota:
            return 0
        throttle = (observed - quota) / quota * span
        return int(min(throttle, self.samples * self.window) * 1000)

    def _measure(self, sensor: tuple, value: float) -> tuple[float, float]:
        """Records into the broker-wide samples of `sensor`: (total, span in seconds)."""
        now = time.monotonic()
        counters = getattr(self.broker, "counters", None)
        if counters is not None and sensor not in self._rates:
            got = counters.record_rate(sensor, value, int(now * 1000), int(self.window * 1000))
            if got is not None:
                return got
        rate = self._rates.get(sensor)
        if rate is None:
            if len(self._rates) >= LOCAL_SENSORS:  # bounded: the least recently created goes
                del self._rates[next(iter(self._rates))]
            rate = self._rates[sensor] = Rate(self.samples, self.window)
        return rate.record(value, now)

    def throttle_request(self, api_key: int, ctx: Any, request_bytes: int, response_bytes: int,
                         handler_ms: float) -> int:
        """The throttle time of one request (the largest of its quotas' throttles)."""
        if ctx.internal or not self._current():
            return 0
        throttle = self.record(REQUEST_PERCENTAGE, ctx, handler_ms)
        if api_key == PRODUCE:
            throttle = max(throttle, self.record(PRODUCER_BYTE_RATE, ctx, request_bytes))
        elif api_key in (FETCH, SHARE_FETCH) and response_bytes:
            throttle = max(throttle, self.record(CONSUMER_BYTE_RATE, ctx, response_bytes))
        return throttle
