"""Metadata (key 3), versions 0-12.

Answers from the metadata image of the control plane (`broker.control`): the live brokers
with their endpoint on the listener the client came in on (brokers without it are left out),
the controller, and the requested topics (all topics for a null list, or an empty list before
v1) with each partition's leader, leader epoch, replicas, ISR and offline replicas; a partition
without a leader answers LEADER_NOT_AVAILABLE, one whose leader lacks the client's listener
LISTENER_NOT_FOUND (v6+), as Kafka does. On a single node the image is this broker's topics:
it leads every partition, the lone replica in sync; a partition whose log is offline (its log
dir failed) is listed as Kafka lists one whose only replica is offline (leader -1, this broker
in offline_replicas, an empty ISR), one still loading at its owner worker as a partition
waiting for its leader (leader -1, the ISR unchanged). In a cluster the image is the metadata
cache the controller's UpdateMetadata fills. Only topics the principal may Describe are listed
(TOPIC_AUTHORIZATION_FAILED for a named one). Unknown topics are auto-created when
`auto.create.topics.enable` is on, the request allows it (always before v4) and the principal
has Create on the cluster or the topic; a topic created but not yet in the image (a cluster's
controller has not elected its leaders) answers LEADER_NOT_AVAILABLE. Invalid names get
INVALID_TOPIC_EXCEPTION, unknown topic ids (v10+) UNKNOWN_TOPIC_ID.
v8+: when asked, each topic's and (v8-10) the cluster's authorized operations as the
principal's ACLs allow them (`with_authorized_operations`); INT32_MIN when not asked.
"""
from kafkafast.broker.registry import handles
from kafkafast.broker.topics import INTERNAL_TOPICS, validate_topic_name
from kafkafast.protocol._generated.metadata import MetadataRequest, MetadataResponse
from kafkafast.protocol import errors as E
from kafkafast.protocol.primitives import ZERO_UUID
from kafkafast.security import acl
from kafkafast.security.context import authorized_operations, denied

AUTH_OPS_UNSET = -2147483648


def topic_response(broker, name: str, version: int, listed: set[int]) -> MetadataResponse.MetadataResponseTopic:
    """The topic as the metadata image has it; a leader not on the request's listener is
    LISTENER_NOT_FOUND (v6+), as Kafka answers."""
    control = broker.control
    parts = []
    for pv in control.partitions_of(name):
        code = E.ErrorCode.LEADER_NOT_AVAILABLE if pv.leader < 0 else 0
        if not code and pv.leader not in listed:
            code = E.ErrorCode.LISTENER_NOT_FOUND if version >= 6 else E.ErrorCode.LEADER_NOT_AVAILABLE
        parts.append(MetadataResponse.MetadataResponsePartition(
            error_code=code, partition_index=pv.index, leader_id=pv.leader, leader_epoch=pv.leader_epoch,
            replica_nodes=pv.replicas, isr_nodes=pv.isr, offline_replicas=pv.offline))
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=name, topic_id=control.topic_id(name) or ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
        partitions=parts, topic_authorized_operations=AUTH_OPS_UNSET)


def error_topic(name, code, topic_id=ZERO_UUID):
    return MetadataResponse.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id,
                                                  is_internal=False, partitions=[],
                                                  topic_authorized_operations=AUTH_OPS_UNSET)


@handles(MetadataRequest, 0, 12)
async def handle(broker, ctx, req: MetadataRequest, version: int) -> MetadataResponse:
    control = broker.control
    control.refresh()
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
               for i, h, p, r in control.brokers_for(ctx)]
    listed = {b.node_id for b in brokers}
    resp = MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                            controller_id=control.controller_id(), topics=[],
                            cluster_authorized_operations=AUTH_OPS_UNSET)
    if req.topics is None or (version == 0 and not req.topics):
        for name in control.topic_names():
            if not denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, name):  # else hidden from this principal
                resp.topics.append(topic_response(broker, name, version, listed))
        return with_authorized_operations(broker, ctx, req, version, resp)
    auto = req.allow_auto_topic_creation if version >= 4 else True
    for t in req.topics:
        name = t.name
        if name is None:
            found = control.topic_named_by(bytes(t.topic_id))
            if found is None or denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, found):
                resp.topics.append(error_topic(None, E.ErrorCode.UNKNOWN_TOPIC_ID, bytes(t.topic_id)))
            else:
                resp.topics.append(topic_response(broker, found, version, listed))
            continue
        if denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, name):
            resp.topics.append(error_topic(name, E.ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if control.topic_id(name) is None:
            try:
                validate_topic_name(name)
            except E.InvalidTopicError:
                resp.topics.append(error_topic(name, E.ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            may_create = auto and (not denied(broker, ctx, acl.CREATE, acl.CLUSTER)
                                   or not denied(broker, ctx, acl.CREATE, acl.TOPIC, name))
            admin = broker.topic_admin
            if not may_create or await admin.run(admin.auto_create, name) is None:
                resp.topics.append(error_topic(name, E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if control.topic_id(name) is None:  # created, but not in the image yet (no leader elected)
                resp.topics.append(error_topic(name, E.ErrorCode.LEADER_NOT_AVAILABLE))
                continue
        resp.topics.append(topic_response(broker, name, version, listed))
    return with_authorized_operations(broker, ctx, req, version, resp)


def with_authorized_operations(broker, ctx, req: MetadataRequest, version: int, resp: MetadataResponse):
    """`resp` with the authorized operations the request asked for filled in."""
    if version >= 8 and req.include_topic_authorized_operations:
        for t in resp.topics:
            if t.error_code == 0 and t.name:
                t.topic_authorized_operations = authorized_operations(broker, ctx, acl.TOPIC, t.name)
    if 8 <= version <= 10 and req.include_cluster_authorized_operations:
        resp.cluster_authorized_operations = authorized_operations(broker, ctx, acl.CLUSTER)
    return resp
