"""Client-facing request paths that differ in cluster mode (the handlers call these when
`broker.cluster` is set; single-node mode never reaches this module).

Produce: only the leader appends (else NOT_LEADER_OR_FOLLOWER); acks=all is refused with
NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than min.insync.replicas,
and answered once the high watermark passes the batch (REQUEST_TIMED_OUT after the
request's timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum
meanwhile, NOT_LEADER_OR_FOLLOWER when leadership moved). acks=1 answers after the leader's
append. In a multi-worker broker a partition owned by another worker is appended there
(forwarded with acks=1); for acks=all this worker then waits for the high watermark in
the partition's shared-memory slot (`cluster/worker_broker.py`).

Metadata: every live broker, the controller, and each partition's leader, leader epoch,
replicas, ISR and offline replicas from the controller's UpdateMetadata
(LEADER_NOT_AVAILABLE for a partition without a leader). Brokers are listed with their
endpoint on the listener the client came in on; brokers without that listener are left
out, and a partition whose leader lacks it answers LISTENER_NOT_FOUND (v6+), as Kafka does.

FindCoordinator: the leader of the group's `__consumer_offsets` partition (key type 0), of
the transactional id's `__transaction_state` partition (key type 1; `cluster/transactions.py`);
the topic is created on first use (COORDINATOR_NOT_AVAILABLE while it has no leader, or when
it cannot be created).

Transactional produce is appended like any other (the batches open the producer's
transaction in the leader's log; the last stable offset stays at its first offset until the
marker). Authorization as on a single node: Produce needs Write on the topic (and on the
transactional id); Metadata lists only
topics the principal may Describe (TOPIC_AUTHORIZATION_FAILED for a named one) and
auto-creates only with Create on the cluster or the topic.
"""
from __future__ import annotations

import asyncio
from typing import Any

from kafkafast.broker.broker import OFFSETS_TOPIC
from kafkafast.broker.handlers.produce import transactional_refused
from kafkafast.broker.txn_coordinator import TXN_TOPIC
from kafkafast.metrics import recorder as request_metrics
from kafkafast.broker.topics import INTERNAL_TOPICS, validate_topic_name
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorResponse
from kafkafast.protocol._generated.metadata import MetadataResponse
from kafkafast.protocol._generated.produce import ProduceResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

EC = E.ErrorCode
AUTH_OPS_UNSET = -2147483648
PartResp = ProduceResponse.PartitionProduceResponse
TopicResp = ProduceResponse.TopicProduceResponse


def _produce_error(index: int, code: int, message: str | None = None) -> Any:
    return PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message)


async def produce(broker: Any, ctx: Any, req: Any, version: int) -> Any:
    acks = req.acks
    responses = []
    hinted: set[int] = set()  # leaders named in NOT_LEADER_OR_FOLLOWER answers (v10+)
    waits = []  # (topic response, index, partition, offset the HW must reach)
    forwarded = []  # (topic response, index, partition, the owner worker's answer)
    for topic in req.topic_data:
        tr = TopicResp(name=topic.name, partition_responses=[])
        responses.append(tr)
        for pd in topic.partition_data:
            out = tr.partition_responses
            if acks not in (-1, 0, 1):
                out.append(_produce_error(pd.index, EC.INVALID_REQUIRED_ACKS))
                continue
            if req.transactional_id is not None and transactional_refused(broker, ctx, req.transactional_id):
                out.append(_produce_error(pd.index, transactional_refused(broker, ctx, req.transactional_id)))
                continue
            if denied(broker, ctx, acl.WRITE, acl.TOPIC, topic.name):
                out.append(_produce_error(pd.index, EC.TOPIC_AUTHORIZATION_FAILED))
                continue
            part = broker.get_partition(topic.name, pd.index)
            if part is None or not part.is_leader:
                info = broker.metadata.partitions.get(topic.name, {}).get(pd.index)
                refused = _produce_error(pd.index, EC.NOT_LEADER_OR_FOLLOWER if info is not None or part is not None
                                         else EC.UNKNOWN_TOPIC_OR_PARTITION)
                if version >= 10 and info is not None and info.leader >= 0:  # KIP-951: where it went
                    refused.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=info.leader,
                                                                              leader_epoch=info.leader_epoch)
                    hinted.add(info.leader)
                out.append(refused)
                continue
            if pd.records is None or len(pd.records) == 0:
                out.append(_produce_error(pd.index, EC.INVALID_RECORD, "empty record set"))
                continue
            min_isr = broker.min_insync_replicas(part)
            if acks == -1 and len(part.isr) < min_isr:
                out.append(_produce_error(pd.index, EC.NOT_ENOUGH_REPLICAS,
                                          f"The size of the current ISR {part.isr} is insufficient to satisfy "
                                          f"the min.isr requirement of {min_isr}"))
                continue
            if not getattr(part, "local", True) and not broker.appends_here(part, req.transactional_id):
                out.append(None)
                forwarded.append((tr, len(out) - 1, part, broker.forward_produce(
                    part, pd.records, 0 if acks == 0 else 1, req.timeout_ms)))
                continue
            from kafkafast.broker.handlers.produce import checked_records

            refused = checked_records(broker, part, topic.name, pd)  # as on a single node: bad batches, keyless
            if refused is not None:
                out.append(refused)
                continue
            try:
                res = broker.append(part, pd.records)
            except E.UnsupportedForMessageFormatError as exc:
                out.append(_produce_error(pd.index, EC.UNSUPPORTED_VERSION, exc.message))
                continue
            except E.KafkaError as exc:
                out.append(_produce_error(pd.index, exc.code, exc.message))
                continue
            except OSError as exc:
                out.append(_produce_error(pd.index, EC.KAFKA_STORAGE_ERROR, str(exc)))
                continue
            out.append(PartResp(index=pd.index, error_code=0, base_offset=res.base_offset,
                                log_append_time_ms=res.log_append_time, log_start_offset=res.log_start_offset,
                                record_errors=[], error_message=None))
            if acks == -1:
                waits.append((tr, len(out) - 1, part, res.last_offset + 1))
    for tr, i, part, answer in forwarded:
        resp = tr.partition_responses[i] = await request_metrics.remote(answer)
        if acks == -1 and resp is not None and resp.error_code == 0:  # the log end now covers the batch
            waits.append((tr, i, part, part.log.state.log_end_offset))
    if waits:
        timeout = max(req.timeout_ms, 0) / 1000.0
        codes = await request_metrics.remote(asyncio.gather(*(part.wait_for_hw(offset, timeout)
                                                                for _, _, part, offset in waits)))
        for (tr, i, part, _), code in zip(waits, codes):
            if code == 0 and len(part.isr) < broker.min_insync_replicas(part):
                code = EC.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            if code:
                tr.partition_responses[i] = _produce_error(tr.partition_responses[i].index, code)
    if acks == 0:
        return None
    endpoints = [ProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
                 for i, h, p, r in broker.metadata.brokers_on(client_listener(ctx)) if i in hinted]
    return ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=endpoints)


def client_listener(ctx: Any) -> str | None:
    """The name of the listener the request came in on (None: an internal connection)."""
    listener = getattr(getattr(ctx, "conn", None), "listener", None)
    return listener.name if listener is not None else None


def _topic_metadata(broker: Any, name: str, version: int, listed: set[int] | None = None) -> Any:
    cache = broker.metadata
    parts = []
    for index, info in sorted(cache.partitions.get(name, {}).items()):
        code = EC.LEADER_NOT_AVAILABLE if info.leader < 0 else 0
        if not code and listed is not None and info.leader not in listed:
            code = EC.LISTENER_NOT_FOUND if version >= 6 else EC.LEADER_NOT_AVAILABLE
        parts.append(MetadataResponse.MetadataResponsePartition(
            error_code=code, partition_index=index,
            leader_id=info.leader, leader_epoch=info.leader_epoch, replica_nodes=list(info.replicas),
            isr_nodes=list(info.isr), offline_replicas=list(info.offline)))
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=name, topic_id=cache.topic_ids.get(name, bytes(16)),
        is_internal=name in INTERNAL_TOPICS,
        partitions=parts, topic_authorized_operations=AUTH_OPS_UNSET)


def _error_topic(name: str | None, code: int, topic_id: bytes = bytes(16)) -> Any:
    return MetadataResponse.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id, is_internal=False,
                                                  partitions=[], topic_authorized_operations=AUTH_OPS_UNSET)


async def metadata(broker: Any, ctx: Any, req: Any, version: int) -> Any:
    cache = broker.metadata
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
               for i, h, p, r in cache.brokers_on(client_listener(ctx))]
    listed = {b.node_id for b in brokers}
    resp = MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                            controller_id=cache.controller_id, topics=[],
                            cluster_authorized_operations=AUTH_OPS_UNSET)
    if req.topics is None or (version == 0 and not req.topics):
        for name in sorted(cache.partitions):
            if not denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, name):  # else hidden from this principal
                resp.topics.append(_topic_metadata(broker, name, version, listed))
        return resp
    auto = req.allow_auto_topic_creation if version >= 4 else True
    by_id = {tid: name for name, tid in cache.topic_ids.items()}
    for t in req.topics:
        name = t.name
        if name is None:
            found = by_id.get(bytes(t.topic_id))
            if found and denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, found):
                found = None
            resp.topics.append(_topic_metadata(broker, found, version, listed) if found
                               else _error_topic(None, EC.UNKNOWN_TOPIC_ID, bytes(t.topic_id)))
            continue
        if denied(broker, ctx, acl.DESCRIBE, acl.TOPIC, name):
            resp.topics.append(_error_topic(name, EC.TOPIC_AUTHORIZATION_FAILED))
            continue
        if name in cache.partitions:
            resp.topics.append(_topic_metadata(broker, name, version, listed))
            continue
        try:
            validate_topic_name(name)
        except E.InvalidTopicError:
            resp.topics.append(_error_topic(name, EC.INVALID_TOPIC_EXCEPTION))
            continue
        may_create = auto and (not denied(broker, ctx, acl.CREATE, acl.CLUSTER)
                               or not denied(broker, ctx, acl.CREATE, acl.TOPIC, name))
        created = await asyncio.to_thread(broker.maybe_auto_create, name) if may_create else None
        resp.topics.append(_error_topic(name, EC.LEADER_NOT_AVAILABLE if created is not None
                                        else EC.UNKNOWN_TOPIC_OR_PARTITION))
    return resp


def _ensure_offsets_topic(broker: Any) -> int:
    if OFFSETS_TOPIC in broker.metadata.partitions or broker.topics.get(OFFSETS_TOPIC) is not None:
        return 0
    try:
        broker.create_topic(OFFSETS_TOPIC, broker.config.get_int("offsets.topic.num.partitions"))
    except E.TopicAlreadyExistsError:
        pass
    except E.KafkaError:
        return EC.COORDINATOR_NOT_AVAILABLE
    return 0


def _ensure_txn_topic(broker: Any) -> int:
    coordinator = broker.txn_coordinator
    coordinator.ensure_topic()
    return 0 if coordinator.topic_known else EC.COORDINATOR_NOT_AVAILABLE


async def find_coordinator(broker: Any, ctx: Any, req: Any, version: int) -> Any:
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    key_type = req.key_type if version >= 1 else 0
    answers = []
    for key in keys:
        node, host, port, err, msg = -1, "", -1, 0, None
        refused = denied(broker, ctx, acl.DESCRIBE, acl.GROUP if key_type == 0 else acl.TRANSACTIONAL_ID,
                         key) if key_type in (0, 1) else 0
        if refused:
            err = refused
        elif key_type not in (0, 1):
            err, msg = EC.INVALID_REQUEST, f"unknown key type {key_type}"
        elif not key:
            err = EC.INVALID_REQUEST
        else:
            topic = OFFSETS_TOPIC if key_type == 0 else TXN_TOPIC
            err = await asyncio.to_thread(_ensure_offsets_topic if key_type == 0 else _ensure_txn_topic, broker)
            if not err:
                p = (broker.group_coordinator if key_type == 0 else broker.txn_coordinator).partition_for(key)
                leader = broker.metadata.leader_of(topic, p)
                b = broker.metadata.brokers.get(leader)
                ep = b.endpoint(client_listener(ctx)) if b is not None else None
                if b is None or ep is None:
                    err = EC.COORDINATOR_NOT_AVAILABLE
                else:
                    node, (host, port) = b.broker_id, ep
        answers.append((key, node, host, port, err, msg))
    if version >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e, error_message=m)
            for k, n, h, p, e, m in answers])
    _, n, h, p, e, m = answers[0]
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=e, error_message=m, node_id=n, host=h, port=p)
