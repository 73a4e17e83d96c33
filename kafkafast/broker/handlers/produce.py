"""Produce (key 0), versions 0-11 (v10-11: KIP-951's current_leader and node_endpoints
tagged fields, which only a NOT_LEADER_OR_FOLLOWER answer fills: the cluster path's).

v0-2 carry legacy message sets (magic 0 and 1, see kafkafast/records/legacy.py), which are
up-converted to v2 batches before anything else (`upconverted`, kafkafast/records/convert.py):
CORRUPT_MESSAGE for a bad message or CRC32, MESSAGE_TOO_LARGE when a wrapper decompresses past
message.max.decompressed.bytes. From then on they are appended as v3+ record sets are.

acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS for every partition). Each
partition's record set is validated and appended as opaque batches: offsets are assigned
in place in the request's own buffer and the bytes are written once. Errors per
partition: UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD,
UNSUPPORTED_COMPRESSION_TYPE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH,
UNKNOWN_PRODUCER_ID; a duplicate batch of an idempotent producer answers NONE with the
offset the original got, as Kafka does. Legacy message sets in v3+ requests are answered
with UNSUPPORTED_VERSION (v0-2 ones are up-converted). acks=0 sends no response. Transactional
batches (attribute bit 4) open the producer's transaction in the partition (the last stable
offset stays at its first offset until the coordinator's marker); control batches from a
client are refused with INVALID_RECORD, and so is a batch with a producer id but no base
sequence (-1), as in Kafka; a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, also where no coordinator runs).
v8 adds record_errors/error_message (filled for record-level failures).
Compressed batches are decompressed (streaming) and their records checked before the
append, as Kafka's LogValidator does: CORRUPT_MESSAGE when the payload does not decompress
or does not hold exactly recordsCount well-formed records; MESSAGE_TOO_LARGE when it
decompresses past message.max.decompressed.bytes. Nothing of a refused set is stored.

A compacted topic (cleanup.policy contains compact) takes only records with a key, as
Kafka's log validator enforces: a record set holding a keyless record is refused whole
with INVALID_RECORD, each keyless record listed in record_errors (its index within its
batch and why), so clients fail exactly those records. For this the batches of a
compacted topic are validated as the append validates them, then decoded (decompressed
when compressed); other topics' batches stay opaque.

Record timestamps, as Kafka's log validator treats them in a CreateTime topic: a record
whose timestamp (-1, no timestamp, aside) lies more than message.timestamp.before.max.ms
before the broker's clock or .after.max.ms after it (each falling back to the deprecated
message.timestamp.difference.max.ms while unset; Long.MAX_VALUE by default) refuses the set
with INVALID_TIMESTAMP and a record error for each such record (a keyless record's error in
a compacted topic first). The record walk gives each batch's smallest and largest record
timestamp, so a batch is decoded only when one may be out of bounds. A batch whose header
disagrees with its records (maxTimestamp not their largest, as some clients leave it at -1,
or the LogAppendTime bit set by the producer) is rewritten in place before the append:
maxTimestamp the records' largest, CreateTime, the CRC32C computed again (only over a CRC
that held), so the time index and ListOffsets by timestamp see the records' times.

A topic whose compression.type (or the broker's) names a codec stores its batches with it:
a batch compressed otherwise is rebuilt before the append with the same records, producer
fields and flags, as Kafka's LogValidator does (`records.batch.recompressed`); "producer"
(the default) keeps the producer's bytes. A rebuilt batch larger than max.message.bytes is
MESSAGE_TOO_LARGE.
"""
import asyncio
import logging
import time

from kafkafast.broker.registry import handles
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol._generated.produce import ProduceRequest, ProduceResponse
from kafkafast.protocol import errors as E
from kafkafast.protocol.api import encode_response
from kafkafast.protocol.later import LaterAnswer
from kafkafast.protocol.errors import CloseConnection
from kafkafast.records import validate_compressed_records
from kafkafast.records.batch import (TOPIC_CODECS, decode_batch, recompressed, set_create_time_max_timestamps,
                                     validate_batches)
from kafkafast.records.model import NO_TIMESTAMP
from kafkafast.storage.config import LONG_MAX
from kafkafast.records.convert import upconvert
from kafkafast.security import acl
from kafkafast.security.context import denied

PartResp = ProduceResponse.PartitionProduceResponse
TopicResp = ProduceResponse.TopicProduceResponse
RecordError = ProduceResponse.BatchIndexAndErrorMessage
log = logging.getLogger("kafkafast.produce")
SHOWN_RECORD_ERRORS = 3  # how many record errors error_message repeats, as Kafka does


def _error(index, code, message=None):
    return PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message)


def _record_errors(topic: str, index: int, records, found: list, cfg, now_ms: int) -> tuple[int, list]:
    """Kafka's per-record checks, batch by batch, stopping at the first batch with errors (as
    its LogValidator does): a record without a key in a compacted topic is refused (that
    error first), and in a CreateTime topic a record whose timestamp (NO_TIMESTAMP aside) is
    more than message.timestamp.before.max.ms before now or .after.max.ms after it (each
    falling back to message.timestamp.difference.max.ms while it is unset). `found` is what
    `validate_compressed_records` found: a batch is decoded only when it may hold such a
    record. Returns (INVALID_TIMESTAMP if any error is a timestamp's, else INVALID_RECORD;
    the errors), or (0, [])."""
    before = cfg.message_timestamp_before_max_ms
    if before == LONG_MAX:
        before = cfg.message_timestamp_difference_max_ms
    after = cfg.message_timestamp_after_max_ms
    if after == LONG_MAX:
        after = cfg.message_timestamp_difference_max_ms
    create_time = not cfg.log_append_time
    validated = False
    for pos, header, lowest, highest in found:
        times = create_time and (now_ms - lowest > before or highest - now_ms > after)
        if not (cfg.compact or times):
            continue
        if not validated:  # a bad batch's error (its CRC, its header) comes first, as in Kafka
            validate_batches(records, cfg.max_message_bytes)
            validated = True
        _header, recs = decode_batch(records, pos, check_crc=False)
        errors = []
        code = E.ErrorCode.INVALID_RECORD
        for i, r in enumerate(recs):
            if cfg.compact and r.key is None:
                errors.append(RecordError(batch_index=i, batch_index_error_message=(
                    f"compacted topic partition {topic}-{index} does not accept a record without a key")))
            elif times and r.timestamp != NO_TIMESTAMP and (now_ms - r.timestamp > before
                                                            or r.timestamp - now_ms > after):
                errors.append(RecordError(batch_index=i, batch_index_error_message=(
                    f"timestamp {r.timestamp} of the record at offset {r.offset - header.base_offset} of the batch "
                    f"is out of range: it must be within [{now_ms - before}, {now_ms + after}]")))
                code = E.ErrorCode.INVALID_TIMESTAMP
        if errors:
            return code, errors
    return 0, []


def transactional_refused(broker, ctx, transactional_id: str) -> int:
    """A transactional produce needs WRITE on its transactional id, and a transaction
    coordinator: TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    if getattr(broker, "txn_coordinator", None) is None:
        return E.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return denied(broker, ctx, acl.WRITE, acl.TRANSACTIONAL_ID, transactional_id)


def upconverted(broker, part, pd, version: int):
    """Produce v0-2: `pd.records` as v2 batches (replaced in place). An error response when
    the legacy message set is refused, else None."""
    if version > 2 or pd.records is None or len(pd.records) == 0:
        return None
    try:
        pd.records = upconvert(pd.records, broker.config.max_decompressed_bytes(part.log.config.max_message_bytes))
    except E.KafkaError as exc:
        return _error(pd.index, exc.code, exc.message)
    return None


def checked_records(broker, part, topic: str, pd):
    """The record checks made before a leader's append, as Kafka's LogValidator: compressed
    batches validated as a stream; keyless records refused in compacted topics; record
    timestamps held to message.timestamp.before/after.max.ms in CreateTime topics, where each
    batch's maxTimestamp and timestamp type are then set from its records (a client that
    leaves maxTimestamp unset still gets a time index and ListOffsets by time). An error
    response, or None."""
    try:
        cfg = part.log.config
        max_batch = cfg.max_message_bytes
        found: list = []
        validate_compressed_records(pd.records, broker.config.max_decompressed_bytes(max_batch), max_batch, found)
        for pos, h, _, _ in found:
            if h.producer_id >= 0 and h.base_sequence < 0 and not h.is_control:
                return _error(pd.index, E.ErrorCode.INVALID_RECORD, f"batch at {pos}: producer id {h.producer_id} "
                                                                   f"with no base sequence ({h.base_sequence})")
        code, errors = _record_errors(topic, pd.index, pd.records, found, cfg, int(time.time() * 1000))
        if errors:
            return _invalid_records(pd.index, code, errors)
        if not cfg.log_append_time and any(h.max_timestamp != max(hi, NO_TIMESTAMP) or h.timestamp_type
                                           for _, h, _, hi in found):
            if isinstance(pd.records, bytes) or (isinstance(pd.records, memoryview) and pd.records.readonly):
                pd.records = bytearray(pd.records)
            set_create_time_max_timestamps(pd.records, found)
        codec = TOPIC_CODECS.get(cfg.compression_type)
        if codec is not None and any(h.compression != codec for _, h, _, _ in found):
            validate_batches(pd.records, max_batch)  # a bad batch's error first: nothing corrupt is rebuilt
            pd.records = recompressed(pd.records, found, codec)
    except E.KafkaError as exc:
        return _error(pd.index, exc.code, exc.message)
    return None


def _invalid_records(index: int, code: int, errors: list):
    shown = "; ".join(f"record {e.batch_index}: {e.batch_index_error_message}" for e in errors[:SHOWN_RECORD_ERRORS])
    what = "timestamp" if code == E.ErrorCode.INVALID_TIMESTAMP else "record"
    resp = _error(index, code, f"{len(errors)} record(s) rejected (invalid {what}), the first "
                               f"{min(len(errors), SHOWN_RECORD_ERRORS)}: {shown}")
    resp.record_errors = errors
    return resp


@handles(ProduceRequest, 0, 11)
async def handle(broker, ctx, req: ProduceRequest, version: int):
    acks = req.acks
    responses = []
    hinted: set[int] = set()  # leaders named in NOT_LEADER_OR_FOLLOWER answers (v10+)
    waits = []  # (topic response, index, partition, offset the high watermark must reach, its leading_since): acks=all
    forwarded = []  # (topic response, index, partition, the owner worker's answer)
    txn_refused = transactional_refused(broker, ctx, req.transactional_id) if req.transactional_id is not None else 0
    for topic in req.topic_data:
        tr = TopicResp(name=topic.name, partition_responses=[])
        responses.append(tr)
        out = tr.partition_responses
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                out.append(_error(pd.index, E.ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if txn_refused:
                out.append(_error(pd.index, txn_refused))
                continue
            if denied(broker, ctx, acl.WRITE, acl.TOPIC, topic.name):
                out.append(_error(pd.index, E.ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            part = broker.get_partition(topic.name, pd.index)
            if part is None or not part.is_leader:
                out.append(_not_here(broker, topic.name, pd.index, part, version, hinted))
                continue
            code = part.unavailable_error()
            if code:  # loading at its owner (not forwarded to wait there), or offline: this partition only
                out.append(_error(pd.index, code, f"{topic.name}-{pd.index} is "
                                  + ("loading" if part.loading else "offline")))
                continue
            if pd.records is None or len(pd.records) == 0:
                out.append(_error(pd.index, E.ErrorCode.INVALID_RECORD, "empty record set"))
                continue
            refused = upconverted(broker, part, pd, version)
            if refused is not None:
                out.append(refused)
                continue
            fenced = broker.replicas.leadership_fence(part)  # (a forwarded produce too: the owner checks again)
            if fenced is not None:
                out.append(_error(pd.index, E.ErrorCode.NOT_LEADER_OR_FOLLOWER, fenced))
                continue
            if acks == -1 and broker.replicas.isr_error(part):
                out.append(_error(pd.index, E.ErrorCode.NOT_ENOUGH_REPLICAS, _isr_message(broker, part)))
                continue
            if not ctx.internal and not broker.appends_here(part, req.transactional_id):
                # appended by the owner worker, which answers after its append: acks=all waits here
                out.append(None)
                forwarded.append((tr, len(out) - 1, part, broker.placement.forward_produce(
                    part, pd.records, 0 if acks == 0 else 1, req.timeout_ms)))
                continue
            refused = checked_records(broker, part, topic.name, pd)
            if refused is not None:
                out.append(refused)
                continue
            try:
                res = broker.append(part, pd.records)
            except E.UnsupportedForMessageFormatError as exc:  # v0/v1 message sets are not converted
                out.append(_error(pd.index, E.ErrorCode.UNSUPPORTED_VERSION, exc.message))
                continue
            except E.KafkaError as exc:
                out.append(_error(pd.index, exc.code, exc.message))
                continue
            except OSError as exc:
                out.append(_error(pd.index, E.ErrorCode.KAFKA_STORAGE_ERROR, str(exc)))
                continue
            out.append(PartResp(index=pd.index, error_code=0, base_offset=res.base_offset,
                                log_append_time_ms=res.log_append_time, log_start_offset=res.log_start_offset,
                                record_errors=[], error_message=None))
            if acks == -1:
                waits.append((tr, len(out) - 1, part, res.last_offset + 1, part.leading_since))
    for tr, i, part, answer in forwarded:  # a ready PartitionProduceResponse from the owner
        resp = tr.partition_responses[i] = await request_metrics.remote(answer)
        if acks == -1 and resp is not None and resp.error_code == 0:  # the log end now covers the batch
            waits.append((tr, i, part, part.log.state.log_end_offset, part.leading_since))
    if waits:
        if getattr(ctx.conn, "parking", False):  # answered by the high-watermark move itself
            return ParkedProduce(broker, ctx, _response(broker, ctx, responses, hinted), waits,
                                 max(req.timeout_ms, 0) / 1000.0)
        if ctx.conn is not None:  # appended: the connection may handle its next request meanwhile
            ctx.conn.appended()
        await _wait_for_replication(broker, waits, max(req.timeout_ms, 0) / 1000.0)
    if acks == 0:
        if ctx.listener_name is not None and any(r is not None and r.error_code for tr in responses
                                                    for r in tr.partition_responses):
            # Kafka closes the connection: an acks=0 producer learns of an error only that way,
            # and refreshes its metadata (a fenced or deposed leader's clients move on)
            raise CloseConnection("acks=0 produce refused: " + ", ".join(
                f"{tr.name}-{r.index} error {r.error_code}" for tr in responses for r in tr.partition_responses
                if r is not None and r.error_code))
        return None
    return _response(broker, ctx, responses, hinted)


def _response(broker, ctx, responses: list, hinted: set[int]) -> ProduceResponse:
    endpoints = [ProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
                 for i, h, p, r in broker.control.brokers_for(ctx) if i in hinted] if hinted else []
    return ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=endpoints)


def _not_here(broker, topic: str, index: int, part, version: int, hinted: set[int]):
    """The answer for a partition this broker does not lead: NOT_LEADER_OR_FOLLOWER when the
    cluster has it (v10+: with the leader it knows of, KIP-951), else UNKNOWN_TOPIC_OR_PARTITION."""
    if part is None and not broker.partition_exists(topic, index):
        return _error(index, E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    refused = _error(index, E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
    leader = broker.control.leader_of(topic, index) if version >= 10 else None
    if leader is not None:
        refused.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
        hinted.add(leader[0])
    return refused


def _isr_message(broker, part) -> str:
    return (f"{part.in_sync_count} in-sync replica(s) of {part.topic}-{part.index}, fewer than its "
            f"min.insync.replicas={part.log.config.min_insync_replicas}")


async def _wait_for_replication(broker, waits: list, timeout_s: float) -> None:
    """acks=all: each appended partition answers once its high watermark passes the batch (at
    once for a lone replica): REQUEST_TIMED_OUT after the request's timeout,
    NOT_LEADER_OR_FOLLOWER when leadership moved meanwhile, NOT_ENOUGH_REPLICAS_AFTER_APPEND
    when the ISR fell below min.insync.replicas."""
    if any(part.home.remote for _, _, part, _, _ in waits):  # kept by other workers: wait for all at once
        codes = await request_metrics.remote(asyncio.gather(*(part.wait_for_hw(offset, timeout_s)
                                                              for _, _, part, offset, _ in waits)))
    else:
        codes = await request_metrics.remote(_waited_in_turn(waits, timeout_s))
    _waited(broker, waits, codes)


def _waited(broker, waits: list, codes: list[int]) -> None:
    """The answers of the partitions waited for, by their wait's code (0: the high watermark
    passed their batch): an ISR fallen below min.insync.replicas meanwhile answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    for (tr, i, part, _, _), code in zip(waits, codes):
        if code == 0 and broker.replicas.isr_error(part):
            code = E.ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if code:
            tr.partition_responses[i] = _error(tr.partition_responses[i].index, code)


async def _waited_in_turn(waits: list, timeout_s: float) -> list[int]:
    """The waits of partitions kept here, one after the other within one deadline: a follower's
    Fetch reports every partition it fetched, so the high watermarks the first wait needed
    moved the others' too, which are then past at once (one parked future, one timer and one
    resumption per request; no task per partition, no gather with its extra loop passes before
    the answer). A partition not waited for yet whose leadership broke since its append (not
    led here now, or led again from a new run: `leading_since`) answers NOT_LEADER_OR_FOLLOWER,
    as a parked wait is failed then: its high watermark may have passed records other than
    the ones appended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    codes = []
    for _, _, part, offset, since in waits:
        if not part.is_leader or part.leading_since != since:
            codes.append(E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif part.state.high_watermark >= offset:
            codes.append(0)
        else:
            codes.append(await part.wait_for_hw(offset, max(deadline - loop.time(), 0.0)))
    return codes


class ParkedProduce(LaterAnswer):
    """An acks=all produce appended here, parked until its partitions' high watermarks pass
    its batches (issue 25), as `_waited_in_turn` waits but without a coroutine: each partition
    in turn, leadership checked before its wait (`leading_since`), one `Partition.on_hw`
    registration and one timer per request. The wait that passes the last partition builds
    the answer and hands it to the connection (`answer_later`) in the very call that moved the
    high watermark (the follower Fetch's), so the connection writes it on that loop pass (a
    resumed coroutine would write it a pass later). A partition kept by another worker is
    waited for on its slot the same way, without a task: the wake-up that finds the owner's
    published high watermark past the batch calls back (`Partition.on_hw`)."""
    __slots__ = ("broker", "ctx", "response", "waits", "codes", "timeout_s", "deliver", "timer",
                 "expired", "parked_at")

    def __init__(self, broker, ctx, response: ProduceResponse, waits: list, timeout_s: float) -> None:
        self.broker = broker
        self.ctx = ctx
        self.response = response
        self.waits = waits
        self.codes: list[int] = []
        self.timeout_s = timeout_s
        self.deliver = None
        self.timer = None
        self.expired = False
        self.parked_at = request_metrics.clock() if request_metrics.active else 0.0

    def answer_later(self, deliver) -> None:
        self.deliver = deliver
        self.timer = asyncio.get_running_loop().call_later(self.timeout_s, self._timed_out)
        self._next()

    def _next(self) -> None:
        codes, waits = self.codes, self.waits
        while len(codes) < len(waits):
            _, _, part, offset, since = waits[len(codes)]
            if not part.is_leader or part.leading_since != since:
                codes.append(E.ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif part.state.high_watermark >= offset:
                codes.append(0)
            elif self.expired:
                codes.append(E.ErrorCode.REQUEST_TIMED_OUT)
            else:
                part.on_hw(offset, self._passed)
                return
        self._finish()

    def _passed(self, code: int) -> None:
        """The partition waited for: its high watermark passed (0), or its wait failed."""
        if self.deliver is not None:
            self.codes.append(code)
            self._next()

    def _timed_out(self) -> None:
        self.timer = None
        self.expired = True
        self._passed(E.ErrorCode.REQUEST_TIMED_OUT)

    def _finish(self) -> None:
        deliver, self.deliver = self.deliver, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        parts = None
        try:
            _waited(self.broker, self.waits, self.codes)
            ctx, response = self.ctx, self.response
            if request_metrics.active:
                request_metrics.answered(0, None, response)
            parts = encode_response(0, ctx.api_version, ctx.header.correlation_id, response)
        except Exception:  # noqa: BLE001 - the connection closes (parts None) rather than never answering
            log.exception("answering a parked produce failed")
        remote_s = request_metrics.clock() - self.parked_at if request_metrics.active else 0.0
        self.waits = self.response = None
        deliver(parts, remote_s)
