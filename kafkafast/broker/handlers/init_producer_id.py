"""InitProducerId (key 22), versions 0-4.

Idempotent producers (null transactional id) get a new producer id with epoch 0, unique
across workers and restarts. A client that passes its current id and epoch (v3+, after a
fatal sequence error) gets the same id with the epoch bumped; a bumped epoch must start
its sequences at 0 again. Transactional ids are refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no transaction coordinator yet). When a new block of
ids cannot be reserved (a full disk) the answer is the retriable COORDINATOR_NOT_AVAILABLE.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import any_allowed, denied

MAX_EPOCH = 32767


@handles(InitProducerIdRequest, 0, 4)
async def handle(broker, ctx, req: InitProducerIdRequest, version: int) -> InitProducerIdResponse:
    if req.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=E.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    if denied(broker, ctx, acl.IDEMPOTENT_WRITE, acl.CLUSTER) and not any_allowed(broker, ctx, acl.WRITE, acl.TOPIC):
        return InitProducerIdResponse(throttle_time_ms=0, error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    if version >= 3 and req.producer_id >= 0 and 0 <= req.producer_epoch < MAX_EPOCH - 1:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=req.producer_id,
                                      producer_epoch=req.producer_epoch + 1)
    try:
        pid = broker.producer_ids.next_id()
    except E.KafkaStorageError:  # the id block cannot be reserved (a full disk): retriable
        return InitProducerIdResponse(throttle_time_ms=0, error_code=E.ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
