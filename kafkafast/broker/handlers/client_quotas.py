"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), versions 0-1.

Quotas per user, client-id, user + client-id (a null name is that type's default) and ip,
stored with the broker's dynamic configs: in the log dir (`kafkafast/broker/dynamic_configs.py`),
or in a cluster where Kafka's ZooKeeper mode keeps them (`/config/users`, `/config/clients`,
`/config/ips`, with change notifications every broker takes: `cluster/dynamic_configs.py`).
Describe filters as Kafka does: a component matches its entity type EXACT by name (0),
the DEFAULT entity (1) or any SPECIFIED, non-default name (2); `strict` leaves out entities
with other types besides. Alter: a value sets a key, `remove` deletes it; keys Kafka does not
know for the entity (producer_byte_rate, consumer_byte_rate, request_percentage,
controller_mutation_rate; connection_creation_rate for ip) and bad combinations answer
INVALID_REQUEST per entry; nothing of a failed entry is stored, `validate_only` stores
nothing. DescribeConfigs / AlterConfigs on the cluster resource is needed (CLUSTER_AUTHORIZATION_FAILED).
"""
import asyncio

from kafkafast.broker.dynamic_configs import check_quota_entity
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from kafkafast.protocol._generated.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafkafast.security import acl
from kafkafast.security.context import denied

EXACT, DEFAULT, SPECIFIED = 0, 1, 2
D = DescribeClientQuotasResponse
A = AlterClientQuotasResponse


def _matches(entity: dict, components, strict: bool) -> bool:
    for c in components:
        if c.entity_type not in entity:
            return False
        name = entity[c.entity_type]
        if c.match_type == EXACT and name != c.match:
            return False
        if c.match_type == DEFAULT and name is not None:
            return False
        if c.match_type == SPECIFIED and name is None:
            return False
    return not strict or set(entity) == {c.entity_type for c in components}


@handles(DescribeClientQuotasRequest, 0, 1)
async def describe(broker, ctx, req: DescribeClientQuotasRequest, version: int) -> DescribeClientQuotasResponse:
    code = denied(broker, ctx, acl.DESCRIBE_CONFIGS, acl.CLUSTER)
    if code:
        return D(throttle_time_ms=0, error_code=code, error_message="not authorized to describe quotas", entries=None)
    for c in req.components:
        if c.match_type not in (EXACT, DEFAULT, SPECIFIED) or (c.match_type == EXACT and c.match is None):
            return D(throttle_time_ms=0, error_code=E.ErrorCode.INVALID_REQUEST,
                     error_message=f"invalid match {c.match_type} for {c.entity_type}", entries=None)
    entries = []
    for entity, values in broker.dynamic.quotas().items():
        if _matches(dict(entity), req.components, req.strict):
            entries.append(D.EntryData(
                entity=[D.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                values=[D.ValueData(key=k, value=float(v)) for k, v in sorted(values.items())]))
    return D(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


@handles(AlterClientQuotasRequest, 0, 1)
async def alter(broker, ctx, req: AlterClientQuotasRequest, version: int) -> AlterClientQuotasResponse:
    results, changes = [], []
    refused = denied(broker, ctx, acl.ALTER_CONFIGS, acl.CLUSTER)
    for entry in req.entries:
        entity = tuple((e.entity_type, e.entity_name) for e in entry.entity)
        ops = {op.key: None if op.remove else float(op.value) for op in entry.ops}
        code, message = refused, "not authorized to alter quotas" if refused else None
        if not code:
            try:
                check_quota_entity(entity, ops)
                changes.append((tuple(sorted(entity)), ops))
            except E.KafkaError as exc:
                code, message = exc.code, exc.message
        results.append(A.EntryData(error_code=code, error_message=message,
                                   entity=[A.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                                           for e in entry.entity]))
    if changes and not req.validate_only:
        await asyncio.to_thread(broker.dynamic.alter_quotas, changes)  # a file, or ZooKeeper
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=results)
