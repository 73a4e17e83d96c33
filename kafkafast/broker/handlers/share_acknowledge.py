"""ShareAcknowledge (key 79), version 1: acknowledges records a member acquired with
ShareFetch (KIP-932, Kafka 4.1+): per offset range one type for the range or one per offset,
0 gap (archived), 1 accept (acknowledged), 2 release (available to any member again, or
archived at the delivery count limit), 3 reject (archived, never delivered again). It needs the
member's share session (SHARE_SESSION_NOT_FOUND; epoch 0 is INVALID_SHARE_SESSION_EPOCH, since a
session is opened only by ShareFetch); with epoch -1 the session is closed after the
acknowledgements and what the member still holds is released. A range with a record the member
does not hold answers INVALID_RECORD_STATE for its partition. READ on the group and the topic.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.share.manager import CONNECTION_LOST_CLIENT, FINAL_EPOCH
from kafkafast.broker.share.requests import apply_acks, current_leader, persisted, request_error, resolve
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse

R = ShareAcknowledgeResponse
EC = E.ErrorCode


@handles(ShareAcknowledgeRequest, 1, 1)
async def handle(broker, ctx, req: ShareAcknowledgeRequest, version: int) -> ShareAcknowledgeResponse:
    err, msg = request_error(broker, ctx, req.group_id, req.member_id)
    if not err and req.share_session_epoch == 0:
        err, msg = EC.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session."
    if err:
        return R(throttle_time_ms=0, error_code=err, error_message=msg, responses=[], node_endpoints=[])
    mgr = broker.share.partitions
    if ctx.internal and ctx.client_id == CONNECTION_LOST_CLIENT and req.share_session_epoch == FINAL_EPOCH:
        mgr.forwarded_connection_lost(req.group_id, req.member_id)
        return R(throttle_time_ms=0, error_code=0, error_message=None, responses=[], node_endpoints=[])
    try:
        session = mgr.session_for(req.group_id, req.member_id, req.share_session_epoch, [], [])
    except E.KafkaError as exc:
        return R(throttle_time_ms=0, error_code=exc.code, error_message=exc.message, responses=[], node_endpoints=[])
    answers: dict = {}
    for t in req.topics:
        tid = bytes(t.topic_id)
        name = resolve(broker, ctx, tid, [p.partition_index for p in t.partitions], answers)
        if name is None:
            continue
        for p in t.partitions:
            await apply_acks(broker, req.group_id, req.member_id, name, tid, p.partition_index, p.acknowledgement_batches,
                       answers)
    if req.share_session_epoch == FINAL_EPOCH:
        mgr.close_session(session)
        await persisted(broker, answers)
    else:
        await persisted(broker, answers, req.group_id)
    topics: dict[bytes, list] = {}
    for a in answers.values():
        topics.setdefault(a.topic_id, []).append(R.PartitionData(
            partition_index=a.partition, error_code=a.ack_error, error_message=a.ack_message,
            current_leader=current_leader(broker, a, R.LeaderIdAndEpoch)))
    return R(throttle_time_ms=0, error_code=0, node_endpoints=[],
             responses=[R.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=ps) for tid, ps in topics.items()])
