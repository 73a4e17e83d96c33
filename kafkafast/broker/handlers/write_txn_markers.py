"""WriteTxnMarkers (key 27), versions 0-1: the transaction coordinator asks the partition's
owner to append COMMIT/ABORT markers (between worker processes, over the forwarding path;
in cluster mode from the coordinator's broker to the partition's leader, which answers once
its ISR has the marker, NOT_LEADER_OR_FOLLOWER elsewhere: `cluster/transactions.py`). Needs
CLUSTER_ACTION. Per partition: NONE, UNKNOWN_TOPIC_OR_PARTITION, or the append's error
(KAFKA_STORAGE_ERROR, ...). A stale producer epoch (a newer epoch already wrote) counts as
done; a coordinator epoch older than the one of the producer's last marker in the partition
is TRANSACTION_COORDINATOR_FENCED and nothing is appended (a deposed coordinator)."""
from kafkafast.broker.registry import handles
from kafkafast.broker.txn_coordinator import append_marker, write_marker
from kafkafast.protocol._generated.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

R = WriteTxnMarkersResponse


@handles(WriteTxnMarkersRequest, 0, 1)
async def handle(broker, ctx, req: WriteTxnMarkersRequest, version: int) -> WriteTxnMarkersResponse:
    refused = denied(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER)
    out = []
    for marker in req.markers:
        topics = []
        for t in marker.topics:
            results = []
            for p in t.partition_indexes:
                part = broker.get_partition(t.name, p)
                if refused:
                    code = refused
                elif part is None:
                    code = (E.ErrorCode.NOT_LEADER_OR_FOLLOWER if broker.partition_exists(t.name, p)
                            else E.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif not ctx.internal:
                    code = await write_marker(broker, part, marker.producer_id, marker.producer_epoch,
                                              marker.transaction_result, marker.coordinator_epoch)
                else:  # from another worker of this broker, which wrote it here because this one owns it
                    code = append_marker(broker, part, marker.producer_id, marker.producer_epoch,
                                         marker.transaction_result, marker.coordinator_epoch)
                results.append(R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=code))
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=results))
        out.append(R.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    return R(markers=out)
