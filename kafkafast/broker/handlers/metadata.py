"""Metadata (key 3), versions 0-12.

Lists this broker (from advertised.listeners) as the only broker and controller, and the
requested topics (all topics for a null list, or an empty list before v1) with one replica
per partition. Unknown topics are auto-created when `auto.create.topics.enable` is on and
the request allows it (always before v4); invalid names get INVALID_TOPIC_EXCEPTION,
unknown topic ids (v10+) UNKNOWN_TOPIC_ID. A partition whose log is offline (its log dir
failed) is listed as Kafka lists a partition whose only replica is offline: leader -1,
LEADER_NOT_AVAILABLE, this broker in offline_replicas, an empty ISR; one still loading at its
owner worker (the broker's start) as a partition waiting for its leader: leader -1,
LEADER_NOT_AVAILABLE, the ISR unchanged.
v8+: when asked, each topic's and (v8-10) the cluster's authorized operations as the
principal's ACLs allow them (`with_authorized_operations`); INT32_MIN when not asked.
"""
from kafkafast.broker.control import broker_endpoint
from kafkafast.broker.registry import handles
from kafkafast.broker.topics import validate_topic_name
from kafkafast.protocol._generated.metadata import MetadataRequest, MetadataResponse
from kafkafast.protocol import errors as E
from kafkafast.protocol.primitives import ZERO_UUID
from kafkafast.security import acl
from kafkafast.security.context import authorized_operations, denied

AUTH_OPS_UNSET = -2147483648


def topic_response(broker, meta, version):
    node = broker.node_id
    parts = []
    for i in range(meta.partitions):
        p = broker.partitions.get((meta.name, i))
        epoch = p.leader_epoch if p is not None else 0
        if p is not None and p.loading:  # its owner worker still loads it: no leader yet, its replica in sync
            parts.append(MetadataResponse.MetadataResponsePartition(
                error_code=E.ErrorCode.LEADER_NOT_AVAILABLE, partition_index=i, leader_id=-1, leader_epoch=epoch,
                replica_nodes=[node], isr_nodes=[node], offline_replicas=[]))
            continue
        if p is not None and p.state.offline:  # its only replica's log dir failed: no leader
            parts.append(MetadataResponse.MetadataResponsePartition(
                error_code=E.ErrorCode.LEADER_NOT_AVAILABLE, partition_index=i, leader_id=-1, leader_epoch=epoch,
                replica_nodes=[node], isr_nodes=[], offline_replicas=[node]))
            continue
        parts.append(MetadataResponse.MetadataResponsePartition(
            error_code=0, partition_index=i, leader_id=node, leader_epoch=epoch,
            replica_nodes=[node], isr_nodes=[node], offline_replicas=[]))
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=meta.name, topic_id=meta.topic_id, is_internal=meta.is_internal,
        partitions=parts, topic_authorized_operations=AUTH_OPS_UNSET)


def error_topic(name, code, topic_id=ZERO_UUID):
    return MetadataResponse.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id,
                                                  is_internal=False, partitions=[],
                                                  topic_authorized_operations=AUTH_OPS_UNSET)


@handles(MetadataRequest, 0, 12)
async def handle(broker, ctx, req: MetadataRequest, version: int) -> MetadataResponse:
    if getattr(broker, "cluster", None) is not None:  # every broker, leader, replica and ISR: kafkafast/cluster
        from kafkafast.cluster.requests import metadata as cluster_metadata

        return with_authorized_operations(broker, ctx, req, version,
                                          await cluster_metadata(broker, ctx, req, version))
    broker.refresh_topics()
    host, port = broker_endpoint(broker, ctx)
    resp = MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=broker.node_id, host=host, port=port, rack=None)],
        cluster_id=broker.cluster_id, controller_id=broker.node_id, topics=[],
        cluster_authorized_operations=AUTH_OPS_UNSET)
    all_topics = req.topics is None or (version == 0 and not req.topics)
    if all_topics:
        for meta in sorted(broker.topics.topics.values(), key=lambda t: t.name):
            if denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, meta.name):  # hidden from this principal
                continue
            resp.topics.append(topic_response(broker, meta, version))
        return with_authorized_operations(broker, ctx, req, version, resp)
    auto = req.allow_auto_topic_creation if version >= 4 else True
    for t in req.topics:
        name = t.name
        if name is None:
            meta = broker.topics.by_id.get(bytes(t.topic_id))
            if meta is None or denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, meta.name):
                resp.topics.append(error_topic(None, E.ErrorCode.UNKNOWN_TOPIC_ID, bytes(t.topic_id)))
            else:
                resp.topics.append(topic_response(broker, meta, version))
            continue
        if denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, name):
            resp.topics.append(error_topic(name, E.ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        meta = broker.topics.get(name)
        if meta is None:
            try:
                validate_topic_name(name)
            except E.InvalidTopicError:
                resp.topics.append(error_topic(name, E.ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            if auto and (not denied(broker, ctx, acl.CREATE, acl.CLUSTER)
                         or not denied(broker, ctx, acl.CREATE, acl.TOPIC, name)):
                meta = broker.maybe_auto_create(name)
        if meta is None:
            resp.topics.append(error_topic(name, E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        else:
            resp.topics.append(topic_response(broker, meta, version))
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
