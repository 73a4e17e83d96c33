"""Inter-worker forwarding over Unix sockets, speaking the Kafka protocol.

Every worker i serves `<run dir>/worker-<i>.sock` (the listening socket is created by the
supervisor before the fork and kept open there, so a request sent while worker i is being
replaced waits in the backlog for its replacement). Requests arriving there are handled
with `internal=True`: never forwarded again.

* Produce for partitions this worker does not own: one Produce v8 request per owner and
  client request (the partitions of one request queued in the same loop pass travel
  together), sent as small headers interleaved with the client's record bytes straight
  from the frame they arrived in (`transport.write` of the memoryview: no user-space copy on
  this side when the socket accepts it; the owner assigns offsets in place in the frame it
  reads, as for any produce). acks=0 is forwarded with acks=0 and answered at once.
* Group and offset requests: the whole client frame goes to the worker that owns the
  group's `__consumer_offsets` partition, with the correlation id swapped for an internal
  one and swapped back in the answer, which is returned byte for byte.
* DeleteRecords for a partition owned elsewhere: a DeleteRecords request to the owner.
* A client connection closing that had a share session opened through it (ShareFetch epoch 0
  forwarded to the group's worker): a ShareAcknowledge of epoch -1 under client id
  `kafkafast-share-connection-lost`, which ends the session there (runtime/placement.py).

An internal connection may hold requests that wait (JoinGroup parks until the rebalance
completes), so `InternalConnection` handles every request except Produce in its own task
and answers out of order; Produce is handled inline, in arrival order, which keeps the
append order of each partition. The requesting side matches answers by correlation id.

If the owner dies with requests in flight they fail with NOT_LEADER_OR_FOLLOWER (the
client refreshes metadata and retries; idempotent producers dedupe the retry).
"""
from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from kafkafast.protocol.errors import CloseConnection
from kafkafast.protocol import api
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.produce import ProduceResponse
from kafkafast.protocol.primitives import FileRegion
from kafkafast.runtime.connection import KafkaConnection
from kafkafast.security.context import FORWARDED_PRINCIPAL, read_trailer

log = logging.getLogger("kafkafast.forwarding")

PRODUCE_VERSION = 8  # the last non-flexible Produce: fixed-width header, easy to write by hand
CLIENT_ID = b"kafkafast-forward"
_PRODUCE_HEAD = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
PartResp = ProduceResponse.PartitionProduceResponse


def _resolve(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _part_error(partition: int, code: int, message: str | None) -> Any:
    return PartResp(index=partition, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message)


class ForwardError(Exception):
    """The owner could not be reached or went away with the request in flight."""


class InternalConnection(KafkaConnection):
    """The owner's side of a forwarding connection (see the module docstring)."""

    def __init__(self, broker: Any, max_request_bytes: int, *, tracker: set | None = None) -> None:
        super().__init__(broker, max_request_bytes, internal=True, tracker=tracker)
        self.inflight: set[asyncio.Task] = set()

    async def _process(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self.closing:
                if not self.queue:
                    self.wakeup.clear()  # type: ignore[union-attr]
                    await self.wakeup.wait()  # type: ignore[union-attr]
                    continue
                frame = self.queue.popleft()
                if self.paused and len(self.queue) < 16:
                    self.paused = False
                    self.transport.resume_reading()  # type: ignore[union-attr]
                if frame[0] == 0 and frame[1] == 0:  # Produce: inline, in order
                    await self._handle(frame)
                else:
                    task = loop.create_task(self._handle(frame))
                    self.inflight.add(task)
                    task.add_done_callback(self.inflight.discard)
        except (asyncio.CancelledError, ConnectionError):
            pass

    @property  # type: ignore[override]
    def busy(self) -> bool:
        return bool(self.inflight) or self._inline

    @busy.setter
    def busy(self, value: bool) -> None:
        self._inline = value

    async def _send(self, parts: list) -> None:
        # Answers are small (no fetches are forwarded) and written whole, so concurrent
        # handler tasks never interleave inside a frame; the requester bounds what is queued.
        t = self.transport
        for part in parts:
            t.write(part.read() if isinstance(part, FileRegion) else part)  # type: ignore[union-attr]

    async def _handle(self, frame: bytearray) -> None:
        self._inline = True
        FORWARDED_PRINCIPAL.set(read_trailer(frame))  # the client's principal, for the authorizer
        try:
            parts = await self.broker.handle_frame(frame, self, internal=True)
        except CloseConnection as exc:
            log.info("closing internal connection: %s", exc)
            self.abort()
            return
        except Exception:
            log.exception("forwarded request failed; closing the internal connection")
            self.abort()
            return
        finally:
            self._inline = False
        if parts is not None and not self.closing:
            await self._send(parts)


class OwnerLink(asyncio.Protocol):
    """This worker's connection to one owner worker; answers matched by correlation id."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self.buf = bytearray()
        self.closed = False
        self._paused = False
        self._drain: list[asyncio.Future] = []  # every sender waiting for the buffer to drain

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        start, n = 0, len(buf)
        while n - start >= 4:
            size = int.from_bytes(buf[start:start + 4], "big")
            end = start + 4 + size
            if end > n:
                break
            corr = int.from_bytes(buf[start + 4:start + 8], "big", signed=True)
            fut = self.pending.pop(corr, None)
            if fut is not None and not fut.done():
                fut.set_result(bytes(buf[start + 4:end]))
            start = end
        if start:
            del buf[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ForwardError(f"owner connection {self.path} lost"))
        self._wake_senders()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_senders()

    def _wake_senders(self) -> None:
        waiters, self._drain = self._drain, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def send(self, parts: list, corr: int | None) -> asyncio.Future | None:
        """Writes the frame parts; returns the future of the answer (None: no answer expected)."""
        if self.closed:
            raise ForwardError("owner connection closed")
        fut = None
        if corr is not None:
            fut = asyncio.get_running_loop().create_future()
            self.pending[corr] = fut
        t = self.transport
        for p in parts:
            t.write(p)  # type: ignore[union-attr]
        if self._paused and not self.closed:
            waiter = asyncio.get_running_loop().create_future()
            self._drain.append(waiter)
            await waiter
        return fut


class Forwarder:
    """Links from this worker to the others (opened on first use, reopened after a loss)."""

    def __init__(self, run_dir: str, worker: int) -> None:
        self.run_dir = run_dir
        self.worker = worker
        self.links: dict[int, OwnerLink] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._corr = 0
        self._produce_batches: dict[tuple[int, int, int], list] = {}
        self.forwarded_partitions = 0
        self.forwarded_produce = 0
        self.forwarded_frames = 0

    def path(self, worker: int) -> str:
        return f"{self.run_dir}/worker-{worker}.sock"

    def next_corr(self) -> int:
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        return self._corr

    async def link(self, worker: int) -> OwnerLink:
        ln = self.links.get(worker)
        if ln is not None and not ln.closed:
            return ln
        pending = self._connecting.get(worker)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._connecting[worker] = fut
        try:
            last: Exception | None = None
            for attempt in range(50):  # the socket is the supervisor's: it exists unless we are shutting down
                try:
                    _, ln = await loop.create_unix_connection(lambda: OwnerLink(self.path(worker)), self.path(worker))
                    break
                except OSError as exc:
                    last = exc
                    await asyncio.sleep(0.02 * (attempt + 1))
            else:
                raise ForwardError(f"cannot reach worker {worker}: {last}")
            self.links[worker] = ln  # type: ignore[assignment]
            fut.set_result(ln)
            return ln  # type: ignore[return-value]
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc if isinstance(exc, Exception) else ForwardError(str(exc)))
                fut.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._connecting.pop(worker, None)

    def produce(self, owner: int, topic: str, partition: int, records: Any, acks: int,
                timeout_ms: int) -> asyncio.Future:
        """Queues one partition's records for the owner; resolves to its
        PartitionProduceResponse. Partitions queued for the same owner during one pass of
        the event loop (one client request touching several partitions) go out together
        as one Produce request."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        key = (owner, acks, timeout_ms)
        batch = self._produce_batches.get(key)
        if batch is None:
            batch = self._produce_batches[key] = []
            loop.call_soon(self._send_produce_batch, key)
        batch.append((topic, partition, records, fut))
        return fut

    def _send_produce_batch(self, key: tuple[int, int, int]) -> None:
        batch = self._produce_batches.pop(key)
        asyncio.get_running_loop().create_task(self._produce_batch(key, batch))

    async def _produce_batch(self, key: tuple[int, int, int], batch: list) -> None:
        owner, acks, timeout_ms = key
        self.forwarded_produce += 1
        self.forwarded_partitions += len(batch)
        try:
            ln = await self.link(owner)
            corr = self.next_corr()
            by_topic: dict[str, list] = {}
            for item in batch:
                by_topic.setdefault(item[0], []).append(item)
            parts: list = []
            body = bytearray(struct.pack(">hhii", -1, acks, timeout_ms, len(by_topic)))
            for topic, items in by_topic.items():
                name = topic.encode()
                body += struct.pack(">h", len(name)) + name + struct.pack(">i", len(items))
                for _, partition, records, _ in items:
                    body += struct.pack(">ii", partition, len(records))
                    parts.append(body)
                    parts.append(records)  # the client's bytes, straight from its frame
                    body = bytearray()
            size = _PRODUCE_HEAD.size - 4 + len(CLIENT_ID) + sum(len(p) for p in parts)
            head = bytearray(_PRODUCE_HEAD.pack(size, 0, PRODUCE_VERSION, corr, len(CLIENT_ID)))
            head += CLIENT_ID
            head += parts[0]
            parts[0] = head
            fut = await ln.send(parts, corr if acks != 0 else None)
            if fut is None:
                for _, partition, _, f in batch:
                    _resolve(f, PartResp(index=partition, error_code=0, base_offset=-1, log_append_time_ms=-1,
                                         log_start_offset=-1, record_errors=[], error_message=None))
                return
            answer = await asyncio.wait_for(fut, max(timeout_ms, 1000) / 1000.0 + 5.0)
            _, resp = api.decode_response(0, PRODUCE_VERSION, answer)
            # Answers come in request order (a partition may be in the batch twice, from
            # two client requests): match by position, not by name.
            answers = [p for t in resp.responses for p in t.partition_responses]
            sent = [item for items in by_topic.values() for item in items]
            for i, (_, partition, _, f) in enumerate(sent):
                _resolve(f, answers[i] if i < len(answers) and answers[i].index == partition
                         else _part_error(partition, E.ErrorCode.UNKNOWN_SERVER_ERROR, "owner answered out of order"))
        except (ForwardError, OSError, asyncio.TimeoutError) as exc:
            log.warning("forwarding produce to worker %d failed: %s", owner, exc)
            code = E.ErrorCode.REQUEST_TIMED_OUT if isinstance(exc, asyncio.TimeoutError) else E.ErrorCode.NOT_LEADER_OR_FOLLOWER
            for _, partition, _, f in batch:
                _resolve(f, _part_error(partition, code, str(exc) or None))
        except BaseException as exc:
            for _, partition, _, f in batch:
                _resolve(f, _part_error(partition, E.ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc)))
            if not isinstance(exc, Exception):
                raise

    async def frame(self, owner: int, frame: bytearray, timeout_s: float = 60.0) -> list:
        """Forwards a whole client request frame; returns the owner's answer as response parts."""
        self.forwarded_frames += 1
        client_corr = bytes(frame[4:8])
        ln = await self.link(owner)
        corr = self.next_corr()
        frame[4:8] = corr.to_bytes(4, "big")
        fut = await ln.send([len(frame).to_bytes(4, "big"), frame], corr)
        answer = await asyncio.wait_for(fut, timeout_s)  # type: ignore[arg-type]
        out = bytearray(len(answer).to_bytes(4, "big"))
        out += client_corr
        out += memoryview(answer)[4:]
        return [out]

    async def request(self, owner: int, req: Any, version: int, timeout_s: float = 30.0,
                      trailer: bytes = b"", client_id: str = CLIENT_ID.decode()) -> Any:
        """Sends one request built with the generated codecs (with `trailer` after the body:
        the client's principal, see security/context.py); returns the decoded response."""
        ln = await self.link(owner)
        corr = self.next_corr()
        data = api.encode_request(req, version, corr, client_id)
        if trailer:
            data = (len(data) - 4 + len(trailer)).to_bytes(4, "big") + data[4:] + trailer
        fut = await ln.send([data], corr)
        answer = await asyncio.wait_for(fut, timeout_s)  # type: ignore[arg-type]
        return api.decode_response(req.API_KEY, version, answer)[1]

    def close(self) -> None:
        for ln in self.links.values():
            if ln.transport is not None:
                ln.transport.close()
        self.links.clear()
