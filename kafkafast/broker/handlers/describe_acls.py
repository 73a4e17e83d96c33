"""DescribeAcls (key 29), versions 0-3.

The ACLs matching the filter (ANY/null fields match everything; pattern type MATCH
returns every ACL that applies to the named resource), grouped by resource pattern.
Needs Describe on the cluster (CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED when no
authorizer is configured. v0 has no pattern type (LITERAL).
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from kafkafast.security import acl
from kafkafast.security.context import allowed, security_of


def acl_filter(f) -> acl.AclFilter:
    """AclFilter from a DescribeAcls request or a DeleteAcls filter (same field names)."""
    return acl.AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                         f.principal_filter, f.host_filter, f.operation, f.permission_type)


def _error(code, message):
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])


@handles(DescribeAclsRequest, 0, 3)
async def handle(broker, ctx, req: DescribeAclsRequest, version: int) -> DescribeAclsResponse:
    authorizer = security_of(broker).authorizer
    if authorizer is None:
        return _error(E.ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not allowed(broker, ctx, acl.DESCRIBE, acl.CLUSTER):
        return _error(E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    flt = acl_filter(req)
    if flt.resource_type == acl.UNKNOWN or flt.pattern_type == acl.UNKNOWN or flt.operation == acl.UNKNOWN \
            or flt.permission_type == acl.UNKNOWN:
        return _error(E.ErrorCode.INVALID_REQUEST, "The filter has UNKNOWN fields")
    groups: dict = {}
    for a in authorizer.acls(flt):
        groups.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
            DescribeAclsResponse.AclDescription(principal=a.principal, host=a.host, operation=a.operation,
                                                permission_type=a.permission_type))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        DescribeAclsResponse.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in groups.items()])
