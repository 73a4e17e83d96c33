"""AlterUserScramCredentials (key 51), version 0.

Upserts (salt and salted password computed by the client; the broker keeps only
StoredKey/ServerKey) and deletions of SCRAM credentials, per user: an unknown mechanism
UNSUPPORTED_SASL_MECHANISM; iterations outside 4096..16384, an empty salt or salted
password, or an empty user name UNACCEPTABLE_CREDENTIAL; a user named in more than one
change DUPLICATE_RESOURCE; deleting a credential that does not exist RESOURCE_NOT_FOUND.
A user's changes apply only if all of them are valid. Needs Alter on the cluster.
"""
import asyncio
from collections import Counter

from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kafkafast.security import acl
from kafkafast.security.context import allowed, security_of
from kafkafast.security.scram import MAX_ITERATIONS, MECHANISM_BY_CODE, MIN_ITERATIONS, ScramCredential

Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def _problem(change, store, upsert: bool):
    mech = MECHANISM_BY_CODE.get(change.mechanism)
    if mech is None:
        return E.ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism type {change.mechanism}"
    if not change.name:
        return E.ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if upsert:
        if not MIN_ITERATIONS <= change.iterations <= MAX_ITERATIONS:
            return E.ErrorCode.UNACCEPTABLE_CREDENTIAL, (f"Iterations must be between {MIN_ITERATIONS} and "
                                                         f"{MAX_ITERATIONS}")
        if not change.salt or not change.salted_password:
            return E.ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    elif store.get(change.name, mech) is None:
        return E.ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


@handles(AlterUserScramCredentialsRequest, 0, 0)
async def handle(broker, ctx, req, version: int):
    changes = [(d, False) for d in req.deletions or []] + [(u, True) for u in req.upsertions or []]
    names = list(dict.fromkeys(c.name for c, _ in changes))
    if not allowed(broker, ctx, acl.ALTER, acl.CLUSTER):
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=n, error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None) for n in names])
    store = security_of(broker).scram
    counts = Counter((c.name, c.mechanism) for c, _ in changes)
    errors: dict[str, tuple] = {}
    for c, upsert in changes:
        if c.name in errors:
            continue
        if counts[(c.name, c.mechanism)] > 1:
            errors[c.name] = (E.ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the "
                                                              "same request")
            continue
        problem = _problem(c, store, upsert)
        if problem:
            errors[c.name] = problem
    upserts = [(c.name, MECHANISM_BY_CODE[c.mechanism],
                ScramCredential.from_salted_password(MECHANISM_BY_CODE[c.mechanism], bytes(c.salt), c.iterations,
                                                     bytes(c.salted_password)))
               for c, upsert in changes if upsert and c.name not in errors]
    deletes = [(c.name, MECHANISM_BY_CODE[c.mechanism]) for c, upsert in changes if not upsert and c.name not in errors]
    if upserts or deletes:
        await asyncio.to_thread(store.change, upserts, deletes)  # a file write or ZooKeeper round trips
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        Result(user=n, error_code=errors.get(n, (0, None))[0], error_message=errors.get(n, (0, None))[1])
        for n in names])
