"""Share groups under the ACL authorizer, as Kafka checks them: ShareGroupHeartbeat needs READ on
the group and DESCRIBE on the subscribed topics, ShareFetch / ShareAcknowledge READ on the group
and READ on each topic, ShareGroupDescribe DESCRIBE on the group, and the group configs
ALTER_CONFIGS on the group (DescribeConfigs DESCRIBE_CONFIGS, which ALTER_CONFIGS implies)."""
from __future__ import annotations

import pytest

from kafkafast.protocol._generated.describe_configs import DescribeConfigsRequest
from kafkafast.protocol._generated.incremental_alter_configs import IncrementalAlterConfigsRequest
from kafkafast.protocol._generated.metadata import MetadataRequest
from kafkafast.protocol._generated.share_fetch import ShareFetchRequest
from kafkafast.protocol._generated.share_group_describe import ShareGroupDescribeRequest
from kafkafast.protocol._generated.share_group_heartbeat import ShareGroupHeartbeatRequest
from kafkafast.protocol.errors import ErrorCode as EC
from tests.security.test_authorization import acl, admin, grant, login, start

pytestmark = pytest.mark.timeout(120)


def test_share_group_apis_need_read_on_the_group_and_the_topic(tmp_path):
    broker, port = start(tmp_path / "data")
    try:
        from confluent_kafka.admin import NewTopic
        import confluent_kafka as ck

        for fut in admin(port, "admin").create_topics([NewTopic("jobs", 1, 1)]).values():
            fut.result(30)
        p = ck.Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("jobs", b"job-1")
        assert p.flush(20) == 0
        IAC = IncrementalAlterConfigsRequest
        with login(port, "bob") as c:
            hb = ShareGroupHeartbeatRequest(group_id="workers", member_id="m1", member_epoch=0,
                                            subscribed_topic_names=["jobs"])
            assert c.request(hb, 1).error_code == EC.GROUP_AUTHORIZATION_FAILED
            alter = IAC(resources=[IAC.AlterConfigsResource(resource_type=32, resource_name="workers", configs=[
                IAC.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest")])])
            assert c.request(alter, 1).responses[0].error_code == EC.GROUP_AUTHORIZATION_FAILED
            describe = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=32, resource_name="workers", configuration_keys=["share.auto.offset.reset"])])
            assert c.request(describe, 4).results[0].error_code == EC.GROUP_AUTHORIZATION_FAILED
            assert c.request(ShareGroupDescribeRequest(group_ids=["workers"]), 1).groups[0].error_code == \
                EC.GROUP_AUTHORIZATION_FAILED
            grant(port, acl("GROUP", "workers", "User:bob", "READ"), acl("GROUP", "workers", "User:bob", "ALTER_CONFIGS"))
            assert c.request(alter, 1).responses[0].error_code == 0
            assert [(r.error_code, [(e.name, e.value) for e in r.configs]) for r in c.request(describe, 4).results] == [
                (0, [("share.auto.offset.reset", "earliest")])]
            assert c.request(hb, 1).error_code == EC.TOPIC_AUTHORIZATION_FAILED
            grant(port, acl("TOPIC", "jobs", "User:bob", "DESCRIBE"))
            assert c.request(hb, 1).error_code == 0
            assert c.request(ShareGroupDescribeRequest(group_ids=["workers"]), 1).groups[0].error_code == 0  # READ implies DESCRIBE
            tid = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="jobs")]), 12).topics[0].topic_id
            F = ShareFetchRequest
            fetch = F(group_id="workers", member_id="m1", share_session_epoch=0, max_wait_ms=100, min_bytes=1,
                      max_records=10, batch_size=10, topics=[F.FetchTopic(topic_id=tid, partitions=[
                          F.FetchPartition(partition_index=0)])])
            part = c.request(fetch, 1).responses[0].partitions[0]
            assert part.error_code == EC.TOPIC_AUTHORIZATION_FAILED and not part.acquired_records
            grant(port, acl("TOPIC", "jobs", "User:bob", "READ"))
            part = c.request(fetch, 1).responses[0].partitions[0]
            assert (part.error_code, [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]) \
                == (0, [(0, 0, 1)])
        with login(port, "eve") as c:
            fetch.member_id = "m2"
            assert c.request(fetch, 1).error_code == EC.GROUP_AUTHORIZATION_FAILED
    finally:
        broker.kill()
