"""DeleteTopics (key 20), versions 0-6.

Deletes topics by name (v0-5: topic_names; v6: topics by name or id). The partitions'
directories are renamed `-delete` and removed; reads in flight keep their open files.
Unknown names: UNKNOWN_TOPIC_OR_PARTITION; unknown ids: UNKNOWN_TOPIC_ID;
`delete.topic.enable=false`: TOPIC_DELETION_DISABLED. As in Kafka, the answer waits (up to the
request's timeout_ms; none when it is 0 or less) until the deleted topics are gone from this
broker's metadata (a cluster broker learns it from the controller): REQUEST_TIMED_OUT for a
topic still there then, whose deletion goes on.
"""
from kafkafast.broker.control import until_in_image
from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from kafkafast.protocol import errors as E
from kafkafast.protocol.primitives import ZERO_UUID
from kafkafast.security import acl
from kafkafast.security.context import require

Result = DeleteTopicsResponse.DeletableTopicResult


@handles(DeleteTopicsRequest, 0, 6)
async def handle(broker, ctx, req: DeleteTopicsRequest, version: int) -> DeleteTopicsResponse:
    broker.refresh_topics()
    wanted = [(n, None) for n in req.topic_names] if version < 6 else [(t.name, t.topic_id) for t in req.topics]
    out = []
    for name, tid in wanted:
        topic_id = bytes(tid) if tid is not None else ZERO_UUID
        if name is None:
            meta = broker.topics.by_id.get(topic_id)
            if meta is None:
                out.append(Result(name=None, topic_id=topic_id, error_code=E.ErrorCode.UNKNOWN_TOPIC_ID,
                                  error_message=None))
                continue
            name = meta.name
        meta = broker.topics.get(name)
        try:
            require(broker, ctx, acl.DELETE, acl.TOPIC, name)
            if not broker.config.get_bool("delete.topic.enable"):
                raise E.for_code(E.ErrorCode.TOPIC_DELETION_DISABLED)()
            if meta is None:
                raise E.UnknownTopicOrPartitionError()
            await broker.topic_admin.run(broker.topic_admin.delete, name)
        except E.KafkaError as exc:
            out.append(Result(name=name, topic_id=topic_id, error_code=exc.code, error_message=exc.message))
            continue
        out.append(Result(name=name, topic_id=meta.topic_id, error_code=0, error_message=None))
    deleted = [r.name for r in out if r.error_code == 0]
    if deleted and req.timeout_ms > 0:
        control = broker.control
        for r in out:
            if r.name in await until_in_image(control, lambda n: control.topic_id(n) is None, deleted, req.timeout_ms):
                r.error_code, r.error_message = E.ErrorCode.REQUEST_TIMED_OUT, "the topic is being deleted"
    return DeleteTopicsResponse(throttle_time_ms=0, responses=out)
