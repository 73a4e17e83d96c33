"""DeleteAcls (key 31), versions 0-3.

Removes every ACL matching each filter (same matching as DescribeAcls) and lists what
each filter removed. Needs Alter on the cluster; SECURITY_DISABLED without an authorizer.
"""
import asyncio

from kafkafast.broker.handlers.describe_acls import acl_filter
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from kafkafast.security import acl
from kafkafast.security.context import allowed, security_of

FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
Matching = DeleteAclsResponse.DeleteAclsMatchingAcl


@handles(DeleteAclsRequest, 0, 3)
async def handle(broker, ctx, req: DeleteAclsRequest, version: int) -> DeleteAclsResponse:
    authorizer = security_of(broker).authorizer
    if authorizer is None or not allowed(broker, ctx, acl.ALTER, acl.CLUSTER):
        code = E.ErrorCode.SECURITY_DISABLED if authorizer is None else E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            FilterResult(error_code=code, error_message=None, matching_acls=[]) for _ in req.filters])
    deleted = await asyncio.to_thread(authorizer.delete, [acl_filter(f) for f in req.filters])
    broker.notify_acls_changed()  # every worker applies it to the requests after this answer
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        FilterResult(error_code=0, error_message=None, matching_acls=[
            Matching(error_code=0, error_message=None, resource_type=a.resource_type, resource_name=a.resource_name,
                     pattern_type=a.pattern_type, principal=a.principal, host=a.host, operation=a.operation,
                     permission_type=a.permission_type) for a in gone])
        for gone in deleted])
