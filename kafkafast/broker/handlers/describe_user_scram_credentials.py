"""DescribeUserScramCredentials (key 50), version 0.

Mechanisms and iteration counts (never salts or keys) of the named users, or of every user
for a null/empty list. A user without credentials: RESOURCE_NOT_FOUND; a name given twice:
DUPLICATE_RESOURCE. Needs Describe on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""
from collections import Counter

from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafkafast.security import acl
from kafkafast.security.context import allowed, security_of
from kafkafast.security.scram import MECHANISMS

R = DescribeUserScramCredentialsResponse
Result = R.DescribeUserScramCredentialsResult


@handles(DescribeUserScramCredentialsRequest, 0, 0)
async def handle(broker, ctx, req, version: int):
    if not allowed(broker, ctx, acl.DESCRIBE, acl.CLUSTER):
        return R(throttle_time_ms=0, error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                 results=[])
    users = security_of(broker).scram.users()
    names = [u.name for u in req.users] if req.users else sorted(users)
    seen = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if seen[name] > 1:
            results.append(Result(user=name, error_code=E.ErrorCode.DUPLICATE_RESOURCE,
                                  error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                                f"single request: {name}", credential_infos=[]))
        elif name not in users:
            results.append(Result(user=name, error_code=E.ErrorCode.RESOURCE_NOT_FOUND,
                                  error_message=f"Attempt to describe a user credential that does not exist: {name}",
                                  credential_infos=[]))
        else:
            results.append(Result(user=name, error_code=0, error_message=None, credential_infos=[
                R.CredentialInfo(mechanism=MECHANISMS[m][1], iterations=c.iterations)
                for m, c in sorted(users[name].items())]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
