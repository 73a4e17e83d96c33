"""Fetch (key 1), versions 4-12.

Reads each partition from its segment files into a FileRegion (sent with os.sendfile by
the connection), never beyond the high watermark. Limits as Kafka: the first partition
with data always gets at least one whole batch (KIP-74), then `max_bytes` for the
response and `partition_max_bytes` per partition. When fewer than `min_bytes` are
available the fetch parks until an append to one of its partitions wakes it or
`max_wait_ms` passes. Fetch sessions (v7+) are declined: the response carries session id
0, and a request naming a session id gets FETCH_SESSION_ID_NOT_FOUND. Transactions do not
exist, so the last stable offset equals the high watermark. An offline partition (its log
could not be opened) answers KAFKA_STORAGE_ERROR.
"""
import asyncio
import time

from kafkafast.broker.registry import handles
from kafkafast.protocol._generated.fetch import FetchRequest, FetchResponse
from kafkafast.protocol import errors as E
from kafkafast.security.context import fetch_denied

PartData = FetchResponse.PartitionData
TopicResp = FetchResponse.FetchableTopicResponse
READ_COMMITTED = 1


def _error(index, code, part=None):
    return PartData(partition_index=index, error_code=code,
                    high_watermark=part.high_watermark if part else -1,
                    last_stable_offset=part.high_watermark if part else -1,
                    log_start_offset=part.log_start_offset if part else -1,
                    aborted_transactions=None, preferred_read_replica=-1, records=b"")


def _read_all(broker, req, version, plan):
    """One pass over the requested partitions. Returns (responses, bytes)."""
    budget = req.max_bytes if version >= 3 else 0x7FFFFFFF
    total = 0
    responses = []
    for topic_name, fp_list, tresp in plan:
        tresp.partitions = []
        for fp, part in fp_list:
            if part is None:
                tresp.partitions.append(_error(fp.partition, E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if part.state.offline:
                tresp.partitions.append(_error(fp.partition, E.ErrorCode.KAFKA_STORAGE_ERROR, part))
                continue
            not_leader = cluster_fetch_error(broker, part, req.replica_id)
            if not_leader:
                tresp.partitions.append(_error(fp.partition, not_leader, part))
                continue
            if version >= 9 and fp.current_leader_epoch >= 0 and fp.current_leader_epoch != part.leader_epoch:
                code = (E.ErrorCode.FENCED_LEADER_EPOCH if fp.current_leader_epoch < part.leader_epoch
                        else E.ErrorCode.UNKNOWN_LEADER_EPOCH)
                tresp.partitions.append(_error(fp.partition, code, part))
                continue
            hw = part.high_watermark
            upper = cluster_upper_bound(broker, part, req.replica_id, hw)
            limit = min(fp.partition_max_bytes, max(budget - total, 0))
            try:
                result = part.log.reader.read(fp.fetch_offset, limit, upper_bound_offset=upper,
                                              min_one_batch=(total == 0))
            except E.KafkaError as exc:
                tresp.partitions.append(_error(fp.partition, exc.code, part))
                continue
            except OSError:  # the file cannot be read (an I/O error): this partition only
                tresp.partitions.append(_error(fp.partition, E.ErrorCode.KAFKA_STORAGE_ERROR, part))
                continue
            region = result.region if result is not None else None
            size = len(region) if region is not None else 0
            total += size
            if size and req.replica_id >= 0 and hasattr(broker, "on_replica_read"):
                broker.on_replica_read(part, req.replica_id, size)  # cluster mode: the leader's replication throttle
            tresp.partitions.append(PartData(
                partition_index=fp.partition, error_code=0, high_watermark=hw, last_stable_offset=hw,
                log_start_offset=part.log_start_offset,
                aborted_transactions=[] if req.isolation_level == READ_COMMITTED else None,
                preferred_read_replica=-1, records=region if size else b""))
        responses.append(tresp)
    return responses, total


def cluster_fetch_error(broker, part, replica_id: int) -> int:
    """Cluster mode: NOT_LEADER_OR_FOLLOWER unless this broker leads the partition."""
    return broker.fetch_error(part, replica_id) if getattr(broker, "cluster", None) is not None else 0


def cluster_upper_bound(broker, part, replica_id: int, hw: int) -> int:
    """Cluster mode: followers (replica_id >= 0) read up to the log end, consumers to the HW."""
    return broker.fetch_upper_bound(part, replica_id) if getattr(broker, "cluster", None) is not None else hw


@handles(FetchRequest, 4, 12)
async def handle(broker, ctx, req: FetchRequest, version: int) -> FetchResponse:
    if version >= 7 and req.session_id != 0:
        return FetchResponse(throttle_time_ms=0, error_code=E.ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                             session_id=0, responses=[])
    plan = []
    refused = []  # topics the principal may not read (a replica_id needs ClusterAction)
    for ft in req.topics:
        if fetch_denied(broker, ctx, req.replica_id, ft.topic):
            refused.append(TopicResp(topic=ft.topic, partitions=[
                _error(fp.partition, E.ErrorCode.TOPIC_AUTHORIZATION_FAILED) for fp in ft.partitions]))
            continue
        parts = [(fp, broker.get_partition(ft.topic, fp.partition)) for fp in ft.partitions]
        plan.append((ft.topic, parts, TopicResp(topic=ft.topic, partitions=[])))
    if req.replica_id >= 0 and getattr(broker, "cluster", None) is not None:
        for _, parts, _ in plan:  # a follower's fetch offset is its log end: the leader tracks it
            for fp, part in parts:
                if part is not None:
                    broker.on_replica_fetch(part, req.replica_id, fp.fetch_offset)
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000.0
    while True:
        responses, total = _read_all(broker, req, version, plan)
        remaining = deadline - time.monotonic()
        if total >= req.min_bytes or remaining <= 0 or not plan or not broker.started:
            break
        live = [p for _, fps, _ in plan for _, p in fps if p is not None]
        if not live:
            break
        await broker.wait_for_data(live, remaining)
        if time.monotonic() >= deadline:
            responses, total = _read_all(broker, req, version, plan)
            break
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses + refused)
