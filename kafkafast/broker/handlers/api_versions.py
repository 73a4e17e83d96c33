"""ApiVersions (key 18), versions 0-3.

Answers with the version range of every registered handler (the registry is the only
source). A request for a version above 3 gets UNSUPPORTED_VERSION with a v0 body that
still lists what we support, so the client can retry with a version we speak.

Version profile (`kafkafast broker --as-kafka 2.4`, property `kafkafast.as.kafka`): the
broker advertises and serves only the intersection of each handler's range with what
that Kafka release served (`kafkafast/broker/kafka_releases.py`); an API the release did
not have is not served at all. A request above the profile is then treated as Kafka
treats any version it does not know: ApiVersions answers UNSUPPORTED_VERSION, any other
API closes the connection.
"""
from __future__ import annotations

import dataclasses

from kafkafast.broker.kafka_releases import release_versions
from kafkafast.broker.registry import HandlerSpec, handles
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafkafast.protocol.errors import UnsupportedVersionError

Version = ApiVersionsResponse.ApiVersion
PROFILE_PROPERTY = "kafkafast.as.kafka"


def served_handlers(handlers: dict[int, HandlerSpec], as_kafka: str | None) -> dict[int, HandlerSpec]:
    """The handlers a broker serves: all of them, or narrowed to a Kafka release's versions."""
    if not as_kafka:
        return dict(handlers)
    release = release_versions(as_kafka)
    out = {}
    for key, spec in handlers.items():
        if key not in release:
            continue
        low, high = max(spec.min_version, release[key][0]), min(spec.max_version, release[key][1])
        if low <= high:
            out[key] = dataclasses.replace(spec, min_version=low, max_version=high)
    return out


CONSUMER_PROTOCOL_KEYS = (68, 69)  # ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848)


def enabled_group_protocols(handlers: dict[int, HandlerSpec], setting: str | None) -> dict[int, HandlerSpec]:
    """Without "consumer" in `group.coordinator.rebalance.protocols` (Kafka 4.0's setting,
    default "classic,consumer") the KIP-848 APIs are neither advertised nor served."""
    protocols = {p.strip().lower() for p in (setting or "classic,consumer").split(",")}
    if "consumer" in protocols:
        return handlers
    return {k: s for k, s in handlers.items() if k not in CONSUMER_PROTOCOL_KEYS}


def _api_list(broker) -> list:
    return [Version(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
            for s in sorted(broker.handlers.values(), key=lambda s: s.api_key)]


def unsupported_version_response(broker) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=UnsupportedVersionError.code, api_keys=_api_list(broker))


@handles(ApiVersionsRequest, 0, 3)
async def handle(broker, ctx, req: ApiVersionsRequest, version: int) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, api_keys=_api_list(broker), throttle_time_ms=0)
