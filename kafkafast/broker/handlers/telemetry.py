"""GetTelemetrySubscriptions (key 71) and PushTelemetry (key 72), version 0 (KIP-714).

Answered as a Kafka broker without a client-metrics receiver plugin and without
client-metrics subscriptions answers: the client gets an instance id (a new random one
when it sent the zero UUID), subscription id 0 and an empty `requested_metrics` list, which
tells it to push nothing; `push_interval_ms` is Kafka's default 300000. A push with
subscription id 0 is accepted and its payload dropped (bounded by `telemetry_max_bytes`,
else TELEMETRY_TOO_LARGE); any other subscription id answers UNKNOWN_SUBSCRIPTION_ID, a
zero instance id INVALID_REQUEST, as Kafka's ClientMetricsManager does.
"""
import uuid

from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from kafkafast.protocol._generated.push_telemetry import PushTelemetryRequest, PushTelemetryResponse
from kafkafast.protocol.primitives import ZERO_UUID

NO_SUBSCRIPTION = 0
PUSH_INTERVAL_MS = 300_000
TELEMETRY_MAX_BYTES = 1024 * 1024


@handles(GetTelemetrySubscriptionsRequest, 0, 0)
async def get_subscriptions(broker, ctx, req: GetTelemetrySubscriptionsRequest,
                            version: int) -> GetTelemetrySubscriptionsResponse:
    instance = bytes(req.client_instance_id)
    if instance == ZERO_UUID:
        instance = uuid.uuid4().bytes
    return GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=0, client_instance_id=instance, subscription_id=NO_SUBSCRIPTION,
        accepted_compression_types=[], push_interval_ms=PUSH_INTERVAL_MS, telemetry_max_bytes=TELEMETRY_MAX_BYTES,
        delta_temporality=True, requested_metrics=[])


@handles(PushTelemetryRequest, 0, 0)
async def push(broker, ctx, req: PushTelemetryRequest, version: int) -> PushTelemetryResponse:
    if bytes(req.client_instance_id) == ZERO_UUID:
        code = E.ErrorCode.INVALID_REQUEST
    elif req.subscription_id != NO_SUBSCRIPTION:
        code = E.ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    elif len(req.metrics) > TELEMETRY_MAX_BYTES:
        code = E.ErrorCode.TELEMETRY_TOO_LARGE
    else:
        code = 0
    return PushTelemetryResponse(throttle_time_ms=0, error_code=code)
