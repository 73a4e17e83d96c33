"""ApiVersions (key 18), versions 0-3.

Answers with the version range of every registered handler (the registry is the only
source). A request for a version above 3 gets UNSUPPORTED_VERSION with a v0 body that
still lists what we support, so the client can retry with a version we speak.
"""
from kafkafast.broker.registry import HANDLERS, handles
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafkafast.protocol.errors import UnsupportedVersionError

Version = ApiVersionsResponse.ApiVersion


def _api_list() -> list:
    return [Version(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
            for s in sorted(HANDLERS.values(), key=lambda s: s.api_key)]


def unsupported_version_response(broker) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=UnsupportedVersionError.code, api_keys=_api_list())


@handles(ApiVersionsRequest, 0, 3)
async def handle(broker, ctx, req: ApiVersionsRequest, version: int) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, api_keys=_api_list(), throttle_time_ms=0)
