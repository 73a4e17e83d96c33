"""CreateAcls (key 30), versions 0-3.

Adds each ACL to the authorizer's store (an existing identical ACL is not duplicated);
an invalid one (unknown type, operation or permission, ANY/MATCH patterns, a cluster
resource not named kafka-cluster, a principal without `Type:`) gets INVALID_REQUEST with
Kafka's message. Needs Alter on the cluster; SECURITY_DISABLED without an authorizer.
"""
import asyncio

from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.create_acls import CreateAclsRequest, CreateAclsResponse
from kafkafast.security import acl
from kafkafast.security.context import allowed, security_of

Result = CreateAclsResponse.AclCreationResult


@handles(CreateAclsRequest, 0, 3)
async def handle(broker, ctx, req: CreateAclsRequest, version: int) -> CreateAclsResponse:
    authorizer = security_of(broker).authorizer
    if authorizer is None:
        code, msg = E.ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker"
    elif not allowed(broker, ctx, acl.ALTER, acl.CLUSTER):
        code, msg = E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    else:
        code, msg = 0, None
    if code:
        return CreateAclsResponse(throttle_time_ms=0, results=[Result(error_code=code, error_message=msg)
                                                               for _ in req.creations])
    results, valid = [], []
    for c in req.creations:
        a = acl.Acl(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                    c.permission_type)
        problem = acl.validate(a)
        results.append(Result(error_code=E.ErrorCode.INVALID_REQUEST if problem else 0, error_message=problem))
        if not problem:
            valid.append(a)
    if valid:  # a file write or ZooKeeper round trips: off the loop
        await asyncio.to_thread(authorizer.create, valid)
        broker.notify_acls_changed()  # every worker applies it to the requests after this answer
    return CreateAclsResponse(throttle_time_ms=0, results=results)
