"""Produce (key 0), versions 3-9 (record batch v2 only).

acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS for every partition). Each
partition's record set is validated and appended as opaque batches: offsets are assigned
in place in the request's own buffer and the bytes are written once. Errors per
partition: UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD,
UNSUPPORTED_COMPRESSION_TYPE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH,
UNKNOWN_PRODUCER_ID; a duplicate batch of an idempotent producer answers NONE with the
offset the original got, as Kafka does. Legacy v0/v1 message sets are answered with
UNSUPPORTED_VERSION (they are not converted). acks=0 sends no response. Transactional produce
is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no transaction coordinator yet).
v8 adds record_errors/error_message (filled for record-level failures).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.produce import ProduceRequest, ProduceResponse
from kafkafast.protocol import errors as E

PartResp = ProduceResponse.PartitionProduceResponse
TopicResp = ProduceResponse.TopicProduceResponse


def _error(index, code, message=None):
    return PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message)


@handles(ProduceRequest, 3, 9)
async def handle(broker, ctx, req: ProduceRequest, version: int):
    if getattr(broker, "cluster", None) is not None:  # leader checks, acks=all replication: kafkafast/cluster
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
            if req.transactional_id is not None:
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                                     "transactions are not supported by this broker"))
                continue
            part = broker.get_partition(topic.name, pd.index)
            if part is None:
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if pd.records is None or len(pd.records) == 0:
                tr.partition_responses.append(_error(pd.index, E.ErrorCode.INVALID_RECORD, "empty record set"))
                continue
            if forward is not None and not ctx.internal and not broker.owns(part):
                tr.partition_responses.append(None)
                pending.append((tr, len(tr.partition_responses) - 1, forward(part, pd.records, acks, req.timeout_ms)))
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
        tr.partition_responses[i] = await aw
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)

