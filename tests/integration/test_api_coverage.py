"""Every API the broker advertises in ApiVersions answers a request at its lowest and its
highest advertised version: requests made by the generated codecs (defaults, plus a topic
or group name where the API needs one), each on a fresh connection, must get a decodable
response with the request's correlation id and must leave the broker serving."""
from __future__ import annotations

import pytest

from kafkafast.broker.registry import load_handlers
from kafkafast.protocol._generated import REQUESTS
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
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
        resp = c.request(request_for(spec.api_key), version)
    assert type(resp).__name__ == spec.name + "Response"
    assert api_versions_ok(module_broker.port)
