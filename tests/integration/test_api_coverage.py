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


# The APIs that address topics, partitions or groups, called at their lowest and highest version
# with a real topic ("cov": 1 partition, 5 records) and group ("cov-g": offset 3 committed)
# rather than the empty default request, and checked for what they answer about them.
TOPIC, GROUP, RECORDS, COMMITTED = "cov", "cov-g", 5, 3


@pytest.fixture(scope="module")
def named(module_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
    p = Producer({"bootstrap.servers": module_broker.bootstrap})
    for i in range(RECORDS):
        p.produce(TOPIC, b"v%d" % i, partition=0)
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": GROUP})
    c.commit(offsets=[TopicPartition(TOPIC, 0, COMMITTED)], asynchronous=False)
    c.close()
    with RawClient(module_broker.port) as rc:
        (meta,) = rc.request(REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name=TOPIC)]), 12).topics
    return module_broker, meta.topic_id


def _partitions(resp, topics="topics", parts="partitions"):
    return [p for t in getattr(resp, topics) for p in getattr(t, parts)]


def named_case(api_key: int, version: int, topic_id):
    """(request, check(response)) for one API at one version."""
    R = REQUESTS[api_key]
    if api_key == 1:  # Fetch: by name up to v12, by topic id from v13
        req = R(max_wait_ms=0, min_bytes=0, topics=[R.FetchTopic(topic=TOPIC, topic_id=topic_id, partitions=[
            R.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        return req, lambda r: [(p.error_code, p.high_watermark, len(p.records) > 0)
                               for p in _partitions(r, "responses")] == [(0, RECORDS, True)]
    if api_key == 2:  # ListOffsets: the latest offset (v0 answers it in old_style_offsets)
        req = R(replica_id=-1, topics=[R.ListOffsetsTopic(name=TOPIC, partitions=[
            R.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
        return req, lambda r: [(p.error_code, p.old_style_offsets if version == 0 else p.offset)
                               for p in _partitions(r)] == [(0, [RECORDS] if version == 0 else RECORDS)]
    if api_key == 3:
        req = R(topics=[R.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False)
        return req, lambda r: [(t.error_code, t.name, len(t.partitions)) for t in r.topics] == [(0, TOPIC, 1)]
    if api_key == 8:  # a standalone commit (no generation) of the offset already committed
        req = R(group_id=GROUP, topics=[R.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            R.OffsetCommitRequestPartition(partition_index=0, committed_offset=COMMITTED)])])
        return req, lambda r: [p.error_code for p in _partitions(r)] == [0]
    if api_key == 9:  # one group up to v7, a list of groups from v8
        req = R(group_id=GROUP, topics=[R.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])],
                groups=[R.OffsetFetchRequestGroup(group_id=GROUP, topics=[
                    R.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])])])
        if version >= 8:
            return req, lambda r: [(p.error_code, p.committed_offset) for g in r.groups
                                   for p in _partitions(g)] == [(0, COMMITTED)]
        return req, lambda r: [(p.error_code, p.committed_offset) for p in _partitions(r)] == [(0, COMMITTED)]
    if api_key == 10:  # one key up to v3, a list of keys from v4
        req = R(key=GROUP, coordinator_keys=[GROUP])
        if version >= 4:
            return req, lambda r: [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [(GROUP, 0, 0)]
        return req, lambda r: (r.error_code, r.node_id) == (0, 0)
    if api_key == 15:
        return R(groups=[GROUP]), lambda r: [(g.error_code, g.group_id, g.group_state) for g in r.groups] == [
            (0, GROUP, "Empty")]
    if api_key == 21:  # deletes nothing: up to offset 0
        req = R(timeout_ms=5000, topics=[R.DeleteRecordsTopic(name=TOPIC, partitions=[
            R.DeleteRecordsPartition(partition_index=0, offset=0)])])
        return req, lambda r: [(p.error_code, p.low_watermark) for p in _partitions(r)] == [(0, 0)]
    if api_key == 23:
        req = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=TOPIC, partitions=[
            R.OffsetForLeaderPartition(partition=0, leader_epoch=0)])])
        return req, lambda r: [(p.error_code, p.end_offset) for p in _partitions(r)] == [(0, RECORDS)]
    if api_key == 32:  # topic configs
        req = R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name=TOPIC, configuration_keys=None)])
        return req, lambda r: [(x.error_code, x.resource_name) for x in r.results] == [(0, TOPIC)] and \
            "cleanup.policy" in {c.name for c in r.results[0].configs}
    raise KeyError(api_key)


NAMED = [2, 1, 3, 8, 9, 10, 15, 21, 23, 32]


@pytest.mark.parametrize("spec,version", [(s, v) for s in SPECS if s.api_key in NAMED
                                          for v in sorted({s.min_version, s.max_version})],
                         ids=lambda x: getattr(x, "name", str(x)))
def test_topic_and_group_apis_at_their_lowest_and_highest_version(named, spec, version):
    broker, topic_id = named
    req, check = named_case(spec.api_key, version, topic_id)
    with RawClient(broker.port) as c:
        resp = c.request(req, version)
    assert check(resp), resp
