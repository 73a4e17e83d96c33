"""The cluster's Produce path (the handler calls it in cluster mode; the last request path
still split by mode, see issue 24's notes in tests/unit/test_layering.py).

Produce: only the leader appends (else NOT_LEADER_OR_FOLLOWER), and only while it can
confirm its leadership (`ClusterBroker.leadership_fence`: else NOT_LEADER_OR_FOLLOWER too);
an acks=0 produce with any error closes the client's connection, as Kafka does, so the
producer refreshes its metadata. acks=all is refused with
NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than min.insync.replicas,
and answered once the high watermark passes the batch (REQUEST_TIMED_OUT after the
request's timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum
meanwhile, NOT_LEADER_OR_FOLLOWER when leadership moved). acks=1 answers after the leader's
append. In a multi-worker broker a partition owned by another worker is appended there
(forwarded with acks=1); for acks=all this worker then waits for the high watermark in
the partition's shared-memory slot (`cluster/worker_broker.py`).

Transactional produce is appended like any other (the batches open the producer's
transaction in the leader's log; the last stable offset stays at its first offset until the
marker). Authorization as on a single node: Produce needs Write on the topic (and on the
transactional id).
"""
from __future__ import annotations

import asyncio
from typing import Any

from kafkafast.broker.handlers.produce import transactional_refused
from kafkafast.metrics import recorder as request_metrics
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.produce import ProduceResponse
from kafkafast.protocol.errors import CloseConnection
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
            fenced = broker.leadership_fence(part)  # (a forwarded produce too: the owner checks again)
            if fenced is not None:
                out.append(_produce_error(pd.index, EC.NOT_LEADER_OR_FOLLOWER, fenced))
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
        if client_listener(ctx) is not None and any(r is not None and r.error_code for tr in responses
                                                    for r in tr.partition_responses):
            # Kafka closes the connection: an acks=0 producer learns of an error only that way,
            # and refreshes its metadata (a fenced or deposed leader's clients move on)
            raise CloseConnection("acks=0 produce refused: " + ", ".join(
                f"{tr.name}-{r.index} error {r.error_code}" for tr in responses for r in tr.partition_responses
                if r is not None and r.error_code))
        return None
    endpoints = [ProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
                 for i, h, p, r in broker.metadata.brokers_on(client_listener(ctx)) if i in hinted]
    return ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=endpoints)


def client_listener(ctx: Any) -> str | None:
    """The name of the listener the request came in on (None: an internal connection)."""
    listener = getattr(getattr(ctx, "conn", None), "listener", None)
    return listener.name if listener is not None else None
