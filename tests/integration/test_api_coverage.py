"""Every API the broker advertises in ApiVersions answers a request at its lowest and its
highest advertised version: requests made by the generated codecs (their defaults), each on
a fresh connection, must get a response with the request's correlation id that decodes at
that version to its last byte, carries neither UNSUPPORTED_VERSION nor UNKNOWN_SERVER_ERROR
anywhere, and leaves the broker serving. The cases are made from the handler registry, and
the registry must be what a broker advertises, so an API or version cannot be advertised
without being called here. What each API does is tested with real requests elsewhere
(test_protocol_apis.py, test_client_matrix.py, ...)."""
from __future__ import annotations

import pytest

from kafkafast.broker.registry import load_handlers
from kafkafast.protocol import api
from kafkafast.protocol._generated import REQUESTS, RESPONSES
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol.errors import ErrorCode
from kafkafast.protocol.primitives import Reader
from tests.support.broker_process import api_versions_ok
from tests.support.raw_client import RawClient

SPECS = sorted(load_handlers().values(), key=lambda s: s.api_key)
# APIs whose default request gets no answer by design, and what is sent instead.
NO_ANSWER = {0: {"acks": 1}}  # Produce with acks=0 is not answered


def request_for(api_key: int):
    req = REQUESTS[api_key]()
    for name, value in NO_ANSWER.get(api_key, {}).items():
        setattr(req, name, value)
    return req


def test_advertised_is_the_registry(module_broker):
    with RawClient(module_broker.port) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert advertised == {s.api_key: (s.min_version, s.max_version) for s in SPECS}
    for key, at_least in {0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9)}.items():
        assert advertised[key][0] <= at_least[0] and advertised[key][1] >= at_least[1], key


@pytest.mark.parametrize("spec,version", [(s, v) for s in SPECS for v in sorted({s.min_version, s.max_version})],
                         ids=lambda x: getattr(x, "name", str(x)))
def test_every_api_answers_at_its_lowest_and_highest_version(module_broker, spec, version):
    with RawClient(module_broker.port) as c:
        c.correlation += 1
        c.send_raw(api.encode_request(request_for(spec.api_key), version, c.correlation, "coverage"))
        frame = c.recv_frame()
    assert frame is not None, "the broker closed the connection"
    r = Reader(frame)
    assert api.ResponseHeader.decode(r, api.response_header_version(spec.api_key, version)).correlation_id == c.correlation
    resp = RESPONSES[spec.api_key].decode(r, version)
    assert r.remaining() == 0, f"{r.remaining()} bytes after a v{version} {spec.name} response"
    assert type(resp).__name__ == spec.name + "Response"
    assert not {ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNKNOWN_SERVER_ERROR} & set(error_codes(resp))
    assert api_versions_ok(module_broker.port)


def error_codes(obj) -> list[int]:
    """Every `error_code` in a decoded message, nested ones included."""
    out = []
    for name in getattr(type(obj), "__slots__", ()):
        value = getattr(obj, name, None)
        if name == "error_code":
            out.append(value)
        for item in value if isinstance(value, list) else [value]:
            if hasattr(type(item), "__slots__"):
                out += error_codes(item)
    return out


def test_error_codes_finds_nested_codes():
    from kafkafast.protocol._generated.list_offsets import ListOffsetsResponse as LO

    resp = LO(topics=[LO.ListOffsetsTopicResponse(name="t", partitions=[
        LO.ListOffsetsPartitionResponse(partition_index=0, error_code=35)])])
    assert error_codes(resp) == [35]
