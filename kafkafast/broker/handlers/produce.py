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
client are refused with INVALID_RECORD; a transactional id needs WRITE on it
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
"""
from kafkafast.broker.registry import handles
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol._generated.produce import ProduceRequest, ProduceResponse
from kafkafast.protocol import errors as E
from kafkafast.records import validate_compressed_records
from kafkafast.records.batch import decode_batch, validate_batches
from kafkafast.security import acl
from kafkafast.security.context import denied

PartResp = ProduceResponse.PartitionProduceResponse
TopicResp = ProduceResponse.TopicProduceResponse
RecordError = ProduceResponse.BatchIndexAndErrorMessage
SHOWN_RECORD_ERRORS = 3  # how many record errors error_message repeats, as Kafka does


def _error(index, code, message=None):
    return PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message)


def keyless_record_errors(topic: str, index: int, records, max_batch_size: int) -> list:
    """A RecordError for each record without a key. The batches are validated first (the
    errors of a bad batch come before this check, as in Kafka, and a compressed batch is
    decompressed only once it passed the checks the append makes)."""
    errors = []
    pos = 0
    for header in validate_batches(records, max_batch_size):
        _header, recs = decode_batch(records, pos, check_crc=False)
        pos += header.size
        errors += [RecordError(batch_index=i, batch_index_error_message=(
                   f"compacted topic partition {topic}-{index} does not accept a record without a key"))
                   for i, r in enumerate(recs) if r.key is None]
    return errors


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
    from kafkafast.records.convert import upconvert

    try:
        pd.records = upconvert(pd.records, broker.config.max_decompressed_bytes(part.log.config.max_message_bytes))
    except E.KafkaError as exc:
        return _error(pd.index, exc.code, exc.message)
    return None


def checked_records(broker, part, topic: str, pd):
    """The record checks made before a leader's append, shared with cluster mode's produce
    path (kafkafast/cluster/requests.py): compressed batches validated as a stream, keyless
    records refused in compacted topics. An error response, or None."""
    try:
        max_batch = part.log.config.max_message_bytes
        validate_compressed_records(pd.records, broker.config.max_decompressed_bytes(max_batch), max_batch)
        if part.log.config.compact:
            keyless = keyless_record_errors(topic, pd.index, pd.records, max_batch)
            if keyless:
                return _invalid_records(pd.index, keyless)
    except E.KafkaError as exc:
        return _error(pd.index, exc.code, exc.message)
    return None


def _invalid_records(index: int, errors: list):
    shown = "; ".join(f"record {e.batch_index}: {e.batch_index_error_message}" for e in errors[:SHOWN_RECORD_ERRORS])
    resp = _error(index, E.ErrorCode.INVALID_RECORD,
                  f"{len(errors)} record(s) rejected, the first {min(len(errors), SHOWN_RECORD_ERRORS)}: {shown}")
    resp.record_errors = errors
    return resp


@handles(ProduceRequest, 0, 11)
async def handle(broker, ctx, req: ProduceRequest, version: int):
    if getattr(broker, "cluster", None) is not None:  # leader checks, acks=all replication: kafkafast/cluster
        for topic in req.topic_data if version <= 2 else ():
            for pd in topic.partition_data:
                part = broker.get_partition(topic.name, pd.index)
                if part is not None and upconverted(broker, part, pd, version) is not None:
                    pd.records = b""  # refused: the cluster path answers INVALID_RECORD (empty set)
        from kafkafast.cluster.requests import produce as cluster_produce

        return await cluster_produce(broker, ctx, req, version)
    acks = req.acks
    responses = []
    forward = getattr(broker, "forward_produce", None)
    pending = []  # (topic response, index in partition list, awaitable) for forwarded partitions
    for topic in req.topic_data:
        tr = TopicResp(name=topic.name, partition_responses=[])
        responses.append(tr)
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if req.transactional_id is not None and transactional_refused(broker, ctx, req.transactional_id):
                tr.partition_responses.append(_error(pd.index, transactional_refused(broker, ctx,
                                                                                     req.transactional_id)))
                continue
            if denied(broker, ctx, acl.WRITE, acl.TOPIC, topic.name):
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            part = broker.get_partition(topic.name, pd.index)
            if part is None:
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            code = part.unavailable_error()
            if code:  # loading at its owner (not forwarded to wait there), or offline: this partition only
                tr.partition_responses.append(_error(pd.index, code, f"{topic.name}-{pd.index} is "
                                                     + ("loading" if part.loading else "offline")))
                continue
            if pd.records is None or len(pd.records) == 0:
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.INVALID_RECORD, "empty record set"))
                continue
            refused = upconverted(broker, part, pd, version)
            if refused is not None:
                tr.partition_responses.append(refused)
                continue
            if forward is not None and not ctx.internal and not broker.appends_here(part, req.transactional_id):
                tr.partition_responses.append(None)
                pending.append((tr, len(tr.partition_responses) - 1, forward(part, pd.records, acks, req.timeout_ms)))
                continue
            refused = checked_records(broker, part, topic.name, pd)
            if refused is not None:
                tr.partition_responses.append(refused)
                continue
            try:
                res = broker.append(part, pd.records)
            except E.UnsupportedForMessageFormatError as exc:  # v0/v1 message sets are not converted
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.UNSUPPORTED_VERSION, exc.message))
                continue
            except E.KafkaError as exc:
                tr.partition_responses.append(_error(pd.index, exc.code, exc.message))
                continue
            except OSError as exc:
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.KAFKA_STORAGE_ERROR, str(exc)))
                continue
            tr.partition_responses.append(PartResp(
                index=pd.index, error_code=0, base_offset=res.base_offset,
                log_append_time_ms=res.log_append_time, log_start_offset=res.log_start_offset,
                record_errors=[], error_message=None))
    for tr, i, aw in pending:  # forwarded appends answer with a ready PartitionProduceResponse
        tr.partition_responses[i] = await request_metrics.remote(aw)
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)

