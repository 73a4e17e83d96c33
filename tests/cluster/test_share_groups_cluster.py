"""Share groups in cluster mode: not served yet (the share-partition state would have to live
at each partition's leader and the share coordinator move with its `__share_group_state`
partition's leadership), so a cluster broker advertises none of the share APIs and a share
consumer sees a broker without them, rather than one that would lose state on a failover."""
from __future__ import annotations

from kafkafast.broker.share import SHARE_API_KEYS
from kafkafast.protocol._generated.api_versions import ApiVersionsRequest
from tests.support.raw_client import RawClient


def test_cluster_brokers_do_not_advertise_the_share_apis(cluster):
    for broker in cluster.brokers.values():
        with RawClient(broker.port, timeout=30) as rc:
            keys = {k.api_key for k in rc.request(ApiVersionsRequest(), 3).api_keys}
        assert not keys & SHARE_API_KEYS
        assert {68, 69} <= keys  # the consumer group protocol is served
