"""Share groups in cluster mode: not served yet (the share-partition state would have to live
at each partition's leader and the share coordinator move with its `__share_group_state`
partition's leadership), so a cluster broker advertises none of the share APIs, and a request
for one is refused like any unknown API (the connection is closed) by the worker that got it
(never forwarded to the group's worker, whose refusal would close the link between them)."""
from __future__ import annotations

import pytest

from kafkafast.broker.share import SHARE_API_KEYS
from kafkafast.protocol import api
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.support.raw_client import RawClient


@pytest.mark.parametrize("cluster", [0, 2], indirect=True)
def test_cluster_brokers_do_not_serve_the_share_apis(cluster):
    for broker in cluster.brokers.values():
        with RawClient(broker.port, timeout=30) as rc:
            keys = {k.api_key for k in rc.request(ApiVersionsRequest(), 3).api_keys}
        assert not keys & SHARE_API_KEYS
        assert {68, 69} <= keys  # the consumer group protocol is served
    port = next(iter(cluster.brokers.values())).port
    for request in (ShareGroupHeartbeatRequest(group_id="sg", member_id="m", member_epoch=0,
                                               subscribed_topic_names=["t"]),
                    ShareGroupDescribeRequest(group_ids=["sg", "other"])):
        with RawClient(port, timeout=30) as rc:
            rc.send_raw(api.encode_request(request, 1, 7, "raw"))
            assert rc.recv_frame() is None  # closed, as for an unknown API key
    for _ in range(6):  # the broker goes on answering, on any worker
        with RawClient(port, timeout=30) as rc:
            assert rc.request(FindCoordinatorRequest(key="g1", key_type=0), 3).error_code in (0, 15)
