"""DescribeCluster (key 60), versions 0-1: this broker, the cluster id, the controller, and
the cluster operations the principal may perform when `include_cluster_authorized_operations`."""
from kafkafast.broker.registry import handles
from kafkafast.broker.handlers.metadata import AUTH_OPS_UNSET
from kafkafast.protocol._generated.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import authorized_operations

BROKERS_ENDPOINT = 1


@handles(DescribeClusterRequest, 0, 1)
async def handle(broker, ctx, req: DescribeClusterRequest, version: int) -> DescribeClusterResponse:
    if version >= 1 and req.endpoint_type != BROKERS_ENDPOINT:
        return DescribeClusterResponse(throttle_time_ms=0, error_code=E.ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message="only broker endpoints are served",
                                       endpoint_type=req.endpoint_type, cluster_id=broker.cluster_id,
                                       controller_id=-1, brokers=[])
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKERS_ENDPOINT,
        cluster_id=broker.cluster_id, controller_id=broker.control.controller_id(),
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r)
                 for i, h, p, r in broker.control.brokers_for(ctx)],
        cluster_authorized_operations=cluster_operations(broker, ctx, req))


def cluster_operations(broker, ctx, req) -> int:
    if not req.include_cluster_authorized_operations:
        return AUTH_OPS_UNSET
    return authorized_operations(broker, ctx, acl.CLUSTER)
